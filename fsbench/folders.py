"""The rule every command that writes a folder follows: the folder is new, empty, or fsbench's own of that kind
(a run, a sweep, a comparison, a page, a submission root), and lies inside no run folder. A claimed folder records
its kind in `.fsbench/kind` beside its staging place (`fsbench.files`); a folder written before the kind was
recorded is known by what it holds. Nothing else is ever written, so a mistyped --out cannot cost a user a file."""
from __future__ import annotations

import os
from pathlib import Path

from fsbench import files
from fsbench.errors import FsbenchError
from fsbench.rundir import LOCK, MANIFEST

KINDS = {"run": "a run folder", "sweep": "a sweep folder", "compare": "a comparison folder",
         "page": "a comparison page's folder", "submission": "a submission root", "campaign": "a campaign folder",
         "tune": "a tune folder"}


def option(kind: str) -> str:
    """The option that names a folder of `kind`, for the messages that say what to pass instead."""
    return "--html" if kind == "page" else "--out"


def kind_of(folder: Path) -> str | None:
    """What fsbench folder `folder` is: a key of KINDS; None where it is new or empty; "" where it is not
    fsbench's. Folders written before the kind was recorded are known by what they hold."""
    folder = Path(folder)
    if not folder.exists():
        return None
    if not folder.is_dir():
        return ""
    marker = folder / files.OWNED / files.KIND
    if marker.is_file():
        kind = marker.read_text(encoding="utf-8", errors="replace").strip()
        return kind if kind in KINDS else ""
    entries = [e for e in folder.iterdir() if e.name not in (LOCK, files.OWNED)]
    shown = [e for e in entries if not e.name.startswith(".")]
    if not entries:
        return None
    if (folder / MANIFEST).is_file():
        return "run"
    if (folder / "compare.json").is_file() and (folder / "compare.md").is_file():
        return "compare"
    if shown and all((e / MANIFEST).is_file() for e in shown) and len(shown) == len(entries):
        return "sweep"
    if all(e.name in ("open", "closed") or e.name.startswith(".fsbench-staging-") for e in entries) and shown:
        return "submission"
    return ""


def claim(folder: Path, kind: str) -> Path:
    """The rule of every command that writes a folder: `folder` is new, empty, or fsbench's own folder of `kind`,
    and lies inside no run folder (whose files are a run's own). Anything else is refused in one line naming it,
    before any byte is written; a claimed folder records its kind and gets its staging place."""
    folder = Path(folder)
    refuse_foreign(folder, kind)
    staging = files.staging_of(folder)
    try:
        staging.mkdir(parents=True, exist_ok=True)
        if not (folder / files.OWNED / files.KIND).is_file():
            files.atomic_write_text(folder / files.OWNED / files.KIND, f"{kind}\n")
    except IsADirectoryError as exc:
        raise FsbenchError(f"{exc.filename} is a folder where fsbench keeps a file: remove it") from exc
    except OSError as exc:
        raise FsbenchError(f"cannot write to output directory {folder}: {exc.strerror}; pass {option(kind)} DIR"
                           ) from exc
    return folder


def refuse_foreign(folder: Path, kind: str) -> None:
    """`claim`'s check alone (nothing written): a one-line FsbenchError unless `folder` may become or be `kind`."""
    found = kind_of(folder)
    if found == "" and folder.exists() and not folder.is_dir():
        raise FsbenchError(f"{folder} is a file, not a folder: pass {option(kind)} DIR naming a new or empty folder")
    if found == "":
        raise FsbenchError(f"{folder} is a folder fsbench did not write and not empty: fsbench writes only a new "
                           f"folder, an empty one or {KINDS[kind]} of its own; pass {option(kind)} DIR")
    if found is not None and found != kind:
        raise FsbenchError(f"{folder} is {KINDS[found]}, not {KINDS[kind]}: pass {option(kind)} DIR naming a new "
                           "folder")
    for parent in Path(os.path.abspath(folder)).parents:
        if kind_of_parent(parent) == "run":
            raise FsbenchError(f"{folder} lies inside the run folder {parent}, whose files are the run's own: "
                               f"pass {option(kind)} DIR outside it")


def kind_of_parent(folder: Path) -> str | None:
    """The kind of an ancestor folder, read cheaply (its marker or manifest): what `claim` must not write inside."""
    marker = folder / files.OWNED / files.KIND
    try:
        if marker.is_file():
            return marker.read_text(encoding="utf-8", errors="replace").strip()
        return "run" if (folder / MANIFEST).is_file() else None
    except OSError:
        return None
