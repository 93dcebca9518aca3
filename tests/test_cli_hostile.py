"""Hostile but plausible input through the real CLI: every bad value or file is one line on stderr naming the
culprit, exit code 2, no traceback and nothing written or changed; a run folder has one writer; a damaged or
differently made video is regenerated, never reused."""
from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import imageio.v3 as iio
import pytest
from click.testing import CliRunner

from fsbench.eval.runs import Run
from fsbench.harness.cli import main
from fsbench.harness.model.synthetic import TINY_PROMPTS
from fsbench.harness.run import writer as results
from fsbench.rundir import load_manifest

from eval_runs import SETTINGS, constant_video, make_run

SMALL = ["--height", "32", "--width", "32", "--frames", "5", "--steps", "2"]
SEED = 20240611
SLOW_STEPS = "600"  # denoising steps that make a tiny video take seconds
REPO = Path(__file__).resolve().parents[1]


def _tree(root: Path) -> dict[str, tuple[int, str]]:
    """Every file and folder under `root` with its mode and content hash: what 'nothing changed' compares."""
    state = {}
    for path in sorted(root.rglob("*")):
        data = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
        state[str(path.relative_to(root))] = (path.stat().st_mode, data)
    return state


def _bad_files(root: Path) -> dict[str, Path]:
    root.mkdir(parents=True, exist_ok=True)
    files = {
        "non-utf8.txt": b"\xff\xfe\x00bad \xc3\x28 prompt\n",
        "garbage.json": b"{not json",
        "garbage.pt": os.urandom(257),
        "empty.toml": b"",
        "bad-syntax.toml": b"[[rule]\nformat = ",
        "wrong-types.toml": b'[[rule]]\nformat = "bf16"\nsteps = [1, 2]\n',
        "not-a-table.toml": b'rule = ["bf16:*"]\n',
        "absurd.toml": b'[[rule]]\nformat = "bf16"\nsteps = "0-99999999999999999999"\n',
        "description.toml": b'description = 5\n[[rule]]\nformat = "bf16"\nsteps = "*"\n',
        "latin1.toml": "description = 'caf\xe9'\n".encode("latin-1"),
        "list.json": b"[1, 2, 3]",
        "no-rows.json": json.dumps({"shape": [1, 1, 8, 8], "formats": ["bf16"], "rows": [{}], "seeds": 1,
                                    "seed_range": [0, 1], "device": "cpu"}).encode(),
    }
    for name, data in files.items():
        (root / name).write_bytes(data)
    return {name: root / name for name in files}


def _generated_numbers() -> list[tuple[str, str]]:
    """(option, value) pairs below each option's range, drawn from a seeded generator."""
    rng = random.Random(SEED)
    lows = {"--target-latency": 0, "--time": -1e-9, "--target-qps": 0, "--gpus": 0, "--ulysses": 0,
            "--capture-qkv": -1, "--count": 0, "--num-prompts": 0, "--steps": 0, "--height": 15}
    cases = []
    for option, low in lows.items():
        for _ in range(2):
            value = low - rng.choice([0, 1, 5, 10**rng.randint(1, 12)])
            cases.append((option, str(int(value)) if float(value).is_integer() else repr(value)))
    return cases + [("--target-latency", "nan"), ("--target-qps", "inf"), ("--time", "1e300"),
                    ("--steps", "100000000"), ("--height", "1000000"), ("--cfg-parallel", "0")]


def _cases(tmp: Path) -> list[tuple[list[str], str]]:
    """(arguments, text the one error line must contain) for every class of bad input."""
    files = _bad_files(tmp / "inputs")
    out = str(tmp / "run")
    long_name = "x" * 300
    cases = [(["run", "--out", out, *SMALL, option, value], option) for option, value in _generated_numbers()]
    cases += [
        (["run", "--out", "", *SMALL], "--out"),
        (["sweep", "--out", " ", *SMALL], "--out"),
        (["run", "--out", out, "--system", "../../x"], "--system"),
        (["run", "--out", out, "--system", ".."], "--system"),
        (["sweep", "--out", out, "--system", "a/b"], "--system"),
        (["run", "--out", out, *SMALL, "--prompts", str(files["non-utf8.txt"])], "non-utf8.txt"),
        (["run", "--out", out, *SMALL, "--latent", str(files["garbage.pt"])], "garbage.pt"),
        (["run", "--out", out, *SMALL, "--offload", "--device", "cpu"], "--offload"),
        (["sweep", "--out", out, *SMALL, "--offload", "--device", "cpu"], "--offload"),
        (["run", "--out", out, *SMALL, "--schedule", str(tmp / "missing.toml")], "missing.toml"),
        (["run", "--out", out, *SMALL, "--schedule", "mxfp4:" + ",".join(["0"] * 200) + ",99"], "99"),
        (["sweep", "--out", out, *SMALL, "--schedules", f"bf16,{long_name}"], long_name[:40]),
        (["schedules", "--steps", "0"], "--steps"),
        (["schedules", "--steps", "100000000"], "--steps"),
        (["schedules", "--layers", "-1"], "--layers"),
        (["eval", str(tmp), "--workers", "-3"], "--workers"),
        (["eval", str(tmp), "--workers", "0"], "--workers"),
        (["compare", str(tmp), "--frame", "-1"], "--frame"),
        (["compare", str(tmp), "--out", ""], "--out"),
        (["kernels", "ablation", "--formats", "bf16,bf16"], "bf16"),
        (["kernels", "ablation", "--formats", "bf16,,mxfp8"], "--formats"),
        (["kernels", "ablation", "--shape", "0,1,64,32"], "--shape"),
        (["kernels", "ablation", "--shape", "1000,1000,100000,128"], "--shape"),
        (["kernels", "ablation", "--shape", "1,1,100000,8"], "--shape"),
        (["kernels", "ablation", "--seeds", "0"], "--seeds"),
        (["kernels", "bench", "--repeats", "0"], "--repeats"),
        (["kernels", "check", "--formats", "mxfp8,mxfp8"], "mxfp8"),
        (["submission", "--runs", str(tmp), "--out", str(tmp / "sub"), "--submitter", "a/b", "--system", "x"],
         "--submitter"),
        (["submission", "--runs", str(tmp), "--out", "", "--submitter", "org", "--system", "x"], "--out"),
    ]
    for name in ("empty.toml", "bad-syntax.toml", "wrong-types.toml", "not-a-table.toml", "absurd.toml",
                 "description.toml", "latin1.toml"):
        cases.append((["run", "--out", out, *SMALL, "--schedule", str(files[name])], name))
        cases.append((["schedules", str(files[name])], name))
    for name in ("garbage.json", "list.json", "no-rows.json", "non-utf8.txt"):
        cases.append((["kernels", "ablation-merge", str(files[name]), "--out", str(tmp / "merged.json")], name))
    return cases


def _case_ids() -> list[str]:
    return [f"{i}:{' '.join(args[:1] + [a for a in args[1:] if a.startswith('--') and a not in SMALL])}"
            for i, (args, _) in enumerate(_cases(Path("/nonexistent")))]


@pytest.mark.parametrize("index", range(len(_case_ids())), ids=_case_ids())
def test_bad_input_is_one_line_naming_the_culprit_and_changes_nothing(index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args, culprit = _cases(tmp_path)[index]
    before = _tree(tmp_path)
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, (args, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fsbench: error: "), result.stderr
    assert culprit in lines[0] and "Traceback" not in result.output
    assert _tree(tmp_path) == before


def test_a_long_valid_schedule_spec_is_parsed_never_used_as_a_file_name():
    spec = ";".join(f"mxfp{4 + 2 * (i % 2)}@{i}:*" for i in range(40))  # 40 layer rules, > 250 characters
    assert len(spec) > 250
    result = CliRunner().invoke(main, ["schedules", "--layers", "40", "--steps", "4", spec])
    assert result.exit_code == 0, result.output
    assert "steps 0-3: mxfp4/mxfp6 mxfp4/mxfp6 mxfp4/mxfp6 mxfp4/mxfp6" in result.output


def _start_run(out: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "fsbench", "run", "--out", str(out), *SMALL, *extra], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(condition, process: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


@pytest.mark.slow
def test_second_job_on_a_folder_fails_at_once_naming_the_holder_and_double_ctrl_c_exits_cleanly(tmp_path):
    out = tmp_path / "run"
    first = _start_run(out, "--mode", "performance", "--count", "500", "--time", "0", "--steps", SLOW_STEPS)

    def videos() -> int:
        return len(list((out / "videos").glob("*.mp4"))) if (out / "videos").is_dir() else 0

    try:
        _wait_for(lambda: videos() > 0, first)
        before = _tree(out)
        started = time.monotonic()
        second = CliRunner().invoke(main, ["run", "--out", str(out), *SMALL, "--mode", "accuracy"])
        assert time.monotonic() - started < 10
        assert second.exit_code == 2, second.output
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and f"PID {first.pid}" in lines[0] and str(out) in lines[0]
        assert set(before) <= set(_tree(out))  # the second job touched nothing the first had written
        # both presses half a second into a fresh video, which takes seconds: one is being generated
        written = videos()
        _wait_for(lambda: videos() > written, first)
        time.sleep(0.5)
        first.send_signal(signal.SIGINT)
        time.sleep(0.2)
        first.send_signal(signal.SIGINT)
        _, stderr = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 130, stderr  # not SIGABRT (-6) from LoadGen's thread
    assert "Traceback" not in stderr and "aborted" in stderr
    resumed = CliRunner().invoke(main, ["run", "--out", str(out), *SMALL, "--steps", SLOW_STEPS, "--mode", "accuracy"])
    assert resumed.exit_code == 0, resumed.output
    assert not [p for p in out.rglob("*") if p.name.startswith(".tmp-")]  # the kill's staging is gone


def test_a_truncated_or_differently_made_video_is_regenerated_not_reused(tmp_path, one_thread):
    out = tmp_path / "run"
    args = ["run", "--out", str(out), *SMALL, "--scenario", "Offline", "--mode", "accuracy"]
    first = CliRunner().invoke(main, args, catch_exceptions=False)
    assert first.exit_code == 0, first.output
    videos = sorted((out / "videos").glob("*.mp4"))
    original = {v.name: v.read_bytes() for v in videos}
    victim = videos[0]
    victim.write_bytes(original[victim.name][: len(original[victim.name]) // 3])  # a kill mid-copy, say
    (out / "videos" / ".tmp-left-by-a-kill.mp4").write_bytes(b"half")

    resumed = CliRunner().invoke(main, args, catch_exceptions=False)
    assert resumed.exit_code == 0, resumed.output
    summary = load_manifest(out)["results"]["Offline"]["accuracy"]
    assert (summary["videos_generated"], summary["videos_reused"]) == (1, len(TINY_PROMPTS) - 1)
    assert summary["attention_kernels"] == {"bf16": "sdpa"}  # known although three videos were only reused
    assert {v.name: v.read_bytes() for v in videos} == original  # regenerated bit for bit
    assert iio.imread(victim, plugin="FFMPEG").shape == (5, 32, 32, 3)
    assert not (out / "videos" / ".tmp-left-by-a-kill.mp4").exists()

    fully_resumed = CliRunner().invoke(main, args, catch_exceptions=False)
    assert fully_resumed.exit_code == 0
    summary = load_manifest(out)["results"]["Offline"]["accuracy"]
    assert summary["videos_reused"] == len(TINY_PROMPTS) and summary["attention_kernels"] == {"bf16": "sdpa"}

    other_vae = CliRunner().invoke(main, [*args, "--vae", "bf16"], catch_exceptions=False)
    assert other_vae.exit_code == 0, other_vae.output
    summary = load_manifest(out)["results"]["Offline"]["accuracy"]
    assert (summary["videos_generated"], summary["videos_reused"]) == (len(TINY_PROMPTS), 0)


def test_eval_scores_the_prompts_the_run_recorded_not_the_edited_file(tmp_path, one_thread):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("  a red apple  \n\n a blue sky\n")
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["run", "--out", str(out), *SMALL, "--scenario", "Offline", "--mode",
                                       "accuracy", "--prompts", str(prompts)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    prompts.write_text("something else entirely\n")
    run = Run.open(out)
    assert run.prompts() == ["a red apple", "a blue sky"]
    assert all(run.video(p).is_file() for p in run.prompts())
    other = CliRunner().invoke(main, ["run", "--out", str(out), *SMALL, "--scenario", "Offline", "--mode",
                                      "accuracy", "--prompts", str(prompts)])
    assert other.exit_code == 2 and "different prompts" in other.stderr  # never mixes two prompt sets


def test_compare_refuses_runs_of_other_settings_and_writes_nothing(tmp_path):
    a = make_run(tmp_path / "bf16", "bf16", {"p": constant_video(range(100, 105))})
    b = make_run(tmp_path / "mxfp8", "mxfp8", {"p": constant_video(range(100, 105), height=48)},
                 settings={**SETTINGS, "height": 48})
    out = tmp_path / "cmp"
    result = CliRunner().invoke(main, ["compare", str(a), str(b), "--out", str(out)])
    assert result.exit_code == 2 and "different settings" in result.stderr and "height" in result.stderr
    assert not out.exists()


def test_compare_leaves_out_scores_of_videos_that_changed_after_eval(tmp_path):
    ref = make_run(tmp_path / "bf16", "bf16", {"p": constant_video(range(100, 105))})
    run = make_run(tmp_path / "mxfp8", "mxfp8", {"p": constant_video(range(110, 115))})
    scored = CliRunner().invoke(main, ["eval", str(run), "--reference", str(ref), "--metrics", "psnr"])
    assert scored.exit_code == 0, scored.output
    fresh = CliRunner().invoke(main, ["compare", str(ref), str(run), "--out", str(tmp_path / "c1")])
    assert fresh.exit_code == 0 and "28.13" in fresh.output
    from fsbench.eval.video_io import write_video

    write_video(Run.open(run).video("p"), constant_video(range(120, 125)), lossless=True)
    stale = CliRunner().invoke(main, ["compare", str(ref), str(run), "--out", str(tmp_path / "c2")])
    assert stale.exit_code == 0 and "28.13" not in stale.output and "not the ones `fsbench eval` scored" in stale.output


def test_eval_reports_a_truncated_video_and_scores_the_rest(tmp_path):
    ref = make_run(tmp_path / "bf16", "bf16", {"p": constant_video(range(100, 105)),
                                               "q": constant_video(range(100, 105))})
    run = make_run(tmp_path / "mxfp8", "mxfp8", {"p": constant_video(range(110, 115)),
                                                 "q": constant_video(range(110, 115))})
    video = Run.open(run).video("q")
    video.write_bytes(video.read_bytes()[:200])
    result = CliRunner().invoke(main, ["eval", str(run), "--reference", str(ref), "--metrics", "psnr"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "does not decode" in result.stderr and "q-0.mp4" in result.stderr
    assert "1 of 2 prompts" in result.output


def test_written_files_take_the_umask(tmp_path):
    previous = os.umask(0o022)
    try:
        results._umask.cache_clear()
        path = results.atomic_write_text(tmp_path / "a.json", "{}")
    finally:
        os.umask(previous)
        results._umask.cache_clear()
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
