"""One writer per run folder: a job holds an advisory lock (fcntl.flock on RUN/.lock) for as long as it writes
there, all its ranks together (rank 0 takes it for every rank). A second job fails at once, naming the holder's
PID. Holding the lock also makes it safe to empty the folder's staging place of what a killed job left there, and
the temporaries that fsbench versions before the staging place left beside a run's LoadGen logs."""
from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from fsbench import files, rundir
from fsbench.errors import FsbenchError
from fsbench.folders import claim, refuse_foreign


@contextlib.contextmanager
def hold(*folders: Path, kind: str = "run") -> Iterator[None]:
    """Claim every folder in `folders` as fsbench's `kind` (`fsbench.folders.claim`: new, empty or already one),
    lock each for the block, then empty their staging places."""
    for folder in folders:
        refuse_foreign(folder, kind)  # every folder checked before the first is written
    with contextlib.ExitStack() as stack:
        for folder in folders:
            claim(folder, kind)
            stack.enter_context(_lock(folder))
        for folder in folders:
            files.clean_staging(folder)
            if kind == "run":
                for where in ("", "performance/", "TEST04/performance/"):
                    for left in folder.glob(f"*/{rundir.BENCHMARK}/*/{where}{files.TEMP_PREFIX}*"):
                        files.remove(left)
        yield


@contextlib.contextmanager
def _lock(folder: Path) -> Iterator[None]:
    path = files.guard_file(folder / rundir.LOCK)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except IsADirectoryError:
        raise FsbenchError(f"{path} is a folder, not fsbench's lock file: remove it (a job holds the lock in a "
                           "file of that name)") from None
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
