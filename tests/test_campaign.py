"""`fsbench campaign PLAN.toml`: every stage of a plan in one command; killed and rerun, it makes nothing again;
a plan with a bad field is refused in one line before anything is written."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from fsbench.harness.cli import main
from fsbench.rundir import load_manifest

ROOT = Path(__file__).resolve().parents[1]
PLAN = """
model = "tiny"
preset = "small.toml"
schedules = ["bf16", "mxfp8"]
out = "{out}"
device = "cpu"
metrics = ["psnr", "ssim"]

[prompts]
count = 2

[settings]
steps = 2

[performance.SingleStream]
count = 2
time = 0
target_latency_ms = 1000
"""
# A preset file beside the plan: `preset` takes a file as well as a name.
SMALL = (ROOT / "scenarios" / "mlperf.toml").read_text().split("\n[model.tiny]")[0].replace(
    "height = 720", "height = 32").replace("width = 1280", "width = 32").replace("num_frames = 81", "num_frames = 5")


def _campaign(plan: Path, log: Path) -> subprocess.Popen:
    """`fsbench campaign` in its own process, stdout and stderr into `log` (a file: not a terminal)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    with log.open("w") as out:
        return subprocess.Popen([sys.executable, "-m", "fsbench", "campaign", str(plan)], cwd=plan.parent,
                                stdout=out, stderr=subprocess.STDOUT, env=env)


def _videos(out: Path, pattern: str = "*/videos/*.mp4") -> dict[str, tuple[int, int]]:
    """Each video file (the runs' own, by default) with its inode and mtime: a rewrite changes one of them."""
    return {str(p.relative_to(out)): (p.stat().st_ino, p.stat().st_mtime_ns) for p in out.glob(pattern)}


@pytest.fixture(scope="module")
def killed_and_rerun(tmp_path_factory):
    """A campaign killed (SIGKILL) once its accuracy stage of the second schedule starts, then run to its end."""
    folder = tmp_path_factory.mktemp("campaign")
    out = folder / "out"
    (folder / "small.toml").write_text(SMALL)
    plan = folder / "plan.toml"
    plan.write_text(PLAN.format(out=out))
    first = _campaign(plan, folder / "first.log")
    deadline = time.monotonic() + 600
    while first.poll() is None and "[4/6]" not in (folder / "first.log").read_text():
        assert time.monotonic() < deadline, (folder / "first.log").read_text()
        time.sleep(0.2)
    first.send_signal(signal.SIGKILL)
    assert first.wait() == -signal.SIGKILL, (folder / "first.log").read_text()
    before = _videos(out)
    second = _campaign(plan, folder / "second.log")
    assert second.wait(timeout=600) == 0, (folder / "second.log").read_text()
    return folder, out, before


@pytest.mark.slow
def test_a_killed_campaign_resumes_without_regenerating_a_video(killed_and_rerun):
    folder, out, before = killed_and_rerun
    assert len(before) == 4  # both schedules' videos were made by their performance runs before the kill
    assert _videos(out) == before
    log = (folder / "second.log").read_text()
    for stage in ("[1/6] SingleStream performance [bf16]", "[2/6] SingleStream performance [mxfp8]",
                  "[3/6] Offline accuracy [bf16]"):
        assert f"{stage}: skipped" in log
    for schedule in ("bf16", "mxfp8"):
        results = load_manifest(out / schedule)["results"]
        assert set(results) == {"SingleStream", "Offline"}
        assert results["Offline"]["accuracy"]["videos_generated"] == 0


@pytest.mark.slow
def test_a_finished_campaign_rerun_skips_every_stage(killed_and_rerun):
    folder, out, _ = killed_and_rerun
    before = _videos(out, "**/*.mp4")  # the page's videos too
    assert len(before) > 4
    third = _campaign(folder / "plan.toml", folder / "third.log")
    assert third.wait(timeout=300) == 0
    log = (folder / "third.log").read_text()
    assert [line.split(": ", 1)[1].split(",")[0] for line in log.splitlines() if line.startswith("[")] == \
        ["skipped"] * 6
    assert _videos(out, "**/*.mp4") == before


@pytest.mark.slow
def test_the_compare_page_has_latency_speedup_and_fidelity(killed_and_rerun):
    _, out, _ = killed_and_rerun
    rows = {row["schedule"]: row for row in json.loads((out / "compare" / "compare.json").read_text())["rows"]}
    for label in ("BF16", "MXFP8"):
        assert rows[label]["latency_s"] > 0 and rows[label]["speedup"] > 0
    assert rows["BF16"]["role"] == "reference"
    assert float(rows["MXFP8"]["psnr"]) > 20 and 0 < rows["MXFP8"]["ssim"] <= 1  # "inf" where frames agree
    page = (out / "compare" / "html" / "index.html").read_text()
    for header in ("<th>SingleStream p90 latency (s)", "<th>Speedup vs BF16", "<th>PSNR (dB)", "<th>SSIM"):
        assert header in page


@pytest.mark.slow
def test_a_log_written_outside_a_terminal_holds_no_carriage_returns(killed_and_rerun):
    folder, _, _ = killed_and_rerun
    for name in ("first.log", "second.log"):
        assert "\r" not in (folder / name).read_text()


@pytest.mark.parametrize("edit, field", [
    ({"schedules": "bf16,mxfp8"}, "schedules: expected list"),
    ({"schedules": ["bf16", "mxfp9"]}, "schedules[1]:"),
    ({"metrics": ["psnr", "fvd"]}, "metrics: unknown fvd"),
    ({"reference": "mxfp4"}, "reference: 'mxfp4' is not among the schedules"),
    ({"device": "tpu"}, "device: 'tpu'"),
    ({"scenarios": ["Offline"]}, "scenarios: unknown field"),
    ({"preset": "nowhere.toml"}, "preset: unknown preset"),
    ({"settings": {"frames": 4}}, "settings: frames must be 4k+1"),
    ({"settings": {"steps": 10**11}}, "settings: steps must be 1-1000"),
    ({"performance": {"SingleStream": {"count": 0}}}, "performance.SingleStream.count: must be positive"),
    ({"performance": {"Server": {}}}, "performance.Server: unknown field"),
    ({"performance": {"SingleStream": {"count": 10**17}}}, "performance.SingleStream.count: must be positive and at"),
    ({"performance": {"SingleStream": {"time": math.nan}}}, "performance.SingleStream.time: must be at least 0"),
    ({"performance": {"Offline": {"target_qps": math.inf}}}, "performance.Offline.target_qps: must be positive"),
    ({"accuracy": False, "metrics": []}, "accuracy: is false and no [performance.*] table"),
    ({"out": "runs\u0000x"}, "out: a path holds no NUL byte"),
    ({"speed": {"offload": True}}, "speed: --offload moves weights"),
    ({"prompts": {"count": "two"}}, "prompts.count: expected int"),
    ({"accuracy": False}, "metrics: scores the accuracy sweep's videos"),
])
def test_a_bad_plan_field_is_named_in_one_line_and_nothing_is_written(tmp_path, edit, field):
    out = tmp_path / "out"
    plan = {"model": "tiny", "schedules": ["bf16", "mxfp8"], "out": str(out), "device": "cpu", **edit}
    path = tmp_path / "plan.toml"
    path.write_text("\n".join(f"{k} = {_toml(v)}" for k, v in plan.items() if not isinstance(v, dict)) + "\n" +
                    "".join(_tables(k, v) for k, v in plan.items() if isinstance(v, dict)))
    result = CliRunner().invoke(main, ["campaign", str(path)])
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(f"fsbench: error: {path}: {field}")
    assert not out.exists()


def _toml(value) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # TOML spells them nan, inf and -inf
    return json.dumps(value)


def _tables(name: str, table: dict) -> str:
    flat = "".join(f"{k} = {_toml(v)}\n" for k, v in table.items() if not isinstance(v, dict))
    nested = "".join(_tables(f"{name}.{k}", v) for k, v in table.items() if isinstance(v, dict))
    return f"[{name}]\n{flat}{nested}"


def test_the_shipped_plans_are_valid(tmp_path):
    from fsbench.harness.run import plan as plans

    tiny = plans.load(ROOT / "scenarios" / "campaigns" / "tiny-demo.toml")
    assert [s.name for s in tiny.schedules] == ["bf16", "mxfp8", "hybrid"] and tiny.html
    mlperf = plans.load(ROOT / "scenarios" / "campaigns" / "mlperf-a14b.toml")
    assert [o.scenario for o in mlperf.performance] == ["SingleStream", "Offline"]
    assert "vbench" in mlperf.metrics and len(mlperf.schedules) == 5
