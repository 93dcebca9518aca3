"""Writing a run folder (layout and manifest schema: `fsbench.rundir`): the manifest's header and results, and
provenance. Every file goes through `fsbench.files.atomic_write`, so an error or Ctrl-C never leaves half of one."""
from __future__ import annotations

import datetime as _dt
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from fsbench import files
from fsbench.errors import FsbenchError
from fsbench.paths import REPO
from fsbench.rundir import MANIFEST, SCHEMA, Manifest, Summary, load_manifest

# Settings that must agree before a new run may add results to an existing run directory (the schedule by its
# spec, the prompt set by its digest).
_SAME_RUN_KEYS = {"model": None, "settings": None, "schedule": "spec", "prompts": "sha256"}


def open_run(run: Path, header: Manifest) -> Manifest:
    """Create or reopen `run` for a run described by `header`; refuses a directory holding other settings."""
    try:
        probe = files.guard(files.staging_of(run) / f"{files.TEMP_PREFIX}probe-{os.getpid()}")
        probe.parent.mkdir(parents=True, exist_ok=True)
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise FsbenchError(f"cannot write to output directory {run}: {exc.strerror}; pass --out DIR") from exc
    now = _now()
    if (run / MANIFEST).is_file():
        manifest = load_manifest(run)
        recorded: dict[str, Any] = dict(manifest)
        given: dict[str, Any] = dict(header)
        for key, part in _SAME_RUN_KEYS.items():
            old, new = recorded.get(key), given[key]
            if part:
                old, new = (old if isinstance(old, dict) else {}).get(part), new[part]
            if old != new and not (part and old is None):  # a folder from before the record was kept
                raise FsbenchError(f"{run} holds results with a different {key} ({_diff(old, new)}); "
                                   "pass --out DIR for a new run directory")
        manifest.update({k: v for k, v in header.items() if k != "results"})  # type: ignore[typeddict-item]
    else:
        manifest = {**header, "created": now, "results": {}}
    manifest["schema"] = SCHEMA
    manifest["date"] = now
    _write_manifest(run, manifest)
    return manifest


def record_result(run: Path, scenario: str, mode: str, summary: Summary) -> Manifest:
    """Merge one scenario/mode summary, with the command that produced it, into the manifest (others are kept)."""
    manifest = load_manifest(run)
    manifest.setdefault("results", {}).setdefault(scenario, {})[mode] = {**summary, "command": command_line()}
    manifest["date"] = _now()
    _write_manifest(run, manifest)
    return manifest


def git_commit() -> str | None:
    """The commit of the tree that runs, "+dirty" when files differ from it. FSBENCH_COMMIT wins: a copy
    of the tree on another machine (the device) may carry stale git metadata, so its caller names it."""
    named = os.environ.get("FSBENCH_COMMIT")
    if named:
        return named
    root = REPO
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0 or not head.stdout.strip():
        return None
    return head.stdout.strip() + ("+dirty" if status.returncode != 0 or status.stdout.strip() else "")


def versions() -> dict[str, str | None]:
    import platform
    from importlib.metadata import PackageNotFoundError, version

    found: dict[str, str | None] = {"python": platform.python_version()}
    for dist in ("torch", "triton", "diffusers", "transformers", "mlcommons-loadgen", "fsbench"):
        try:
            found[dist] = version(dist)
        except PackageNotFoundError:
            found[dist] = None
    return found


def command_line(program: str = "fsbench") -> str:
    """This process's command line as `program` and its arguments: `fsbench` however the CLI was started."""
    return " ".join([program, shlex.join(sys.argv[1:])]).strip()


def provenance(device: str | None = None, program: str = "fsbench") -> dict[str, Any]:
    """What a published figure carries: the command line, the commit, the package versions, the device and the
    date (UTC)."""
    return {"command": command_line(program), "git_commit": git_commit(), "versions": versions(), "device": device,
            "date": _now()}


def _write_manifest(run: Path, manifest: Manifest) -> None:
    files.atomic_write_text(run / MANIFEST, json.dumps(manifest, indent=2, sort_keys=False) + "\n")


def _diff(old: Any, new: Any) -> str:
    if isinstance(old, dict) and isinstance(new, dict):
        keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        return ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys[:3])
    return f"{old!r} -> {new!r}"


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
