"""`--offload`'s host memory on any machine: the buffers that hold the weights stay out of forked children, and
more than the machine can give is refused before any is pinned."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import psutil
import pytest

from fsbench.errors import FsbenchError
from fsbench.harness.model import offload


def _maps_hold(address: int) -> bool:
    """Whether this process maps `address` (read from /proc/self/maps)."""
    spans = (line.split()[0].split("-") for line in Path("/proc/self/maps").read_text().splitlines())
    return any(int(low, 16) <= address < int(high, 16) for low, high in spans)


def test_a_forked_child_neither_sees_nor_copies_the_host_buffers():
    """imageio-ffmpeg forks (its `preexec_fn` rules out vfork) to start ffmpeg for every video; Linux copies a
    pinned page into the child at fork, so without MADV_DONTFORK each fork copied every offloaded weight."""
    buffer = offload.host_buffer(1 << 24)
    buffer.fill_(1)
    read, write = os.pipe()

    def report() -> None:  # runs in the forked child, before exec
        os.write(write, b"1" if _maps_hold(buffer.data_ptr()) else b"0")

    subprocess.run(["true"], preexec_fn=report, pass_fds=(write,), check=True)
    os.close(write)
    seen = os.read(read, 1)
    os.close(read)
    assert seen == b"0"
    assert _maps_hold(buffer.data_ptr()) and int(buffer.sum()) == 1 << 24


def test_more_host_memory_than_the_machine_has_is_refused_in_one_line():
    available = psutil.virtual_memory().available
    assert 0 < available <= os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    offload.check_host_memory(1 << 20)
    with pytest.raises(FsbenchError, match=r"^--offload pins 2305843009\.2 GB of host memory and [0-9.]+ GB is "):
        offload.check_host_memory(1 << 61)
