"""Hostile but plausible input through the real CLI: every bad value or file is one line on stderr naming the
culprit, exit code 2, no traceback and nothing written or changed; a run folder has one writer; a damaged or
differently made video is regenerated, never reused."""
from __future__ import annotations

import hashlib
import json
import os
import random
import re
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import imageio.v3 as iio
import pytest
from click.testing import CliRunner

from fsbench.eval.runs import Run
from fsbench.files import TEMP_PREFIX, atomic_write_text, staging_of
from fsbench.harness.cli import main
from fsbench.harness.model.synthetic import TINY_PROMPTS
from fsbench.rundir import SCHEMA, load_manifest

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
        "rows-not-objects.json": b'{"rows": [1, 2]}',
        "nan-cost.json": json.dumps({"rows": [{"row": "sdpa-cudnn-bf16", "shape": [1, 2, 15, 32],
                                               "median_ms": float("nan")}]}).encode(),
        "days-of-steps.toml": re.sub(r"(?m)^steps = .*$", "steps = 99999999999",  # the tiny table's too
                                     (REPO / "scenarios" / "mlperf.toml").read_text()).encode(),
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
        (["run", "--out", out, *SMALL, "--reuse"], "--reuse"),
        (["sweep", "--out", out, *SMALL, "--offload", "--device", "cpu"], "--offload"),
        (["run", "--out", out, *SMALL, "--schedule", str(tmp / "missing.toml")], "missing.toml"),
        (["run", "--out", out, "--preset", str(files["days-of-steps.toml"])], "steps must be 1-1000"),
        (["run", "--out", out, "--preset", "sub/nowhere.toml"], f"shaped like {REPO / 'scenarios' / 'mlperf.toml'}"),
        (["run", "--out", out, *SMALL, "--schedule", "mxfp4:" + ",".join(["0"] * 200) + ",99"], "99"),
        (["sweep", "--out", out, *SMALL, "--schedules", f"bf16,{long_name}"], long_name[:40]),
        (["sweep", "--out", out, *SMALL, "--schedules", ""], "--schedules is empty"),
        (["sweep", "--out", out, *SMALL, "--schedule", " "], "--schedule is empty"),
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
        (["submission", "--runs", str(tmp), "--out", str(tmp / "sub"), "--submitter", "org", "--system", "x",
          "--official-checker", str(tmp / "no-checkout")], "--official-checker"),
        (["submission", "--check", str(tmp), "--official-checker", str(files["garbage.json"])], "garbage.json"),
    ]
    cases += [(["tune", "--budget", "ssim>=1.5", "--out", out, *SMALL], "ssim is at best 1"),
              (["tune", "--budget", "lpips<=-0.1", "--out", out, *SMALL], "lpips is at best 0")]
    for name, said in (("rows-not-objects.json", "rows-not-objects.json"), ("nan-cost.json", "median_ms nan")):
        cases.append((["tune", "--budget", "psnr>=30", "--out", out, *SMALL, "--costs", str(files[name])], said))
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
    assert not list(staging_of(out).iterdir())  # the kill's staging is gone


@pytest.mark.slow
def test_a_truncated_or_differently_made_video_is_regenerated_not_reused(tmp_path, one_thread):
    out = tmp_path / "run"
    args = ["run", "--out", str(out), *SMALL, "--scenario", "Offline", "--mode", "accuracy", "--reuse"]
    first = CliRunner().invoke(main, args, catch_exceptions=False)
    assert first.exit_code == 0, first.output
    videos = sorted((out / "videos").glob("*.mp4"))
    original = {v.name: v.read_bytes() for v in videos}
    victim = videos[0]
    victim.write_bytes(original[victim.name][: len(original[victim.name]) // 3])  # a kill mid-copy, say
    left = staging_of(out) / f"{TEMP_PREFIX}12345-abcdef.mp4"
    left.write_bytes(b"half")
    ours_not = [out / "videos" / ".tmp-kept.mp4", out / ".notes.tmp"]  # staging-like names outside the staging place
    for path in ours_not:
        path.write_bytes(b"the user's")

    resumed = CliRunner().invoke(main, args, catch_exceptions=False)
    assert resumed.exit_code == 0, resumed.output
    assert load_manifest(out)["schema"] == SCHEMA
    summary = load_manifest(out)["results"]["Offline"]["accuracy"]
    assert (summary["videos_generated"], summary["videos_reused"]) == (1, len(TINY_PROMPTS) - 1)
    assert summary["attention_kernels"] == {"bf16": "sdpa"}  # known although three videos were only reused
    assert {v.name: v.read_bytes() for v in videos} == original  # regenerated bit for bit
    assert iio.imread(victim, plugin="FFMPEG").shape == (5, 32, 32, 3)
    assert not left.exists() and all(path.read_bytes() == b"the user's" for path in ours_not)

    fully_resumed = CliRunner().invoke(main, args, catch_exceptions=False)
    assert fully_resumed.exit_code == 0
    summary = load_manifest(out)["results"]["Offline"]["accuracy"]
    assert summary["videos_reused"] == len(TINY_PROMPTS) and summary["attention_kernels"] == {"bf16": "sdpa"}

    other_vae = CliRunner().invoke(main, [*args, "--vae", "bf16"], catch_exceptions=False)
    assert other_vae.exit_code == 0, other_vae.output
    summary = load_manifest(out)["results"]["Offline"]["accuracy"]
    assert (summary["videos_generated"], summary["videos_reused"]) == (len(TINY_PROMPTS), 0)

    again = CliRunner().invoke(main, [*args[:-1], "--vae", "bf16"], catch_exceptions=False)  # no --reuse
    assert again.exit_code == 0, again.output
    summary = load_manifest(out)["results"]["Offline"]["accuracy"]
    assert (summary["videos_generated"], summary["videos_reused"], summary["reuse"]) == (len(TINY_PROMPTS), 0, False)


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


@pytest.mark.slow
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
    for mask, mode in ((0o022, 0o644), (0o077, 0o600)):
        previous = os.umask(mask)
        try:
            path = atomic_write_text(tmp_path / f"{mask}.json", "{}")
        finally:
            os.umask(previous)
        assert stat.S_IMODE(path.stat().st_mode) == mode


def _users_folder(root: Path) -> Path:
    """A folder of the user's own, with names like the staging of earlier fsbench versions."""
    (root / ".tmp-cache").mkdir(parents=True)
    (root / ".tmp-cache" / "important.txt").write_text("keep me")
    (root / ".notes.tmp").write_text("and me")
    return root


def test_every_writer_refuses_a_folder_it_did_not_write_and_deletes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    mine = _users_folder(tmp_path / "mywork")
    run = make_run(tmp_path / "bf16", "bf16", {"p": constant_video(range(100, 105))})
    inside_run = run / "videos"
    plan = tmp_path / "plan.toml"
    plan.write_text(f'model = "tiny"\nschedules = ["bf16"]\nout = "{mine}"\n')
    cases = [
        (["run", "--out", str(mine), *SMALL], str(mine)),
        (["sweep", "--out", str(mine), *SMALL], str(mine)),
        (["compare", str(run), "--out", str(mine)], str(mine)),
        (["compare", str(run), "--out", str(tmp_path / "cmp"), "--html", str(mine)], str(mine)),
        (["compare", str(run), "--out", str(tmp_path / "cmp"), "--html", str(run / "page")], "inside the run"),
        (["compare", str(run), "--out", str(inside_run)], str(inside_run)),
        (["compare", str(run), "--out", str(tmp_path / "both"), "--html", str(tmp_path / "both")], "--html"),
        (["compare", str(run), "--out", str(tmp_path / "pg" / "cmp"), "--html", str(tmp_path / "pg")], "holds --out"),
        (["compare", str(run), "--out", str(run)], "a run folder, not a comparison"),
        (["sweep", "--out", str(run), *SMALL], "a run folder, not a sweep"),
        (["submission", "--runs", str(run), "--out", str(mine), "--submitter", "org", "--system", "x"], str(mine)),
        (["run", "--out", str(mine / ".notes.tmp"), *SMALL], ".notes.tmp"),
        (["tune", "--budget", "psnr>=35", "--out", str(mine)], str(mine)),
        (["tune", "--budget", "psnr>=35", "--out", str(run)], "a run folder, not a tune folder"),
        (["campaign", str(plan), "--dry-run"], str(mine)),
        (["eval", str(run), "--reference", str(run), "--metrics", "psnr"], "is RUN itself"),
    ]
    before = _tree(tmp_path)
    for args, culprit in cases:
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2, (args, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and culprit in lines[0] and "Traceback" not in result.output, (args, result.stderr)
    assert _tree(tmp_path) == before


def test_a_folder_fsbench_wrote_is_taken_again_and_an_empty_one_is_taken(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    run = make_run(tmp_path / "bf16", "bf16", {"p": constant_video(range(100, 105))})
    first = CliRunner().invoke(main, ["compare", str(run), "--out", str(empty)])
    assert first.exit_code == 0, first.output
    again = CliRunner().invoke(main, ["compare", str(run), "--out", str(empty), "--html", str(tmp_path / "page")])
    assert again.exit_code == 0, again.output
    assert (empty / "compare.md").is_file() and (tmp_path / "page" / "index.html").is_file()
    assert not list(staging_of(empty).iterdir()) and not list(staging_of(tmp_path / "page").iterdir())
    (tmp_path / "lock-dir" / ".lock").mkdir(parents=True)
    (tmp_path / "lock-dir" / "manifest.json").write_text(json.dumps({"settings": SETTINGS}))
    held = CliRunner().invoke(main, ["eval", str(tmp_path / "lock-dir"), "--metrics", "vbench"])
    assert held.exit_code == 2 and "lock-dir/.lock is a folder" in held.stderr, held.output


def _fsbench_process(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "fsbench", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_one_ctrl_c_in_a_sweep_says_what_is_kept_in_one_line_and_exits_130(tmp_path):
    out = tmp_path / "sweep"
    sweep = _fsbench_process("sweep", "--out", str(out), "--schedules", "bf16,mxfp8", *SMALL, "--steps", "60")

    def videos() -> int:
        return len(list((out / "bf16" / "made_with").glob("*.json"))) if (out / "bf16").is_dir() else 0

    try:
        _wait_for(lambda: videos() > 0, sweep)
        sweep.send_signal(signal.SIGINT)
        _, stderr = sweep.communicate(timeout=120)
    finally:
        if sweep.poll() is None:
            sweep.kill()
    assert sweep.returncode == 130, stderr
    kept = len(list(out.glob("*/made_with/*.json")))
    said = [line for line in stderr.splitlines() if line.startswith("fsbench: interrupted:")]
    assert said == [f"fsbench: interrupted: {kept} of {2 * len(TINY_PROMPTS)} videos kept; the same command resumes"]
    assert "Traceback" not in stderr and "ERROR" not in stderr and "KeyboardInterrupt" not in stderr
    logged = [line for line in (out / "bf16" / "fsbench.log").read_text().splitlines() if "interrupted" in line]
    assert len(logged) == 1, logged


@pytest.mark.slow
def test_a_second_ctrl_c_exits_130_at_once_with_no_traceback_in_twenty_timed_tries(tmp_path):
    for attempt in range(20):
        delay = 0.6 + 0.3 * attempt  # from the first imports through the model's load
        process = _fsbench_process("run", "--out", str(tmp_path / f"run{attempt}"), *SMALL, "--mode", "accuracy")
        time.sleep(delay)
        process.send_signal(signal.SIGINT)
        time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        pressed = time.monotonic()
        try:
            _, stderr = process.communicate(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
        assert process.returncode == 130, (delay, stderr)
        assert time.monotonic() - pressed < 15, delay  # a press lands once a C call (loading torch) returns
        assert "Traceback" not in stderr and "Exception ignored" not in stderr, (delay, stderr)


def _mount_small_disk(folder: Path, size: str) -> bool:
    folder.mkdir(parents=True, exist_ok=True)
    try:
        return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                              capture_output=True, timeout=30).returncode == 0
    except OSError:
        return False


def _fail_fsync_of(monkeypatch, suffix: str, nth: int) -> None:
    """ENOSPC from the `nth` fsync of a file named `*suffix`: what a disk that fills at that file gives."""
    real, seen = os.fsync, []

    def fsync(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(suffix):
            seen.append(fd)
            if len(seen) == nth:
                raise OSError(28, "No space left on device")
        real(fd)
    monkeypatch.setattr(os, "fsync", fsync)


def _no_temporaries(root: Path) -> bool:
    return not [p for p in root.rglob("*") if p.name.startswith(TEMP_PREFIX)]


@pytest.mark.parametrize("disk", ["small tmpfs", "injected"])
def test_a_full_disk_is_one_line_naming_the_file_leaves_nothing_half_written_and_resumes(disk, tmp_path, monkeypatch,
                                                                                         one_thread):
    out = tmp_path / "disk" / "run"
    if disk == "small tmpfs":
        if not _mount_small_disk(tmp_path / "disk", "48k"):
            pytest.skip("this machine does not let the tests mount a tmpfs")
    else:
        _fail_fsync_of(monkeypatch, ".mp4", 2)
    args = ["-q", "run", "--out", str(out), *SMALL, "--scenario", "Offline", "--mode", "accuracy"]
    try:
        full = CliRunner().invoke(main, args)
        assert full.exit_code == 2, full.output
        lines = full.stderr.strip().splitlines()
        assert len(lines) == 1 and "no space left on device" in lines[0], lines
        where = ("videos", "frames", "made_with")  # the disk fills at a video, its kept frames or its record
        assert any(f"{out}/{folder}/" in lines[0] for folder in where), lines
        assert "Traceback" not in full.output and _no_temporaries(out)
        for video in (out / "videos").glob("*.mp4"):  # whatever has a final name is whole, with its record
            assert (out / "made_with" / f"{video.name}.json").is_file() and (out / "frames" / video.name).is_file()
            assert iio.imread(video, plugin="FFMPEG").shape == (5, 32, 32, 3)
        if disk == "small tmpfs":
            subprocess.run(["mount", "-o", "remount,size=16m", str(tmp_path / "disk")], check=True)
        else:
            monkeypatch.undo()
        resumed = CliRunner().invoke(main, args, catch_exceptions=False)
        assert resumed.exit_code == 0, resumed.output
        summary = load_manifest(out)["results"]["Offline"]["accuracy"]
        assert summary["videos_generated"] + summary["videos_reused"] == len(TINY_PROMPTS)
        assert len(list((out / "videos").glob("*.mp4"))) == len(TINY_PROMPTS) and _no_temporaries(out)
    finally:
        if disk == "small tmpfs":
            subprocess.run(["umount", str(tmp_path / "disk")], capture_output=True)


@pytest.mark.parametrize("suffix", [".png", ".json", ".svg", ".mp4", ".html"])
def test_compare_on_a_full_disk_is_one_line_and_leaves_no_temporary(suffix, tmp_path, monkeypatch):
    ref = make_run(tmp_path / "bf16", "bf16", {"p": constant_video(range(100, 105))})
    run = make_run(tmp_path / "mxfp8", "mxfp8", {"p": constant_video(range(110, 115))})
    _fail_fsync_of(monkeypatch, suffix, 1)
    out, page = tmp_path / "cmp", tmp_path / "page"
    result = CliRunner().invoke(main, ["compare", str(ref), str(run), "--out", str(out), "--html", str(page)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no space left on device" in lines[0] and lines[0].split(": ")[2].endswith(suffix)
    assert "Traceback" not in result.output and _no_temporaries(tmp_path)


def test_a_record_that_points_outside_its_run_is_refused_naming_the_field(tmp_path):
    ref = make_run(tmp_path / "bf16", "bf16", {"a red fox running": constant_video(range(100, 105))})
    run = make_run(tmp_path / "mxfp8", "mxfp8", {"a red fox running": constant_video(range(110, 115))})
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["prompts"] = {"texts": ["../../bf16/videos/a red fox running"], "count": 1}
    (run / "manifest.json").write_text(json.dumps(manifest))
    before = _tree(tmp_path)
    for args in (["eval", str(run), "--reference", str(ref), "--metrics", "psnr"],
                 ["compare", str(ref), str(run), "--out", str(tmp_path / "cmp")]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "prompts.texts[0]" in lines[0] and "manifest.json" in lines[0], lines
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("env, named", [({"WORLD_SIZE": "2"}, "WORLD_SIZE is set but RANK is not"),
                                        ({"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0"}, "MASTER_ADDR"),
                                        ({"WORLD_SIZE": "two", "RANK": "0", "LOCAL_RANK": "0",
                                          "MASTER_ADDR": "localhost", "MASTER_PORT": "29500"}, "WORLD_SIZE='two'")])
def test_an_incomplete_torchrun_environment_is_one_line_naming_the_variable_before_any_write(env, named, tmp_path,
                                                                                             monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = CliRunner().invoke(main, ["run", "--out", str(tmp_path / "run"), *SMALL])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0], lines
    assert not (tmp_path / "run").exists()


def test_prompt_files_lose_their_bom_and_crlf_and_a_repeated_prompt_is_refused(tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_bytes("\ufeffa red apple\r\na blue sky\r\na red apple\r\n".encode())
    result = CliRunner().invoke(main, ["run", "--out", str(tmp_path / "run"), *SMALL, "--prompts", str(prompts)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "prompt 2 repeats prompt 0 ('a red apple')" in lines[0], lines
    assert not (tmp_path / "run").exists()


def test_compare_refuses_an_unknown_prompt_and_tells_runs_of_one_schedule_apart(tmp_path):
    first = make_run(tmp_path / "a" / "mxfp8", "mxfp8", {"p": constant_video(range(100, 105))})
    second = make_run(tmp_path / "b" / "mxfp8", "mxfp8", {"p": constant_video(range(110, 115))})
    for run in (first, second):  # runs that record their prompts, as the harness writes them
        manifest = json.loads((run / "manifest.json").read_text())
        (run / "manifest.json").write_text(json.dumps({**manifest, "prompts": {"texts": ["p"], "count": 1}}))
    unknown = CliRunner().invoke(main, ["compare", str(first), str(second), "--out", str(tmp_path / "c1"),
                                        "--prompts", "no such prompt"])
    assert unknown.exit_code == 2 and "'no such prompt' is not a prompt" in unknown.stderr, unknown.output
    assert not (tmp_path / "c1").exists()
    both = CliRunner().invoke(main, ["compare", str(first), str(second), "--out", str(tmp_path / "c2")])
    assert both.exit_code == 0, both.output
    assert "MXFP8 (a/mxfp8)" in both.output and "MXFP8 (b/mxfp8)" in both.output


def test_compare_html_shows_an_undecodable_video_as_such_and_writes_the_rest(tmp_path):
    videos = {"p": constant_video(range(100, 105)), "q": constant_video(range(100, 105))}
    ref = make_run(tmp_path / "bf16", "bf16", videos)
    run = make_run(tmp_path / "mxfp8", "mxfp8", videos)
    damaged = Run.open(run).video("q")
    damaged.write_bytes(damaged.read_bytes()[:200])
    page = tmp_path / "page"
    result = CliRunner().invoke(main, ["compare", str(ref), str(run), "--out", str(tmp_path / "cmp"),
                                       "--prompts", "p", "--html", str(page)])
    assert result.exit_code == 0, result.output
    assert "the video does not decode" in (page / "index.html").read_text()


@pytest.mark.parametrize("schema, said", [(SCHEMA + 1, "written by a newer fsbench"),
                                          ("2", "is not a manifest version"), (None, "")])
def test_a_manifest_of_another_schema_is_read_or_refused_in_one_line_saying_why(schema, said, tmp_path):
    ref = make_run(tmp_path / "bf16", "bf16", {"p": constant_video(range(100, 105))})
    run = make_run(tmp_path / "mxfp8", "mxfp8", {"p": constant_video(range(110, 115))})
    if schema is not None:  # else a manifest from before the version was recorded: read as it is
        manifest = json.loads((run / "manifest.json").read_text())
        (run / "manifest.json").write_text(json.dumps({**manifest, "schema": schema}))
    result = CliRunner().invoke(main, ["compare", str(ref), str(run), "--out", str(tmp_path / "cmp")])
    if not said:
        assert result.exit_code == 0, result.output
        return
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0] and "mxfp8/manifest.json" in lines[0], lines


@pytest.mark.slow
def test_a_request_of_days_says_so_before_it_starts(tmp_path):
    out = tmp_path / "run"
    process = _fsbench_process("run", "--out", str(out), "--height", "2048", "--width", "2048", "--frames", "257",
                               "--steps", "1", "--num-prompts", "1", "--device", "cpu", "--scenario", "Offline",
                               "--mode", "accuracy")
    timer = threading.Timer(180, process.kill)
    timer.start()
    try:
        said = next((line for line in process.stderr if "estimated at" in line), "")
    finally:
        process.kill()
        process.communicate()
        timer.cancel()
    assert re.match(r"fsbench: this request is estimated at [\d.]+ (h|days) on cpu ", said), said
    assert "2048x2048x257, 1 steps" in said


def _packaged_run(tmp_path: Path, *accuracy: str) -> Path:
    """A tiny run with an Offline performance and accuracy result, ready to package."""
    out = tmp_path / "run"
    tiny = ["--out", str(out), "--height", "16", "--width", "16", "--frames", "1", "--steps", "1", "--scenario",
            "Offline"]
    for mode in (["--count", "1", "--target-qps", "0.001"], ["--mode", "accuracy", *accuracy]):
        result = CliRunner().invoke(main, ["run", *tiny, *mode], catch_exceptions=False)
        assert result.exit_code == 0, result.output
    return out


def _one_error_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("fsbench: error: "), result.output
    return lines[0]


def test_the_packager_refuses_a_run_whose_videos_are_not_the_recorded_ones(tmp_path, one_thread):
    run = _packaged_run(tmp_path)
    videos = sorted((run / "videos").glob("*.mp4"))
    videos[1].write_bytes(videos[1].read_bytes()[:100])
    videos[2].unlink()
    root = tmp_path / "root"
    args = ["submission", "--runs", str(run), "--out", str(root), "--submitter", "Org", "--system", "s"]
    line = _one_error_line(CliRunner().invoke(main, args))
    assert f"2 of {len(TINY_PROMPTS)} videos of {run} are missing or damaged (first: '{videos[1].name}'" in line
    assert not root.exists()
    videos[2].write_bytes(videos[0].read_bytes())  # another prompt's intact video under this name
    videos[1].write_bytes(videos[0].read_bytes())
    line = _one_error_line(CliRunner().invoke(main, args))
    assert "2 of" in line and "its bytes differ from the sha256 recorded" in line and not root.exists()


def test_a_reused_accuracy_run_is_recorded_and_the_closed_package_refuses_it(tmp_path, one_thread):
    run = _packaged_run(tmp_path)
    (run / "frames" / f"{TINY_PROMPTS[0]}-0.mp4").unlink()  # one video without its kept frames: made again
    again = ["run", "--out", str(run), "--height", "16", "--width", "16", "--frames", "1", "--steps", "1",
             "--scenario", "Offline", "--mode", "accuracy", "--reuse"]
    assert CliRunner().invoke(main, again, catch_exceptions=False).exit_code == 0
    summary = load_manifest(run)["results"]["Offline"]["accuracy"]
    reused = len(TINY_PROMPTS) - 1
    assert (summary["reuse"], summary["videos_reused"], summary["videos_generated"]) == (True, reused, 1)
    args = ["submission", "--runs", str(run), "--out", str(tmp_path / "root"), "--submitter", "Org", "--system", "s"]
    closed = CliRunner().invoke(main, [*args, "--division", "closed"])
    assert closed.exit_code == 2 and not (tmp_path / "root" / "closed").exists()
    reuse = [line for line in closed.stderr.splitlines() if "--reuse" in line]
    assert len(reuse) == 1 and reuse[0].startswith("error: ")
    assert f"reused {reused} of {len(TINY_PROMPTS)} videos" in reuse[0]
    assert any(line.startswith("error: ") and "has no VBench score" in line for line in closed.stderr.splitlines())


def test_a_damaged_loadgen_log_is_named_by_the_preflight_never_raised(tmp_path):
    scenario = tmp_path / "root" / "open" / "Org" / "results" / "s" / "wan-2.2-t2v-a14b" / "Offline"
    for folder, data in ((scenario / "performance" / "run_1", b"\xff\xfe garbage\n:::MLLOG {\"key\": \"res"),
                         (scenario / "accuracy", b':::MLLOG {"key": "effective_scenario", "va')):
        folder.mkdir(parents=True)
        (folder / "mlperf_log_detail.txt").write_bytes(data)
    result = CliRunner().invoke(main, ["submission", "--check", str(tmp_path / "root")])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "performance/run_1/mlperf_log_detail.txt: does not start with ':::MLLOG'" in result.output
    assert "accuracy/mlperf_log_detail.txt: accuracy run covers 0 samples" in result.output


def test_doctor_names_each_bad_input_that_run_refuses_and_never_raises(tmp_path):
    files = _bad_files(tmp_path / "inputs")
    garbage = tmp_path / "inputs"  # a folder, but no checkpoint
    args = ["--model", str(garbage), "--prompts", str(files["non-utf8.txt"]), "--latent", str(files["garbage.pt"])]
    result = CliRunner().invoke(main, ["doctor", "--plain", *args])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    lines = {text[9:].split(" ", 1)[0]: text for text in result.output.splitlines() if text[:1] in "oM-"}
    for name, culprit in (("model", garbage), ("prompts", files["non-utf8.txt"]), ("latent", files["garbage.pt"])):
        assert lines[name].startswith("MISSING") and str(culprit) in lines[name], result.output
    refused = CliRunner().invoke(main, ["run", "--out", str(tmp_path / "run"), *args])
    assert refused.exit_code == 2 and not (tmp_path / "run").exists()
