"""A run folder's records cannot lead a reader out of it: every string of a real manifest and of its `made_with/`
sidecars is rewritten with traversals, absolute paths, NUL, line breaks and overlong values, and an audit hook on
`open` (and on the programs started, such as ffmpeg) asserts that reading the run, scoring it and resuming its
videos opens no file outside the folders given."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fsbench.errors import FsbenchError
from fsbench.eval import comparison, fidelity
from fsbench.eval.runs import Run
from fsbench.harness.cli import main
from fsbench.harness.run import made_with

SMALL = ["--height", "32", "--width", "32", "--frames", "5", "--steps", "2"]
_WATCH: dict[str, Any] = {"armed": False, "allowed": (), "bait": (), "opened": []}


def _audit(event: str, args: tuple) -> None:
    if not _WATCH["armed"]:
        return
    if event == "open" and isinstance(args[0], (str, bytes, Path)):
        paths = [args[0]]
    elif event in ("os.rename", "os.remove", "os.mkdir", "shutil.copyfile", "shutil.rmtree"):
        paths = [a for a in args if isinstance(a, (str, bytes, Path))]
    elif event == "subprocess.Popen":
        paths = [a for a in (args[1] or []) if isinstance(a, (str, bytes, Path))]
    else:
        return
    for path in paths:
        text = path.decode(errors="replace") if isinstance(path, bytes) else str(path)
        if any(text.startswith(bait) for bait in _WATCH["bait"]) or text in ("/etc/passwd", "/etc/hostname"):
            if not any(text.startswith(folder) for folder in _WATCH["allowed"]):
                _WATCH["opened"].append((event, text))


sys.addaudithook(_audit)


def _strings(value: Any, where: tuple = ()) -> list[tuple]:
    """The location of every string in a JSON value (keys as they are, list indices as ints)."""
    if isinstance(value, str):
        return [where]
    if isinstance(value, dict):
        return [w for k, v in value.items() for w in _strings(v, (*where, k))]
    if isinstance(value, list):
        return [w for i, v in enumerate(value) for w in _strings(v, (*where, i))]
    return []


def _set(value: Any, where: tuple, new: str) -> None:
    for key in where[:-1]:
        value = value[key]
    value[where[-1]] = new


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """A real tiny run (Offline accuracy: four videos, their sidecars, LoadGen logs) beside a bait folder."""
    root = tmp_path_factory.mktemp("fuzz")
    result = CliRunner().invoke(main, ["run", "--out", str(root / "run"), *SMALL, "--scenario", "Offline",
                                       "--mode", "accuracy"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    bait = root / "bait"
    (bait / "videos").mkdir(parents=True)
    for video in (root / "run" / "videos").iterdir():
        shutil.copyfile(video, bait / "videos" / video.name)
    (bait / "prompts.txt").write_text("a secret\n")
    return root


def _hostile(root: Path) -> list[str]:
    bait = root / "bait"
    return ["../bait/prompts.txt", f"../../{root.name}/bait/videos/x", str(bait / "prompts.txt"), "/etc/passwd",
            "../" * 30 + "etc/passwd", "a\0b", "line\nbreak", "x" * 5000, "..", ""]


def _read_everything(run_path: Path, reference: Path, out: Path, score: bool) -> None:
    """What eval, compare and a resumed run read of a run folder (scoring and comparing, which decode every
    video, only where `score`)."""
    run = Run.open(run_path)
    prompts = run.prompts()
    for prompt in prompts:
        run.video_sha256(prompt)
        video = run.video(prompt)
        made_with.reusable(video, "0" * 64)
    made_with.kernels_of(run.video(p) for p in prompts)
    run.videos_present()
    run.performance("Offline")
    if not score:
        return
    fidelity.evaluate(run, Run.open(reference), metrics=("psnr",), workers=1)
    comparison.compare([reference, run_path], out)


@pytest.mark.slow
def test_no_record_leads_a_reader_outside_its_folders(made, tmp_path, one_thread):
    pristine, bait = made / "run", made / "bait"
    reference = tmp_path / "reference"
    shutil.copytree(pristine, reference)
    manifest = json.loads((pristine / "manifest.json").read_text())
    sidecars = sorted((pristine / "made_with").glob("*.json"))
    cases: list[tuple[str, tuple, str]] = []
    values = _hostile(made)
    for i, where in enumerate(_strings(manifest)):
        cases.append(("manifest.json", where, values[i % len(values)]))
    for where in _strings(json.loads(sidecars[0].read_text())):
        cases += [(f"made_with/{sidecars[0].name}", where, value) for value in values[:6]]
    for value in values:  # every value once on the fields that name files
        cases += [("manifest.json", ("prompts", "texts", 0), value), ("manifest.json", ("system",), value)]
    assert len(cases) > 60
    outcomes = {"refused": 0, "read": 0}
    for n, (name, where, value) in enumerate(cases):
        case = tmp_path / f"case{n}"
        shutil.copytree(pristine, case)
        record = json.loads((case / name).read_text())
        _set(record, where, value)
        (case / name).write_text(json.dumps(record))
        _WATCH.update(armed=True, allowed=(str(case), str(reference), str(tmp_path / f"out{n}")),
                      bait=(str(bait), str(made.parent)), opened=[])
        try:
            scored = where[0] in ("prompts", "system") or n % 8 == 0
            _read_everything(case, reference, tmp_path / f"out{n}", score=scored)
            outcomes["read"] += 1
        except FsbenchError as exc:
            assert "\n" not in str(exc).strip() or "line\nbreak" in value, exc
            outcomes["refused"] += 1
        finally:
            _WATCH["armed"] = False
        assert not _WATCH["opened"], (name, where, value[:80], _WATCH["opened"][:3])
        shutil.rmtree(case)
    assert outcomes["refused"] and outcomes["read"]
