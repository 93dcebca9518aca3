"""The rule every command that writes a folder follows: the folder is new, empty, or fsbench's own of that kind
(a run, a sweep, a comparison, a page, a submission root), and lies inside no run folder. A claimed folder records
its kind in `.fsbench/kind` beside its staging place (`fsbench.files`); a folder written before the kind was
recorded is known by what it holds. Nothing else is ever written, so a mistyped --out cannot cost a user a file.

A marker alone never makes a folder fsbench's: what the folder holds must agree with it (a run its manifest, a page
only the files its record names), and the rule is applied where the path leads, not to the path as typed."""
from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from fsbench import files
from fsbench.errors import FsbenchError
from fsbench.rundir import CAMPAIGN_LOG, CAMPAIGN_SUBMISSION, LOCK, MANIFEST

KINDS = {"run": "a run folder", "sweep": "a sweep folder", "compare": "a comparison folder",
         "page": "a comparison page's folder", "submission": "a submission root", "campaign": "a campaign folder",
         "tune": "a tune folder"}
RECORD = "files.json"  # in OWNED: every file fsbench wrote in a folder whose clean-up removes files (a page's)
RECORDED_KINDS = ("page",)  # the kinds that keep RECORD; only files it names are theirs


def option(kind: str) -> str:
    """The option that names a folder of `kind`, for the messages that say what to pass instead."""
    return "--html" if kind == "page" else "--out"


def kind_of(folder: Path) -> str | None:
    """What fsbench folder `folder` is: a key of KINDS; None where it is new or empty; "" where it is not
    fsbench's (its marker and what it holds disagree, or it holds what fsbench never writes). Folders written
    before the kind was recorded are known by what they hold."""
    folder = Path(folder)
    if not folder.exists():
        return None
    if not folder.is_dir():
        return ""
    entries = [e for e in folder.iterdir() if e.name not in (LOCK, files.OWNED)]
    marker = folder / files.OWNED / files.KIND
    if marker.is_file():
        kind = marker.read_text(encoding="utf-8", errors="replace").strip()
        return kind if kind in KINDS and _agrees(folder, kind, entries) else ""
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


def _agrees(folder: Path, kind: str, entries: list[Path]) -> bool:
    """Whether what `folder` holds is what fsbench writes in a folder of `kind`: a run holds its manifest, a
    comparison its tables, a sweep only runs, a campaign only runs, a comparison, its log and its submission trees, a
    submission root only its
    divisions, a page only the files its record names (an empty folder agrees)."""
    if not entries:
        return True
    if kind == "run":
        return (folder / MANIFEST).is_file()
    if kind == "compare":
        return (folder / "compare.json").is_file() and (folder / "compare.md").is_file()
    if kind == "campaign":  # its log, its submission trees, and its runs and comparison, each a folder of its own
        return all(not e.is_symlink() and (e.name == CAMPAIGN_LOG and e.is_file()
                                           or e.name == CAMPAIGN_SUBMISSION and _holds_submissions(e)
                                           or kind_of(e) in ("run", "compare", None)) for e in entries)
    if kind == "sweep":
        return all(not e.is_symlink() and kind_of(e) in ("run", None) for e in entries)
    if kind == "submission":
        return all(e.name in ("open", "closed") or e.name.startswith(".fsbench-staging-") for e in entries)
    if kind in RECORDED_KINDS:
        return set(_files_under(folder)) <= recorded(folder)
    return True


def _holds_submissions(folder: Path) -> bool:
    """A campaign's submission folder: submission roots, one per schedule, each beside the JSON of its inputs."""
    return folder.is_dir() and all(not e.is_symlink() and (e.suffix == ".json" and e.is_file()
                                                            or e.is_dir() and kind_of(e) in ("submission", None))
                                   for e in folder.iterdir())


def _files_under(folder: Path) -> Iterable[str]:
    """Every file and link under `folder` (never followed), relative to it, but fsbench's own place and lock."""
    for root, dirs, names in os.walk(folder):
        here = Path(root)
        if here == folder:
            dirs[:] = [d for d in dirs if d != files.OWNED]
            names = [n for n in names if n != LOCK]
        links = [d for d in dirs if (here / d).is_symlink()]
        for name in (*names, *links):
            yield (here / name).relative_to(folder).as_posix()


def recorded(folder: Path) -> set[str]:
    """The files (relative paths) fsbench recorded writing in `folder`: all a clean-up there may remove."""
    try:
        names = json.loads((folder / files.OWNED / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    return {n for n in names if isinstance(n, str)} if isinstance(names, list) else set()


def record(folder: Path, names: Iterable[str]) -> None:
    """Record `names` (relative paths) as fsbench's files of `folder`, before they are written: a job killed
    between the two leaves a record of a missing file, never a file of its own that looks like a user's."""
    files.atomic_write_text(folder / files.OWNED / RECORD, json.dumps(sorted(set(names)), indent=0) + "\n")


def claim(folder: Path, kind: str) -> Path:
    """The rule of every command that writes a folder: `folder` is new, empty, or fsbench's own folder of `kind`,
    and lies inside no run folder (whose files are a run's own). Anything else is refused in one line naming it,
    before any byte is written; a claimed folder records its kind and gets its staging place."""
    folder = Path(folder)
    refuse_foreign(folder, kind)
    staging = files.guard(files.staging_of(folder))
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


def shown(path: Path) -> str:
    """`path` as given, and where it leads when a symbolic link on the way makes that another place."""
    real = Path(os.path.realpath(path))
    return str(path) if real == Path(os.path.abspath(path)) else f"{path} (which leads to {real})"


def refuse_foreign(folder: Path, kind: str) -> None:
    """`claim`'s check alone (nothing written): a one-line FsbenchError unless `folder` may become or be `kind`.
    The check is of where `folder` leads; the message names both."""
    real = Path(os.path.realpath(folder))
    name = shown(Path(folder))
    found = kind_of(real)
    if found == "" and real.exists() and not real.is_dir():
        raise FsbenchError(f"{name} is a file, not a folder: pass {option(kind)} DIR naming a new or empty folder")
    if found == "":
        raise FsbenchError(f"{name} is a folder fsbench did not write and not empty: fsbench writes only a new "
                           f"folder, an empty one or {KINDS[kind]} of its own; pass {option(kind)} DIR")
    if found is not None and found != kind:
        raise FsbenchError(f"{name} is {KINDS[found]}, not {KINDS[kind]}: pass {option(kind)} DIR naming a new "
                           "folder")
    for parent in real.parents:
        if kind_of_parent(parent) == "run":
            raise FsbenchError(f"{name} lies inside the run folder {parent}, whose files are the run's own: "
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
