"""Writing a file so that no reader ever sees half of it: `atomic_write` stages the bytes in a temporary file,
fsyncs it and renames it over the final name, and the temporary goes on every failure (a full disk, Ctrl-C).

Inside a folder fsbench owns (one holding `OWNED`, see `fsbench.rundir.claim`) temporaries live in that folder's
one staging place, `OWNED/staging/`, so what a killed job left is found there and nowhere else. Elsewhere (the
`--out FILE` of a kernel command) they sit next to the final name as `.fsbench-tmp-*` for the moment of the write.

No write, rename or removal inside an owned folder passes through a symbolic link (`guard`): a folder received from
someone else, or a link a user made, can never turn fsbench's clean-up or output into a change of another folder.
"""
from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from fsbench.errors import FsbenchError

OWNED = ".fsbench"  # the one fsbench-named place in every folder fsbench writes: what kind of folder it is, staging
STAGING = "staging"
KIND = "kind"
TEMP_PREFIX = ".fsbench-tmp-"
_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_LOW = 1 << 20  # bytes free under which a failed write is put down to a full disk


class DiskFull(FsbenchError):
    """No space (or quota) left where a file was being written; nothing was left half-written."""

    def __init__(self, path: Path):
        super().__init__(f"{path}: no space left on device; free some space and rerun the same command (finished "
                         "work is kept)")
        self.path = path

    def __reduce__(self) -> tuple[type, tuple[Path]]:  # raised in a worker process, it crosses back whole
        return DiskFull, (self.path,)


def staging_of(folder: Path) -> Path:
    """The staging place of an owned folder."""
    return folder / OWNED / STAGING


def owner_of(path: str | os.PathLike[str]) -> Path | None:
    """The outermost folder fsbench owns (one holding `OWNED`) that holds `path`, as the path names it; None
    outside every owned folder."""
    absolute = Path(os.path.abspath(path))
    for folder in reversed((absolute, *absolute.parents)):
        if os.path.lexists(folder / OWNED):
            return folder
    return None


def guard(path: str | os.PathLike[str]) -> Path:
    """`path`, refused in one line where fsbench owns a folder holding it and the way from that folder to it passes
    through a symbolic link (the owned place `OWNED` and its staging of every owned folder on the way included):
    what follows a link may leave the folder and change files fsbench never wrote. Every write, rename and removal
    inside an owned folder asks."""
    path = Path(path)
    owner = owner_of(path)
    if owner is None:
        return path
    folders = [owner]
    for part in Path(os.path.abspath(path)).relative_to(owner).parts[:-1]:
        folders.append(folders[-1] / part)
    for folder in folders:
        for place in (folder, folder / OWNED, folder / OWNED / STAGING):
            if place != owner and place.is_symlink():
                raise FsbenchError(f"{path} passes through the symbolic link {place} (to {os.readlink(place)}), "
                                   f"which could lead out of {owner}: fsbench writes and removes only inside the "
                                   "folders it owns; remove the link or pass another folder")
    return path


def guard_file(path: str | os.PathLike[str]) -> Path:
    """`guard`, and `path` itself no link: for a file written in place (a lock, a log appended to), which would
    write where the link leads."""
    path = guard(path)
    if path.is_symlink():
        raise FsbenchError(f"{path} is a symbolic link (to {os.readlink(path)}) where fsbench keeps a file of its "
                           "own: remove the link")
    return path


def staging_place(path: Path) -> Path | None:
    """The staging place of the nearest owned folder holding `path`, where it shares the file system of `path`'s
    nearest existing folder (a rename cannot cross file systems); None elsewhere. Refused (`guard`) where the way
    there passes through a symbolic link."""
    folder = Path(os.path.abspath(guard(path))).parent
    existing = next((f for f in (folder, *folder.parents) if f.is_dir()), folder)
    for owner in (folder, *folder.parents):
        place = staging_of(owner)
        if place.is_dir():
            guard(place)
            try:
                return place if place.stat().st_dev == existing.stat().st_dev else None
            except OSError:
                return None
    return None


def temp_path(path: Path) -> Path:
    """A fresh temporary name for `path`: in its staging place, else beside it. It keeps `path`'s suffix (ffmpeg and
    matplotlib choose the format by it) but not its stem, which may already fill a file name's 255 bytes."""
    place = staging_place(path) or Path(path).parent
    return place / f"{TEMP_PREFIX}{os.getpid()}-{secrets.token_hex(6)}{Path(path).suffix[:16]}"


def full_disk(exc: BaseException, folder: Path) -> bool:
    """Whether `exc` (or what caused it) is a full disk or quota: ENOSPC itself, a message that says so, or any
    failure of a writer (ffmpeg's broken pipe, a file it left undecodable) on a file system with under `_LOW` left."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in _FULL:
            return True
        if "No space left on device" in str(seen) or "Disk quota exceeded" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    try:
        stat = os.statvfs(folder)
    except OSError:
        return False
    return stat.f_bavail * stat.f_frsize < _LOW


def atomic_write(path: str | os.PathLike[str], write: Callable[[Path], object]) -> Path:
    """Call `write(tmp)` on a temporary file (created with the process's umask), fsync it and rename it over
    `path`. On any failure the temporary is removed and `path` is untouched; a full disk becomes `DiskFull`
    naming `path`."""
    path = guard(Path(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    try:
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        write(tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.replace(tmp, path)
        except OSError as exc:  # the staging place took the bytes: what refused is the final name's folder
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
    except BaseException as exc:
        full = isinstance(exc, Exception) and full_disk(exc, tmp.parent)  # asked while the temporary holds its space
        tmp.unlink(missing_ok=True)
        if full:
            raise DiskFull(path) from exc
        raise
    _sync_folder(path.parent)
    return path


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    return atomic_write(path, lambda tmp: tmp.write_bytes(data))


@contextlib.contextmanager
def temp_folder(near: Path, prefix: str = "") -> Iterator[Path]:
    """A fresh folder in the staging place of `near`'s owned folder (else beside `near`), removed on leaving."""
    place = staging_place(near) or guard(Path(near).parent)
    place.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(dir=place, prefix=f"{TEMP_PREFIX}{prefix}"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def clean_staging(folder: Path) -> list[Path]:
    """Delete what killed jobs left in `folder`'s staging place (the temporaries fsbench names, nothing else);
    returns what went. The caller holds the folder's lock, so no live job of this folder stages there."""
    place = guard(staging_of(folder))
    removed = sorted(place.glob(f"{TEMP_PREFIX}*")) if place.is_dir() else []
    for entry in removed:
        remove(entry)
    return removed


def remove(path: Path) -> None:
    """Delete the file or folder `path` fsbench wrote inside a folder it owns (a link itself, never what it points
    to); refused (`guard`) where the way there passes through a symbolic link."""
    guard(path)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _sync_folder(folder: Path) -> None:
    """Make a rename durable (best effort: some file systems refuse to fsync a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
