"""One writer per run folder: a job holds a lock on RUN/.lock (filelock's FileLock: flock, released by the kernel
when the job dies) for as long as it writes there, all its ranks together (rank 0 takes it for every rank). A second
job fails at once, naming the holder's PID, which the holder writes into the lock file. Holding the lock also makes
it safe to empty the folder's staging place of what a killed job left there, and the temporaries that fsbench
versions before the staging place left beside a run's LoadGen logs."""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import filelock

from fsbench import files, rundir
from fsbench.errors import FsbenchError
from fsbench.folders import claim, option, refuse_foreign


@contextlib.contextmanager
def hold(*folders: Path, kind: str = "run") -> Iterator[None]:
    """Claim every folder in `folders` as fsbench's `kind` (`fsbench.folders.claim`: new, empty or already one),
    lock each for the block, then empty their staging places."""
    for folder in folders:
        refuse_foreign(folder, kind)  # every folder checked before the first is written
    with contextlib.ExitStack() as stack:
        for folder in folders:
            claim(folder, kind)
            stack.enter_context(_lock(folder, kind))
        for folder in folders:
            files.clean_staging(folder)
            if kind == "run":
                for where in ("", "performance/", "TEST04/performance/"):
                    for left in folder.glob(f"*/{rundir.BENCHMARK}/*/{where}{files.TEMP_PREFIX}*"):
                        files.remove(left)
        yield


@contextlib.contextmanager
def _lock(folder: Path, kind: str) -> Iterator[None]:
    path = files.guard_file(folder / rundir.LOCK)
    held = filelock.FileLock(path, timeout=0, on_acquired=_write_pid)
    try:
        held.acquire()
    except filelock.Timeout:
        try:
            holder = path.read_text(errors="replace").strip()[:32] or "unknown"
        except OSError:
            holder = "unknown"
        raise FsbenchError(f"{folder} is being written by another fsbench job (PID {holder}); wait for it to "
                           f"finish or pass {option(kind)} DIR") from None
    except IsADirectoryError:
        raise FsbenchError(f"{path} is a folder, not fsbench's lock file: remove it (a job holds the lock in a "
                           "file of that name)") from None
    except OSError as exc:
        raise FsbenchError(f"cannot write to output directory {folder}: {exc.strerror}; pass {option(kind)} DIR"
                           ) from exc
    try:
        yield
    finally:
        held.release()


def _write_pid(fd: int) -> None:
    """The holder's PID in the lock file, for the message a second job gets."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
