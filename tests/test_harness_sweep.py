"""`fsbench sweep`: one AccuracyOnly run per schedule; Ctrl-C loses nothing finished and a rerun resumes
without regenerating finished videos."""
from __future__ import annotations

import os
import signal
from pathlib import Path

import imageio.v3 as iio
import pytest
from click.testing import CliRunner

from fsbench.files import TEMP_PREFIX
from fsbench.harness.cli import main
from fsbench.harness.model.synthetic import TINY_PROMPTS
from fsbench.harness.run import orchestrator
from fsbench.rundir import load_manifest

SMALL = ["--height", "32", "--width", "32", "--frames", "5", "--steps", "2"]


def _video_state(folder: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in folder.glob("*.mp4")}


@pytest.mark.slow
def test_sweep_survives_ctrl_c_and_resumes_without_regenerating(tmp_path, monkeypatch, one_thread):
    edges = tmp_path / "edges.toml"
    edges.write_text('[[rule]]\nformat = "bf16"\nsteps = "first1"\n[[rule]]\nformat = "bf16"\nsteps = "*"\n')
    out = tmp_path / "sweep"
    args = ["sweep", "--schedules", f"bf16,{edges}", "--out", str(out), *SMALL]
    started = []
    real_frames = orchestrator.VideoGenerator.frames

    def frames(self, index):
        started.append(index)
        if len(started) == 2:  # Ctrl-C while the second video is being generated
            os.kill(os.getpid(), signal.SIGINT)
        return real_frames(self, index)

    with monkeypatch.context() as patch:
        patch.setattr(orchestrator.VideoGenerator, "frames", frames)
        interrupted = CliRunner().invoke(main, args)
    assert interrupted.exit_code == 130 and "stopping after the current video" in interrupted.stderr
    first = out / "bf16" / "videos"
    finished = _video_state(first)
    assert len(started) == 2 and len(finished) == 2  # the video in progress was finished, no new one begun
    assert not [p for p in out.rglob("*") if p.name.startswith(TEMP_PREFIX)]  # no temporary left
    for name in finished:
        assert iio.imread(first / name, plugin="FFMPEG").shape == (5, 32, 32, 3)

    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    after = _video_state(first)
    assert {name: after[name] for name in finished} == finished  # not one finished video was rewritten
    for schedule in ("bf16", "edges"):
        assert sorted(p.name for p in (out / schedule / "videos").iterdir()) == sorted(
            f"{p}-0.mp4" for p in TINY_PROMPTS)
        assert load_manifest(out / schedule)["results"]["Offline"]["accuracy"]["samples"] == len(TINY_PROMPTS)
    bf16 = load_manifest(out / "bf16")["results"]["Offline"]["accuracy"]
    assert (bf16["videos_reused"], bf16["videos_generated"]) == (2, len(TINY_PROMPTS) - 2)
    assert load_manifest(out / "edges")["schedule"]["spec"] == "bf16:first1;bf16:*"
