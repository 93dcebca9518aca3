"""`fsbench submission` end to end: real tiny-model runs through the CLI (real LoadGen, real mp4s) packaged as an
MLPerf v6.1 tree, the pre-flight catching each rule broken on purpose, and the closed division refused.

The runs keep LoadGen's 600 s min_duration (the checker reads the configured value) and stop early through
--count, as a short open submission must. The accuracy passes cover all 248 MLPerf prompts (16x16, one frame, one
step) with --reuse, so each video is generated once (by the performance runs or the first accuracy pass) and the test
stays short; the READMEs note the reuse and the closed division refuses it. `fsbench eval` needs the VBench
environment and weights, so its recorded score is written here the way eval stores it.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from fsbench.files import KIND, OWNED, staging_of
from fsbench.harness.cli import main
from fsbench.harness.mlperf import accuracy_log
from fsbench.harness.mlperf.rules import (
    AUDIT_VIDEOS,
    SYSTEM_KEYS,
    SYSTEM_TRUTHY,
    check,
    errors,
)
from fsbench.rundir import load_manifest

pytestmark = pytest.mark.slow
SMALL = ["--model", "tiny", "--height", "16", "--width", "16", "--frames", "1", "--steps", "1"]
SYSTEM = "cpu-tiny"
MODEL = "wan-2.2-t2v-a14b"
SCORE = 70.12
# The official checker beside the repository (../shared), as every developer machine and CI have it.
CHECKER_DEFAULT = Path(__file__).resolve().parents[2] / "shared/external/mlperf-inference/tools/submission"


def fsbench(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def tree_files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def expected_layout(scenarios=("Offline", "SingleStream")) -> set[str]:
    files = {f"systems/{SYSTEM}.json", f"src/{MODEL}/README.md"}
    for scenario in scenarios:
        base = f"results/{SYSTEM}/{MODEL}/{scenario}"
        files |= {f"{base}/{name}" for name in ("README.md", "user.conf", "measurements.json")}
        files |= {f"{base}/performance/run_1/mlperf_log_{n}" for n in ("summary.txt", "detail.txt")}
        files |= {f"{base}/accuracy/{n}" for n in ("mlperf_log_summary.txt", "mlperf_log_detail.txt",
                                                   "mlperf_log_accuracy.json", "accuracy.txt")}
        files |= {f"{base}/accuracy/videos/{idx}.mp4" for idx in AUDIT_VIDEOS}
        files |= {f"{base}/accuracy/made_with/{idx}.mp4.json" for idx in AUDIT_VIDEOS}
        files |= {f"{base}/accuracy/videos/captions.txt", f"{base}/accuracy/fsbench.sha256"}
    return files


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, shared_data):
    """One run folder with SingleStream and Offline performance and accuracy results of the tiny model."""
    import torch

    from fsbench.eval import store

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    run = tmp_path_factory.mktemp("runs") / "tiny-bf16"
    common = [*SMALL, "--prompts", shared_data / "vbench_prompts.txt", "--out", run]
    try:
        for args in (["--scenario", "SingleStream", "--count", 64, "--target-latency", 100],
                     ["--scenario", "Offline", "--count", 2, "--target-qps", 0.001]):
            result = fsbench("run", *args, *common)
            assert result.exit_code == 0, result.output
        for scenario in ("Offline", "SingleStream"):
            result = fsbench("run", "--scenario", scenario, "--mode", "accuracy", "--reuse", *common)
            assert result.exit_code == 0, result.output
    finally:
        torch.set_num_threads(threads)
    store.update_json(run / "eval" / "summary.json", "vbench", {"accuracy": {"vbench_score": SCORE}})
    return run


@pytest.fixture(scope="module")
def open_tree(tiny_run, tmp_path_factory):
    root = tmp_path_factory.mktemp("submission")
    result = fsbench("submission", "--runs", tiny_run, "--out", root, "--division", "open", "--submitter",
                     "FsbenchOrg", "--system", SYSTEM)
    assert result.exit_code == 0, result.output
    return root, root / "open" / "FsbenchOrg", result.output


@pytest.fixture
def copy_of(open_tree, tmp_path):
    """A fresh copy of the open tree to break on purpose; returns (root, submitter folder, scenario folder)."""
    root, _, _ = open_tree
    shutil.copytree(root, tmp_path / "root")
    sub = tmp_path / "root" / "open" / "FsbenchOrg"
    return tmp_path / "root", sub, sub / "results" / SYSTEM / MODEL / "Offline"


def test_open_tree_has_exactly_the_documented_layout(open_tree):
    root, sub, output = open_tree
    assert sorted(os.listdir(root)) == [OWNED, "open"] and sorted(os.listdir(root / "open")) == ["FsbenchOrg"]
    assert (root / OWNED / KIND).read_text() == "submission\n" and not list(staging_of(root).iterdir())
    assert tree_files(sub) == expected_layout()
    assert f"submission: {sub}" in output


def test_open_tree_fills_every_field_the_checker_reads(open_tree, tiny_run):
    _, sub, _ = open_tree
    desc = json.loads((sub / "systems" / f"{SYSTEM}.json").read_text())
    assert set(SYSTEM_KEYS) <= set(desc)
    assert all(desc[k] for k in SYSTEM_TRUTHY)
    assert (desc["division"], desc["submitter"], desc["system_name"]) == ("open", "FsbenchOrg", SYSTEM)
    assert desc["accelerators_per_node"] == "0" and desc["status"] == "available"
    for scenario in ("Offline", "SingleStream"):
        base = sub / "results" / SYSTEM / MODEL / scenario
        measurements = json.loads((base / "measurements.json").read_text())
        assert all(measurements[k] for k in ("input_data_types", "retraining", "starting_weights_filename",
                                             "weight_data_types", "weight_transformations"))
        assert f"{MODEL}.{scenario}.min_duration = 600000" in (base / "user.conf").read_text()
        assert (base / "README.md").read_text().startswith(f"# {MODEL} {scenario}")
        source = tiny_run / SYSTEM / MODEL / scenario / "accuracy" / "mlperf_log_accuracy.json"
        lines = (base / "accuracy" / "accuracy.txt").read_text().splitlines()
        assert lines[0] == f"{{'vbench_score': {SCORE}}}"
        assert lines[-1] == f"hash={hashlib.sha256(source.read_bytes()).hexdigest()}"
        packed = (base / "accuracy" / "mlperf_log_accuracy.json").read_bytes()
        assert len(packed) == 8199 and packed == accuracy_log.truncated(source.read_bytes())
        captions = (base / "accuracy" / "videos" / "captions.txt").read_text().splitlines()
        assert captions[0].startswith("130.mp4\tA boat sailing leisurely along the Seine River")


def test_preflight_of_the_open_tree_has_only_warnings(open_tree):
    root, _, _ = open_tree
    result = fsbench("submission", "--check", root)
    assert result.exit_code == 0, result.output
    assert "no errors" in result.output and "LoadGen result is INVALID" in result.output


def _break_missing_audit_video(root, sub, scenario):
    (scenario / "accuracy" / "videos" / "238.mp4").unlink()
    return "audit video(s) missing: 238.mp4"


def _break_truncated_audit_video(root, sub, scenario):
    video = scenario / "accuracy" / "videos" / "238.mp4"
    video.write_bytes(video.read_bytes()[:300])
    return "238.mp4 does not decode"


def _break_untruncated_log(root, sub, scenario):
    (scenario / "accuracy" / "mlperf_log_accuracy.json").write_text("[" + " " * 12000 + "]")
    return "is not truncated (12002 bytes > 10240)"


def _break_integer_accelerators(root, sub, scenario):
    path = sub / "systems" / f"{SYSTEM}.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "accelerators_per_node": 0}))
    return 'field accelerators_per_node needs a meaningful value, found 0 (write the string "0"'


def _break_stray_folder(root, sub, scenario):
    (scenario.parent / "notes").mkdir()
    return "stray folder"


def _break_low_score(root, sub, scenario):
    path = scenario / "accuracy" / "accuracy.txt"
    path.write_text(path.read_text().replace(f"'vbench_score': {SCORE}", "'vbench_score': 69.0"))
    return "accuracy not met: vbench_score 69.0 < 69.7752"


def _break_accuracy_samples(root, sub, scenario):
    path = scenario / "accuracy" / "mlperf_log_detail.txt"
    path.write_text(path.read_text().replace('"key": "effective_accuracy_sample_count", "value": 248',
                                             '"key": "effective_accuracy_sample_count", "value": 100'))
    return "accuracy run covers 100 samples, the dataset has 248"


def _break_missing_system_json(root, sub, scenario):
    (sub / "systems" / f"{SYSTEM}.json").unlink()
    return f"systems/{SYSTEM}.json: missing"


def _break_short_min_duration(root, sub, scenario):
    path = scenario / "performance" / "run_1" / "mlperf_log_detail.txt"
    path.write_text(path.read_text().replace('"effective_min_duration_ms", "value": 600000',
                                             '"effective_min_duration_ms", "value": 10000'))
    return "min_duration is 10000 ms, needs >= 600000"


def _break_early_stopping(root, sub, scenario):
    path = scenario.parent / "SingleStream" / "performance" / "run_1" / "mlperf_log_detail.txt"
    text = path.read_text().replace('"key": "early_stopping_met", "value": true',
                                    '"key": "early_stopping_met", "value": false')
    path.write_text(text.replace('"result_query_count", "value": 64', '"result_query_count", "value": 50'))
    return "early stopping not met with 50 queries: SingleStream needs at least 64"


@pytest.mark.parametrize("breaker", [_break_missing_audit_video, _break_truncated_audit_video, _break_untruncated_log,
                                     _break_integer_accelerators, _break_stray_folder, _break_low_score,
                                     _break_accuracy_samples, _break_missing_system_json,
                                     _break_short_min_duration, _break_early_stopping],
                         ids=lambda f: f.__name__[len("_break_"):])
def test_preflight_flags_each_rule_broken_on_purpose(copy_of, breaker):
    root, sub, scenario = copy_of
    assert not errors(check(root))
    expected = breaker(root, sub, scenario)
    problems = [str(p) for p in check(root)]
    assert any(expected in p for p in problems), problems
    result = fsbench("submission", "--check", root)
    assert expected in result.output
    if breaker is not _break_low_score:  # a low score is only a warning in the open division
        assert result.exit_code == 2 and "fsbench: error:" in result.output


def _swap_audit_videos(root, sub, scenario):
    from fsbench.eval.video_io import write_video

    from eval_runs import constant_video

    video = scenario / "accuracy" / "videos" / "238.mp4"
    write_video(video, constant_video([7], 16, 16), fps=16)  # another valid video under the audit name
    return "accuracy/videos/238.mp4: differs from the sha256 recorded when the tree was packaged:"


def _edit_a_line_of_the_truncated_log(root, sub, scenario):
    path = scenario / "accuracy" / "mlperf_log_accuracy.json"
    text = path.read_text()
    edited = text.replace('"seq_id" : 1,', '"seq_id" : 7,', 1)
    assert edited != text and len(edited) == len(text)
    path.write_text(edited)
    return "accuracy/mlperf_log_accuracy.json: differs from the sha256 recorded when the tree was packaged:"


def _forge_a_made_with_record(root, sub, scenario):
    path = scenario / "accuracy" / "made_with" / "238.mp4.json"
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "made_with": "0" * 64}, indent=1) + "\n")
    return "accuracy/made_with/238.mp4.json: differs from the sha256 recorded when the tree was packaged:"


@pytest.mark.parametrize("breaker", [_swap_audit_videos, _edit_a_line_of_the_truncated_log, _forge_a_made_with_record],
                         ids=lambda f: f.__name__.strip("_"))
def test_the_check_names_the_first_file_that_differs_from_the_packaged_digest(copy_of, breaker):
    root, sub, scenario = copy_of
    digests = (scenario / "accuracy" / "fsbench.sha256").read_text().splitlines()
    assert len(digests) == 2 * len(AUDIT_VIDEOS) + 3  # videos and their records, captions, the log, accuracy.txt
    expected = breaker(root, sub, scenario)
    result = fsbench("submission", "--check", root)
    assert result.exit_code == 2 and expected in result.output, result.output
    assert "error: open/FsbenchOrg/results/cpu-tiny/wan-2.2-t2v-a14b/Offline/accuracy/" in result.output
    listed = subprocess.run(["sha256sum", "--quiet", "-c", "fsbench.sha256"], cwd=scenario / "accuracy",
                            capture_output=True, text=True)
    assert listed.returncode == 1  # the digest file is sha256sum's format: the standard tool finds it too


def test_a_packaged_tree_verifies_with_sha256sum(open_tree):
    _, sub, _ = open_tree
    for scenario in ("Offline", "SingleStream"):
        folder = sub / "results" / SYSTEM / MODEL / scenario / "accuracy"
        assert subprocess.run(["sha256sum", "--quiet", "-c", "fsbench.sha256"], cwd=folder).returncode == 0


def test_preflight_reports_every_problem_in_one_pass(copy_of):
    root, sub, scenario = copy_of
    messages = [_break_missing_audit_video(root, sub, scenario), _break_untruncated_log(root, sub, scenario),
                _break_stray_folder(root, sub, scenario)]
    output = fsbench("submission", "--check", root).output
    assert all(m in output for m in messages)


def test_closed_preflight_names_the_rules_short_runs_break(copy_of):
    root, sub, scenario = copy_of
    closed = root / "closed" / "FsbenchOrg"
    closed.parent.mkdir()
    os.replace(sub, closed)
    desc_path = closed / "systems" / f"{SYSTEM}.json"
    desc_path.write_text(json.dumps({**json.loads(desc_path.read_text()), "division": "closed"}))
    shutil.rmtree(closed / "results" / SYSTEM / MODEL / "SingleStream")
    detail = closed / "results" / SYSTEM / MODEL / "Offline" / "performance" / "run_1" / "mlperf_log_detail.txt"
    detail.write_text(detail.read_text().replace("2085463073848966840", "2465351861681999779"))
    problems = [str(p) for p in errors(check(root))]
    for expected in ("scenario SingleStream is missing", "TEST04: missing", "LoadGen result is INVALID",
                     "qsl_rng_seed is 2465351861681999779, expected 2085463073848966840"):
        assert any(expected in p for p in problems), (expected, problems)


def test_closed_packaging_is_refused_with_every_failing_rule(tiny_run, tmp_path):
    result = fsbench("submission", "--runs", tiny_run, "--out", tmp_path, "--division", "closed", "--submitter",
                     "FsbenchOrg", "--system", SYSTEM)
    assert result.exit_code == 2
    assert "submission not written" in result.output
    assert "TEST04: missing" in result.output and "LoadGen result is INVALID" in result.output
    # the Offline pass made again the performance runs' videos (they keep no frames); SingleStream's reused all
    reused = [line for line in result.output.splitlines() if "--reuse" in line]
    assert [line.split(": ", 2)[1] for line in reused] == [f"closed/FsbenchOrg/results/{SYSTEM}/{MODEL}/SingleStream/"
                                                           "accuracy"]
    assert all(line.startswith("error: ") for line in reused)
    assert "SingleStream accuracy run reused 248 of 248 videos made before it" in reused[0]
    assert not (tmp_path / "closed").exists() and not list(tmp_path.rglob(".fsbench-staging-*"))


def test_the_open_readme_notes_a_reused_accuracy_run_and_a_missing_score(open_tree, tiny_run, tmp_path):
    _, sub, output = open_tree
    results = sub / "results" / SYSTEM / MODEL
    generated = load_manifest(tiny_run)["results"]["Offline"]["accuracy"]["videos_generated"]
    assert generated == 248  # the performance runs keep no lossless frames, so their videos are made again
    assert "Offline accuracy run reused" not in (results / "Offline" / "README.md").read_text()
    notes = (results / "SingleStream" / "README.md").read_text().split("## Notes\n", 1)[1]
    assert "SingleStream accuracy run reused 248 of 248 videos made before it (--reuse)" in notes
    assert "has no VBench score" not in notes and "warning: " in output and "reused 248 of 248" in output

    run = tmp_path / "unscored"
    shutil.copytree(tiny_run, run, ignore=shutil.ignore_patterns("eval"))
    args = ["--runs", run, "--out", tmp_path / "root", "--submitter", "FsbenchOrg", "--system", SYSTEM]
    opened = fsbench("submission", *args)
    assert opened.exit_code == 0, opened.output
    for scenario in ("Offline", "SingleStream"):
        readme = tmp_path / "root" / "open" / "FsbenchOrg" / "results" / SYSTEM / MODEL / scenario / "README.md"
        assert f"{run} has no VBench score" in readme.read_text().split("## Notes\n", 1)[1]
    closed = fsbench("submission", *args, "--division", "closed")
    assert closed.exit_code == 2
    assert sum(line.startswith("error: ") and "has no VBench score" in line for line in closed.output.splitlines()) == 2


def test_a_missing_accuracy_run_is_refused_before_anything_is_written(tiny_run, tmp_path):
    run = tmp_path / "perf-only"
    shutil.copytree(tiny_run, run, ignore=shutil.ignore_patterns("accuracy", "videos"))
    result = fsbench("submission", "--runs", run, "--out", tmp_path / "root", "--submitter", "Org", "--system", "s")
    assert result.exit_code == 2
    assert "has no accuracy run in --runs: run `fsbench run --scenario" in result.output


def _official_checker() -> Path | None:
    """tools/submission of an mlcommons/inference checkout: $FSBENCH_MLPERF_CHECKER, by default the copy in
    ../shared/external/mlperf-inference beside the repository."""
    tools = Path(os.environ.get("FSBENCH_MLPERF_CHECKER") or CHECKER_DEFAULT)
    return tools if (tools / "submission_checker" / "main.py").is_file() else None


def test_official_checker_accepts_the_open_tree(open_tree):
    tools = _official_checker()
    if tools is None:
        reason = ("the official MLPerf submission checker is not on PyPI (it lives in mlcommons/inference "
                  f"tools/submission); set FSBENCH_MLPERF_CHECKER to that folder (default {CHECKER_DEFAULT})")
        # CI has the checker beside the repository: a skip there would hide a broken submission tree
        (pytest.fail if os.environ.get("CI") else pytest.skip)(reason)
    pytest.importorskip("yaml", reason="the official checker needs PyYAML (pip install -e '.[dev]')")
    root, _, _ = open_tree
    result = subprocess.run([sys.executable, "-m", "submission_checker.main", "--input", str(root), "--version",
                             "v6.1"], cwd=tools, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "SUMMARY: submission looks OK" in result.stdout + result.stderr


def test_the_official_checker_runs_from_a_checkout_and_its_verdict_is_shown_beside_ours(tiny_run, copy_of,
                                                                                         tmp_path):
    tools = _official_checker()
    if tools is None:
        pytest.skip(f"no mlcommons/inference checkout at {CHECKER_DEFAULT.parents[1]}")
    pytest.importorskip("yaml", reason="the official checker needs PyYAML (pip install -e '.[dev]')")
    checkout, root = tools.parents[1], tmp_path / "packaged"
    before = sorted(p.name for p in tools.iterdir())
    result = fsbench("submission", "--runs", tiny_run, "--out", root, "--submitter", "FsbenchOrg", "--system",
                     SYSTEM, "--official-checker", checkout)
    assert result.exit_code == 0, result.output
    assert "official checker: submission looks OK" in result.output and (root / "open" / "FsbenchOrg").is_dir()
    assert sorted(p.name for p in tools.iterdir()) == before  # its summary.csv went to a scratch folder

    broken, _, scenario = copy_of
    ours = _break_untruncated_log(*copy_of)
    refused = fsbench("submission", "--check", broken, "--official-checker", checkout)
    assert refused.exit_code == 2 and ours in refused.output
    log = (scenario / "accuracy" / "mlperf_log_accuracy.json").relative_to(broken)
    assert "official checker: refused the tree (exit 1) (" in refused.output
    assert f" error(s); first: {log} is not truncated)" in refused.output
    _break_missing_system_json(*copy_of)  # the checker's own code fails on this one
    stopped = fsbench("submission", "--check", broken, "--official-checker", checkout)
    assert stopped.exit_code == 2 and "official checker: stopped with an error (exit 1)" in stopped.output


def test_runs_split_over_folders_package_into_one_tree_and_repackaging_replaces_it(tiny_run, open_tree, tmp_path):
    perf, acc = tmp_path / "perf", tmp_path / "acc"
    shutil.copytree(tiny_run, perf, ignore=shutil.ignore_patterns("accuracy"))
    shutil.copytree(tiny_run, acc, ignore=shutil.ignore_patterns("performance"))
    root = tmp_path / "root"
    (root / "open" / "FsbenchOrg").mkdir(parents=True)
    (root / "open" / "FsbenchOrg" / "stale.txt").write_text("from an older packaging")
    result = fsbench("submission", "--runs", perf, acc, "--out", root, "--submitter", "FsbenchOrg", "--system",
                     SYSTEM)
    assert result.exit_code == 0, result.output
    assert tree_files(root / "open" / "FsbenchOrg") == expected_layout()
    twice = fsbench("submission", "--runs", perf, tiny_run, "--out", root, "--submitter", "FsbenchOrg", "--system",
                    SYSTEM)
    assert twice.exit_code == 2 and "two runs hold a" in twice.output


def test_test04_logs_are_packaged_with_their_verify_performance_verdict(tiny_run, tmp_path):
    from test_submission_test04 import loadgen_run

    from fsbench.harness.mlperf.submission import test04_dir

    run = tmp_path / "with-test04"
    shutil.copytree(tiny_run, run)
    loadgen_run(test04_dir(run, SYSTEM, "SingleStream"), 0.0, audit=True)
    (test04_dir(run, SYSTEM, "SingleStream") / "audit.config").unlink()
    root = tmp_path / "root"
    assert fsbench("submission", "--runs", run, "--out", root, "--submitter", "FsbenchOrg", "--system",
                   SYSTEM).exit_code == 0
    test = root / "open" / "FsbenchOrg" / "results" / SYSTEM / MODEL / "SingleStream" / "TEST04"
    assert tree_files(test) == {"verify_performance.txt", "performance/run_1/mlperf_log_detail.txt",
                                "performance/run_1/mlperf_log_summary.txt"}
    assert (test / "verify_performance.txt").read_text().splitlines()[-1] == (
        "TEST FAIL: Reference results are invalid")  # the short performance run is INVALID
    refused = fsbench("submission", "--runs", run, "--out", root, "--division", "closed", "--submitter",
                      "FsbenchOrg", "--system", SYSTEM)
    assert "SingleStream/TEST04/verify_performance.txt: TEST04 performance check failed" in refused.output
    assert "SingleStream/TEST04: missing" not in refused.output and "Offline/TEST04: missing" in refused.output
    assert "SingleStream/TEST04/performance/run_1/mlperf_log_detail.txt: min_duration is 0 ms" in refused.output


def test_packaging_removes_the_staging_a_killed_job_left_and_keeps_a_live_ones(tiny_run, tmp_path):
    from fsbench.files import staging_of
    from fsbench.harness.mlperf.submission import STAGING_PREFIX

    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    root = tmp_path / "root"
    place = staging_of(root)
    stale, live = place / f"{STAGING_PREFIX}{finished.stdout.strip()}-x", place / f"{STAGING_PREFIX}{os.getpid()}-y"
    for folder in (stale, live):
        (folder / "open").mkdir(parents=True)
    result = fsbench("submission", "--runs", tiny_run, "--out", root, "--submitter", "Org", "--system", SYSTEM)
    assert result.exit_code == 0, result.output
    assert not stale.exists() and live.is_dir()
