"""`fsbench run --gpus 2 --device cpu` end to end (rank 0 in this process, one worker process, gloo): Offline
replicas write every video once and LoadGen logs every sample once; SingleStream with Ulysses writes the same
videos as one process; bad layouts are one line and exit code 2 before any work."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from fsbench.harness.cli import main
from fsbench.harness.model.synthetic import TINY_PROMPTS
from fsbench.rundir import load_manifest

SMALL = ["--height", "64", "--width", "64", "--frames", "9", "--steps", "2", "--device", "cpu"]
ACCURACY_LOG = "cpu-tiny/wan-2.2-t2v-a14b/{}/accuracy/mlperf_log_accuracy.json"


@pytest.fixture(autouse=True)
def short_timeout(monkeypatch):
    """A stuck collective fails the test within a minute instead of hanging CI."""
    monkeypatch.setenv("FSBENCH_DIST_TIMEOUT", "60")


def fsbench(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def videos(run: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((run / "videos").iterdir())}


@pytest.mark.slow
def test_offline_with_two_replicas_writes_every_video_once_and_logs_every_sample_once(tmp_path, one_thread):
    run = tmp_path / "offline"
    result = fsbench("run", "--gpus", 2, "--scenario", "Offline", "--mode", "accuracy", "--out", run, *SMALL)
    assert result.exit_code == 0, result.output
    assert sorted(videos(run)) == sorted(f"{p}-0.mp4" for p in TINY_PROMPTS)
    log = json.loads((run / ACCURACY_LOG.format("Offline")).read_text())
    assert sorted(entry["qsl_idx"] for entry in log) == list(range(len(TINY_PROMPTS)))
    summary = load_manifest(run)["results"]["Offline"]["accuracy"]
    assert summary["videos_generated"] == len(TINY_PROMPTS) and summary["videos_reused"] == 0
    parallel = summary["parallel"]
    assert (parallel["processes"], parallel["replicas"], parallel["backend"]) == (2, 2, "gloo")
    assert sum(parallel["samples_per_replica"]) == len(TINY_PROMPTS) and min(parallel["samples_per_replica"]) >= 1


@pytest.mark.slow
def test_single_stream_with_ulysses_writes_the_videos_of_one_process(tmp_path, one_thread):
    one = fsbench("run", "--scenario", "SingleStream", "--mode", "accuracy", "--out", tmp_path / "one", *SMALL)
    two = fsbench("run", "--gpus", 2, "--cfg-parallel", 1, "--ulysses", 2, "--scenario", "SingleStream", "--mode",
                  "accuracy", "--out", tmp_path / "two", *SMALL)
    assert one.exit_code == 0 and two.exit_code == 0, one.output + two.output
    assert videos(tmp_path / "two") == videos(tmp_path / "one")
    log = json.loads((tmp_path / "two" / ACCURACY_LOG.format("SingleStream")).read_text())
    assert sorted(entry["qsl_idx"] for entry in log) == list(range(len(TINY_PROMPTS)))
    parallel = load_manifest(tmp_path / "two")["results"]["SingleStream"]["accuracy"]["parallel"]
    assert (parallel["cfg"], parallel["ulysses"], parallel["replicas"]) == (1, 2, 1)


BAD_LAYOUTS = {
    "ulysses not dividing the heads": (["--gpus", 3, "--cfg-parallel", 1, "--ulysses", 3],
                                       "does not divide the model's 2 attention heads"),
    "cfg x ulysses not the gpus": (["--gpus", 2, "--cfg-parallel", 2, "--ulysses", 2], "must equal --gpus 2"),
    "cfg beyond two passes": (["--gpus", 4, "--cfg-parallel", 4, "--ulysses", 1], "use 1 or 2"),
    "offline with ulysses": (["--scenario", "Offline", "--gpus", 2, "--ulysses", 2], "one pipeline replica per GPU"),
    "capture on several processes": (["--gpus", 2, "--capture"], "without --gpus"),
    "more gpus than the host has": (["--gpus", 8, "--device", "cuda"], "this host has 2 CUDA device(s)"),
}


@pytest.mark.parametrize("case", BAD_LAYOUTS)
def test_bad_layout_is_one_clear_line_and_exit_2_before_any_work(tmp_path, monkeypatch, case):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    args, message = BAD_LAYOUTS[case]
    result = CliRunner().invoke(main, [str(a) for a in ["run", "--out", tmp_path / "run", *SMALL, *args]])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fsbench: error: ") and message in lines[0], lines
    assert not (tmp_path / "run").exists()
