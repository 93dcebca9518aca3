"""One writer per run folder: a job holds an advisory lock (fcntl.flock on RUN/.lock) for as long as it writes
there, all its ranks together (rank 0 takes it for every rank). A second job fails at once,
naming the holder's PID. Holding the lock also makes it safe to delete what a killed job left half-written."""
from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from fsbench import rundir
from fsbench.errors import FsbenchError


@contextlib.contextmanager
def hold(*folders: Path) -> Iterator[None]:
    """Lock every folder in `folders` (created if missing) for the block, then clean their leftover staging."""
    with contextlib.ExitStack() as stack:
        for folder in folders:
            stack.enter_context(_lock(folder))
        for folder in folders:
            clean_staging(folder)
        yield


@contextlib.contextmanager
def _lock(folder: Path) -> Iterator[None]:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / rundir.LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise FsbenchError(f"cannot write to output directory {folder}: {exc.strerror}; pass --out DIR") from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise FsbenchError(f"{folder} is being written by another fsbench job (PID {holder}); wait for it to "
                               "finish or pass --out DIR") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


def is_staging(name: str) -> bool:
    """Names of half-written files and folders: `.tmp-*` (atomic writes, LoadGen's staging) and `.*.tmp[.mp4]`."""
    return name.startswith(".tmp-") or (name.startswith(".") and name.endswith((".tmp", ".tmp.mp4")))


def clean_staging(folder: Path) -> list[Path]:
    """Delete the staging files and folders a killed job left anywhere under `folder`; returns what went."""
    removed = []
    for root, dirs, files in os.walk(folder):
        for name in [d for d in dirs if is_staging(d)]:
            shutil.rmtree(Path(root) / name, ignore_errors=True)
            dirs.remove(name)
            removed.append(Path(root) / name)
        for name in files:
            if is_staging(name):
                (Path(root) / name).unlink(missing_ok=True)
                removed.append(Path(root) / name)
    return removed
