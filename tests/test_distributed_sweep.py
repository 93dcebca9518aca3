"""`fsbench sweep --gpus 2 --device cpu` and `fsbench eval --gpus 2` (rank 0 in this process, one forked worker,
gloo): the replicas write the videos of one process, an interrupted sweep resumes on another process count
without rewriting finished videos, and the shared scoring gives the values of one process."""
from __future__ import annotations

import csv
import os
import signal
from pathlib import Path

import pytest
from click.testing import CliRunner

from fsbench.files import TEMP_PREFIX
from fsbench.harness.cli import main
from fsbench.harness.model.synthetic import TINY_PROMPTS
from fsbench.harness.run import orchestrator
from fsbench.rundir import load_manifest

SMALL = ["--height", "32", "--width", "32", "--frames", "5", "--steps", "2", "--device", "cpu"]
SCHEDULES = "bf16,mxfp4"


@pytest.fixture(autouse=True)
def short_timeout(monkeypatch):
    """A stuck collective fails the test within a minute instead of hanging CI."""
    monkeypatch.setenv("FSBENCH_DIST_TIMEOUT", "60")


def fsbench(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def videos(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*.mp4"))}


def video_state(folder: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in folder.glob("*.mp4")}


def accuracy(run: Path) -> dict:
    return load_manifest(run)["results"]["Offline"]["accuracy"]


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    """The same sweep on one process and on two."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("sweeps")
    try:
        for gpus in (1, 2):
            result = fsbench("sweep", "--schedules", SCHEDULES, "--gpus", gpus, "--out", root / f"gpus{gpus}", *SMALL)
            assert result.exit_code == 0, result.output
    finally:
        torch.set_num_threads(before)
    return root


@pytest.mark.slow
def test_sweep_on_two_processes_writes_the_videos_of_one(sweeps):
    one, two = videos(sweeps / "gpus1"), videos(sweeps / "gpus2")
    assert len(one) == 2 * 2 * len(TINY_PROMPTS) and two == one  # each schedule's videos and their kept frames
    for schedule in SCHEDULES.split(","):
        summary = accuracy(sweeps / "gpus2" / schedule)
        assert (summary["videos_generated"], summary["videos_reused"]) == (len(TINY_PROMPTS), 0)
        assert summary["parallel"]["replicas"] == 2 and min(summary["parallel"]["samples_per_replica"]) >= 1
        assert "parallel" not in accuracy(sweeps / "gpus1" / schedule)


def fidelity_rows(run: Path) -> dict[str, dict[str, str]]:
    with open(run / "eval" / "fidelity.csv", newline="") as f:
        return {row["prompt"]: row for row in csv.DictReader(f)}


@pytest.mark.slow
def test_eval_on_two_processes_computes_the_values_of_one(sweeps):
    one, two = sweeps / "gpus1", sweeps / "gpus2"
    for root, gpus in ((one, 1), (two, 2)):
        result = fsbench("eval", root / "mxfp4", "--reference", root / "bf16", "--metrics", "psnr,ssim",
                         "--workers", 1, "--gpus", gpus)
        assert result.exit_code == 0, result.output
    single, shared = fidelity_rows(one / "mxfp4"), fidelity_rows(two / "mxfp4")
    assert sorted(shared) == sorted(TINY_PROMPTS)
    for prompt, row in shared.items():
        assert row["status"] == "ok"
        psnr, ssim = float(row["psnr"]), float(row["ssim"])
        assert 0 < psnr < float("inf") and 0 < ssim < 1  # computed: mxfp4 differs from bf16
        assert (row["psnr"], row["ssim"]) == (single[prompt]["psnr"], single[prompt]["ssim"])


@pytest.mark.slow
def test_interrupted_two_process_sweep_resumes_without_regenerating_finished_videos(tmp_path, monkeypatch,
                                                                                     one_thread):
    out = tmp_path / "sweep"
    args = ["sweep", "--schedules", "bf16", "--gpus", 2, "--out", out, *SMALL]
    leader, started = os.getpid(), []
    real_frames = orchestrator.VideoGenerator.frames

    def frames(self, index):
        if os.getpid() == leader:  # rank 0 (the forked rank 1 runs the same code undisturbed)
            started.append(index)
            if len(started) == 1:  # Ctrl-C while rank 0 generates its first video
                os.kill(leader, signal.SIGINT)
        return real_frames(self, index)

    with monkeypatch.context() as patch:
        patch.setattr(orchestrator.VideoGenerator, "frames", frames)
        interrupted = CliRunner().invoke(main, [str(a) for a in args])
    assert interrupted.exit_code == 130 and "stopping after the current video" in interrupted.stderr
    folder = out / "bf16" / "videos"
    finished = video_state(folder)
    assert 1 <= len(finished) < len(TINY_PROMPTS)  # the videos in progress were finished, the rest not begun
    assert not [p for p in out.rglob("*") if p.name.startswith(TEMP_PREFIX)]  # no temporary left

    resumed = fsbench(*args)
    assert resumed.exit_code == 0, resumed.output
    after = video_state(folder)
    assert sorted(after) == sorted(f"{p}-0.mp4" for p in TINY_PROMPTS)
    assert {name: after[name] for name in finished} == finished  # not one finished video was rewritten
    summary = accuracy(out / "bf16")
    assert (summary["videos_reused"], summary["videos_generated"]) == (len(finished),
                                                                       len(TINY_PROMPTS) - len(finished))


@pytest.mark.parametrize("command", ["sweep", "eval"])
def test_gpus_below_one_is_one_clear_line_and_exit_2_before_any_work(tmp_path, command):
    out = tmp_path / "out"
    args = ["sweep", "--out", out, *SMALL] if command == "sweep" else ["eval", tmp_path, "--reference", tmp_path]
    result = CliRunner().invoke(main, [str(a) for a in [*args, "--gpus", 0]])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fsbench: error: ") and "--gpus" in lines[0], lines
    assert list(tmp_path.iterdir()) == []
