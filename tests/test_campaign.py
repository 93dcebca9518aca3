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
    # bf16's accuracy pass finished before the kill: its videos (made again, to keep their frames) stand
    bf16 = {name: stat for name, stat in before.items() if name.startswith("bf16/")}
    assert len(bf16) == 2 and {n: s for n, s in _videos(out).items() if n.startswith("bf16/")} == bf16
    log = (folder / "second.log").read_text()
    for stage in ("[1/6] SingleStream performance [bf16]", "[2/6] SingleStream performance [mxfp8]",
                  "[3/6] Offline accuracy [bf16]"):
        assert f"{stage}: skipped" in log
    for schedule in ("bf16", "mxfp8"):
        results = load_manifest(out / schedule)["results"]
        assert set(results) == {"SingleStream", "Offline"}
        accuracy = results["Offline"]["accuracy"]
        assert accuracy["videos_generated"] + accuracy["videos_reused"] == 2
        assert len(list((out / schedule / "frames").glob("*.mp4"))) == 2  # every video's frames kept losslessly
    assert load_manifest(out / "bf16")["results"]["Offline"]["accuracy"]["videos_generated"] == 2


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


def test_each_run_log_holds_only_its_own_lines_once_and_the_campaign_log_holds_them_all(killed_and_rerun):
    _, out, _ = killed_and_rerun
    for schedule, other in (("bf16", "mxfp8"), ("mxfp8", "bf16")):
        lines = (out / schedule / "fsbench.log").read_text().splitlines()
        assert not [line for line in lines if f"[{other}]" in line or f"({other})" in line], lines
        messages = "\n".join(line.split(" ", 2)[2] for line in lines if line[:2] == "20")  # no time stamps
        commands = messages.split("INFO fsbench: command:")
        for command in commands[1:]:  # the killed campaign's and the rerun's
            said = [line for line in command.splitlines()[1:] if line]
            assert len(said) == len(set(said)), said
            assert sum("finished in" in line for line in said) <= 1
    campaign = (out / "campaign.log").read_text()
    for schedule in ("bf16", "mxfp8"):
        assert f"Offline accuracy [{schedule}]: video 2/2" in campaign
    assert "fidelity [mxfp8]: prompt 2/2" in (out / "mxfp8" / "fsbench.log").read_text()


def test_a_log_written_to_a_file_says_every_stage_and_the_videos_with_their_times(killed_and_rerun):
    folder, out, _ = killed_and_rerun
    log = (folder / "first.log").read_text().splitlines()
    assert "[1/6] SingleStream performance [bf16]: started" in log
    assert any(line.startswith("[1/6] SingleStream performance [bf16]: done in ") for line in log), log
    videos = [line for line in log if line.startswith("SingleStream performance [bf16]: video ")]
    assert [line.split()[4] for line in videos] == ["1/2", "2/2"], videos
    assert all(" s, mean " in line and line.endswith(" left") for line in videos), videos
    stamps = [time.mktime(time.strptime(line[:19], "%Y-%m-%d %H:%M:%S"))
              for line in (out / "campaign.log").read_text().splitlines() if line[:2] == "20"]
    assert stamps and max(b - a for a, b in zip(stamps, stamps[1:])) <= 30


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
    ({"submission": {"division": "network", "submitter": "Org"}}, "submission.division: 'network'"),
    ({"submission": {"division": "open"}}, "submission.submitter: missing"),
    ({"submission": {"submitter": "Org", "system": "a/b"}}, "submission.system: 'a/b' must be a folder name"),
    ({"submission": {"submitter": "Org", "checker": "nowhere"}}, "submission.checker: no folder"),
    ({"submission": {"submitter": "Org"}, "performance": {"SingleStream": {"count": 64}}},
     "submission: the runs could not be packaged (Offline has no performance run: add [performance.Offline]"),
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


def test_a_dry_run_says_why_the_quickstart_plan_cannot_become_a_submission(tmp_path):
    result = CliRunner().invoke(main, ["campaign", str(ROOT / "scenarios" / "campaigns" / "tiny-demo.toml"),
                                       "--dry-run", "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    said = [line.split(": ", 2)[2] for line in result.stdout.splitlines() if line.startswith("submission: cannot")]
    assert said[:3] == [
        "SingleStream has no accuracy run: add a [submission] table",
        "Offline has no performance run: add [performance.Offline]",
        "performance.SingleStream.time: min_duration is 0 ms, needs >= 600000: drop `time` (`count` stops a run "
        "early, in the open division)"]
    assert "performance.SingleStream.count: 16 queries cannot meet early stopping" in result.stdout
    assert not (tmp_path / "out").exists()


def test_the_submission_plan_keeps_mlperf_durations_and_can_package(tmp_path, shared_data):
    plan = ROOT / "scenarios" / "campaigns" / "tiny-submission.toml"
    result = CliRunner().invoke(main, ["campaign", str(plan), "--dry-run", "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == "submission: the runs can be packaged for the open division"
    assert [line.split(": ")[0] for line in result.stdout.splitlines()[:-1]] == [
        "[1/6] SingleStream performance [bf16]", "[2/6] Offline performance [bf16]",
        "[3/6] SingleStream accuracy [bf16]", "[4/6] Offline accuracy [bf16]", "[5/6] compare",
        "[6/6] submission --division open [bf16]"]


def test_the_shipped_plans_are_valid(tmp_path):
    from fsbench.harness.run import plan as plans

    tiny = plans.load(ROOT / "scenarios" / "campaigns" / "tiny-demo.toml")
    assert [s.name for s in tiny.schedules] == ["bf16", "mxfp8", "hybrid"] and tiny.html
    mlperf = plans.load(ROOT / "scenarios" / "campaigns" / "mlperf-a14b.toml")
    assert [o.scenario for o in mlperf.performance] == ["SingleStream", "Offline"]
    assert "vbench" in mlperf.metrics and len(mlperf.schedules) == 5


@pytest.mark.slow
def test_a_shorter_run_of_the_submission_plan_breaks_only_the_rules_of_its_length(tmp_path, shared_data, capsys):
    """The shipped submission plan on 8 prompts and 4 SingleStream queries (a minute, not the minutes of the full
    plan), every stage run as the campaign runs it: its submission stage applies every rule of the checker, and only
    those that need MLPerf's full length fail, the ones --dry-run names beforehand."""
    import click

    from fsbench.errors import FsbenchError
    from fsbench.harness.cli import campaign as cli_campaign
    from fsbench.harness.run import plan as plans
    from fsbench.harness.run.campaign import Campaign

    shipped = (ROOT / "scenarios" / "campaigns" / "tiny-submission.toml").read_text()
    plan = tmp_path / "plan.toml"
    plan.write_text(shipped.replace('out = "results/runs/campaigns/tiny-submission"', f'out = "{tmp_path / "out"}"')
                    .replace("[prompts]\n", "[prompts]\ncount = 8\n").replace("count = 64", "count = 4"))
    dry = CliRunner().invoke(main, ["campaign", str(plan), "--dry-run"])
    assert [line.split(": ", 2)[2].split(":")[0] for line in dry.stdout.splitlines()
            if line.startswith("submission: cannot")] == ["performance.SingleStream.count", "prompts"], dry.output
    refused = CliRunner().invoke(main, ["campaign", str(plan)])
    assert refused.exit_code == 2 and "submission: the runs could not be packaged" in refused.stderr
    capsys.readouterr()
    with click.Context(main, info_name="fsbench") as ctx, pytest.raises(FsbenchError, match="submission not written"):
        Campaign(plans.load(plan)).execute(*cli_campaign.commands(ctx))  # the campaign as if it had not refused
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    length_rules = ("accuracy run covers 8 samples, the dataset has 248", "audit video",
                    "early stopping not met with 4 queries", "performance sample count 8 < 50")
    assert errors and [e for e in errors if not any(rule in e for rule in length_rules)] == []
    assert all(any(rule in e for e in errors) for rule in length_rules), errors
    assert {line.split("/")[5] for line in errors} == {"Offline", "SingleStream"}  # both scenarios were packaged


def test_a_campaign_without_lpips_weights_stops_before_its_first_video(tmp_path):
    out = tmp_path / "out"
    (tmp_path / "small.toml").write_text(SMALL)
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN.format(out=out).replace('metrics = ["psnr", "ssim"]', 'metrics = ["psnr", "lpips"]'))
    env = {"TORCH_HOME": str(tmp_path / "torch_home")}  # no AlexNet weights there
    alexnet = str(tmp_path / "torch_home" / "hub" / "checkpoints" / "alexnet-owt-7be5be79.pth")
    dry = CliRunner().invoke(main, ["campaign", str(plan), "--dry-run"], env=env)
    assert dry.exit_code == 2 and "[3/6] Offline accuracy [bf16]: to run" in dry.stdout
    assert dry.stderr.count("\n") == 1 and alexnet in dry.stderr
    assert "python scripts/fetch_eval_weights.py" in dry.stderr
    result = CliRunner().invoke(main, ["campaign", str(plan)], env=env)
    assert result.exit_code == 2 and result.stderr == dry.stderr
    assert "nothing was generated" in result.stderr and not list(out.glob("*/videos/*.mp4"))
