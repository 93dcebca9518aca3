"""`fsbench run` end to end on the tiny model: real LoadGen, real WanPipeline, real mp4 files."""
from __future__ import annotations

import json
from pathlib import Path

import imageio.v3 as iio
import pytest
from click.testing import CliRunner

from fsbench.harness.cli import main
from fsbench.harness.model.synthetic import TINY_PROMPTS
from fsbench.rundir import load_manifest

SMALL = ["--height", "32", "--width", "32", "--frames", "5", "--steps", "2"]
LAYOUT = "cpu-tiny/wan-2.2-t2v-a14b"


def fsbench(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def snapshot(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """One run directory holding a SingleStream performance, an Offline performance and an accuracy result."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    run = tmp_path_factory.mktemp("runs") / "tiny-bf16"
    outputs = [
        fsbench("run", "--scenario", "SingleStream", "--count", 64, "--time", 0, "--target-latency", 300, "--out",
                run, *SMALL),
        fsbench("run", "--scenario", "Offline", "--count", 4, "--time", 0, "--target-qps", 50, "--out", run, *SMALL),
        fsbench("run", "--scenario", "Offline", "--mode", "accuracy", "--out", run, *SMALL),
    ]
    torch.set_num_threads(threads)
    return run, outputs


@pytest.mark.slow
def test_single_stream_and_offline_performance_runs_are_valid(finished_run):
    run, (single, offline, _) = finished_run
    assert single.exit_code == 0, single.output
    assert "SingleStream PerformanceOnly: VALID" in single.output and "p90 latency" in single.output
    assert "Offline PerformanceOnly: VALID" in offline.output
    assert "samples/s" in offline.output and "latency" not in offline.output  # Offline's figure is throughput
    results = load_manifest(run)["results"]
    assert results["SingleStream"]["performance"]["validity"] == "VALID"
    assert results["SingleStream"]["performance"]["query_count"] == 64
    latencies = results["SingleStream"]["performance"]["query_latencies_ns"]  # each query's, for the intervals
    assert len(latencies) == 64 and min(latencies) > 0
    # timed inside LoadGen's own span of each query: never above its 90th percentile (the 58th of 64)
    assert sorted(latencies)[57] <= results["SingleStream"]["performance"]["latency_p90_ns"]
    assert "query_latencies_ns" not in results["Offline"]["performance"]
    assert results["Offline"]["performance"]["samples"] == 4
    assert results["Offline"]["performance"]["attention_kernels"] == {"bf16": "sdpa"}
    for scenario in ("SingleStream", "Offline"):
        summary = (run / LAYOUT / scenario / "performance" / "run_1" / "mlperf_log_summary.txt").read_text()
        assert "Result is : VALID" in summary and f"Scenario : {scenario}" in summary


@pytest.mark.slow
def test_manifest_records_settings_schedule_prompts_and_latent(finished_run):
    import torch

    from fsbench.harness.run.dataset import latent_sha256

    run, _ = finished_run
    manifest = load_manifest(run)
    settings = manifest["settings"]
    assert (settings["height"], settings["width"], settings["num_frames"], settings["steps"]) == (32, 32, 5, 2)
    assert (settings["fps"], settings["flow_shift"], settings["guidance_scale_2"]) == (16, 3.0, 3.0)
    assert settings["latent_sha256"] == latent_sha256(torch.load(run / "latent.pt"))
    assert manifest["schedule"] == {"name": "bf16", "spec": "bf16:*", "by_step": ["bf16", "bf16"]}
    assert manifest["prompts"]["count"] == len(TINY_PROMPTS) and manifest["model"] == "tiny"
    assert manifest["system"] == "cpu-tiny" and manifest["versions"]["mlcommons-loadgen"]


@pytest.mark.slow
def test_accuracy_run_writes_one_16fps_video_per_prompt_and_the_accuracy_log(finished_run):
    run, (_, _, accuracy) = finished_run
    assert accuracy.exit_code == 0, accuracy.output
    videos = sorted(p.name for p in (run / "videos").iterdir())
    assert videos == sorted(f"{p}-0.mp4" for p in TINY_PROMPTS)
    frames = iio.imread(run / "videos" / videos[0], plugin="FFMPEG")
    assert frames.shape == (5, 32, 32, 3)
    assert iio.immeta(run / "videos" / videos[0], plugin="FFMPEG")["fps"] == 16
    log = json.loads((run / LAYOUT / "Offline" / "accuracy" / "mlperf_log_accuracy.json").read_text())
    assert {e["qsl_idx"]: bytes.fromhex(e["data"]).decode() for e in log} == {
        i: f"videos/{p}-0.mp4" for i, p in enumerate(TINY_PROMPTS)}
    assert load_manifest(run)["results"]["Offline"]["accuracy"]["samples"] == len(TINY_PROMPTS)


def test_capture_shows_the_hybrid_schedule_switching_formats_per_step(tmp_path, one_thread):
    run = tmp_path / "hybrid"
    result = fsbench("run", "--schedule", "hybrid", "--mode", "accuracy", "--scenario", "Offline", "--num-prompts",
                     1, "--capture", "--capture-qkv", 1, "--out", run, *SMALL[:-1], 4)
    assert result.exit_code == 0, result.output
    capture = run / "capture" / "Offline-accuracy"
    calls = [json.loads(line) for line in (capture / "calls.jsonl").read_text().splitlines()]
    assert {c["step"]: c["fmt"] for c in calls} == {0: "mxfp6", 1: "mxfp4", 2: "mxfp4", 3: "mxfp6"}
    assert len(calls) == 4 * 2 * 2 and all(0.0 <= c["rollback_rate"] <= 1.0 for c in calls)
    summary = json.loads((capture / "summary.json").read_text())
    assert len(summary["saved_qkv"]) == 1 and (capture / summary["saved_qkv"][0]["file"]).is_file()
    accuracy = load_manifest(run)["results"]["Offline"]["accuracy"]
    assert accuracy["capture"]["calls"] == len(calls)
    assert accuracy["attention_kernels"] == {"mxfp4": "emulate", "mxfp6": "emulate"}  # what ran, not "auto"


BAD_INPUTS = ("unknown schedule", "malformed spec", "empty prompts", "missing prompts", "missing checkpoint",
              "unwritable output", "other settings in a finished run")


def _bad_inputs(tmp_path: Path) -> dict[str, tuple[list, str]]:
    (tmp_path / "empty.txt").write_text("\n  \n")
    (tmp_path / "a_file").write_text("")
    return {
        "unknown schedule": (["--schedule", "fp7"], "unknown schedule 'fp7'"),
        "malformed spec": (["--schedule", "mxfp6:0-1;mxfp4:1"], "both set step 1"),
        "empty prompts": (["--prompts", tmp_path / "empty.txt"], "has no prompts"),
        "missing prompts": (["--prompts", tmp_path / "missing.txt"], "not found"),
        "missing checkpoint": (["--model", tmp_path / "no-ckpt"], "scripts/fetch_model.py"),
        "unwritable output": (["--out", tmp_path / "a_file" / "run"], "cannot write to output directory"),
        "other settings in a finished run": (["--steps", "3"], "different settings"),
    }


@pytest.mark.slow
@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input_is_one_clear_line_and_exit_2_and_finished_results_survive(finished_run, tmp_path, case):
    run, _ = finished_run
    args, message = _bad_inputs(tmp_path)[case]
    before = snapshot(run)
    base = ["run", "--out", run, *SMALL]
    result = CliRunner().invoke(main, [str(a) for a in base + args])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fsbench: error: ") and message in lines[0]
    assert snapshot(run) == before


def test_a_failure_mid_run_keeps_finished_videos_and_leaves_no_temp_files(tmp_path, monkeypatch, one_thread):
    from fsbench.harness.run import orchestrator

    run = tmp_path / "crash"
    made = []
    real_frames = orchestrator.VideoGenerator.frames

    def frames(self, index):
        if made:
            raise RuntimeError("device lost")
        made.append(index)
        return real_frames(self, index)

    monkeypatch.setattr(orchestrator.VideoGenerator, "frames", frames)
    with pytest.raises(RuntimeError, match="device lost"):
        fsbench("run", "--mode", "accuracy", "--scenario", "Offline", "--out", run, *SMALL)
    files = [p for p in run.rglob("*") if p.is_file()]
    assert [p.name for p in (run / "videos").iterdir()] == [f"{TINY_PROMPTS[made[0]]}-0.mp4"]
    assert not [p for p in files if p.name.startswith(".tmp-")]
    assert iio.imread(run / "videos" / f"{TINY_PROMPTS[made[0]]}-0.mp4", plugin="FFMPEG").shape == (5, 32, 32, 3)
    assert load_manifest(run)["results"] == {}


def test_git_commit_names_the_checkout_or_the_commit_a_remote_copy_is_given(monkeypatch):
    import re
    import shutil

    from fsbench.harness.run import writer

    monkeypatch.delenv("FSBENCH_COMMIT", raising=False)
    here = writer.git_commit()
    if shutil.which("git") and here is not None:
        assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", here)
    monkeypatch.setenv("FSBENCH_COMMIT", "18c5f62")
    assert writer.git_commit() == "18c5f62"


def test_provenance_names_the_command_as_typed_the_commit_device_and_date(monkeypatch):
    import datetime as dt
    import sys

    from fsbench.harness.run import writer

    monkeypatch.setenv("FSBENCH_COMMIT", "93be201")
    monkeypatch.setattr(sys, "argv", ["/x/harness/__main__.py", "kernels", "bench", "--rows", "a b"])
    header = writer.provenance("NVIDIA H200")
    assert header["command"] == "fsbench kernels bench --rows 'a b'"
    assert header["git_commit"] == "93be201" and header["device"] == "NVIDIA H200"
    assert header["versions"]["torch"] and header["versions"]["python"]
    assert dt.datetime.fromisoformat(header["date"]).tzinfo is not None
