"""Messages that point the right way: the line names the real file, the real cause and the option to change, and
a closed output pipe ends any command quietly with exit code 141 (as a shell tool stopped by SIGPIPE)."""
from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from fsbench.eval.runs import Run
from fsbench.files import OWNED, STAGING
from fsbench.harness.cli import main

from eval_runs import constant_video, make_run

SMALL = ["--height", "32", "--width", "32", "--frames", "5", "--steps", "2"]
REPO = Path(__file__).resolve().parents[1]


def _one_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("fsbench: error: "), result.output
    return lines[0]


def test_an_undecodable_video_is_named_with_ffmpeg_s_reason_not_its_banner(tmp_path):
    ref = make_run(tmp_path / "bf16", "bf16", {"p": constant_video(range(100, 105))})
    run = make_run(tmp_path / "mxfp8", "mxfp8", {"p": constant_video(range(110, 115))})
    video = Run.open(run).video("p")
    video.write_bytes(video.read_bytes()[:200])
    result = CliRunner().invoke(main, ["eval", str(run), "--reference", str(ref), "--metrics", "psnr"])
    said = next(line for line in result.stderr.splitlines() if "does not decode" in line)
    assert str(video) in said and "Invalid data found when processing input" in said, said
    assert "ffmpeg version" not in said and "Copyright" not in said and "configuration" not in said, said


@pytest.mark.parametrize("model", ["", " "])
def test_an_empty_model_names_no_model_never_the_current_folder(model, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    line = _one_line(CliRunner().invoke(main, ["run", "--model", model, "--out", str(tmp_path / "run"), *SMALL]))
    assert "empty" in line and "checkpoint folder ." not in line, line
    doctor = CliRunner().invoke(main, ["doctor", "--plain", "--model", model])
    said = next(text for text in doctor.output.splitlines() if text.split()[1:2] == ["model"])
    assert "empty" in said and "checkpoint folder ." not in said, said
    assert not (tmp_path / "run").exists()


def test_a_folder_given_as_the_prompts_file_is_called_a_folder(tmp_path):
    folder = tmp_path / "prompts"
    folder.mkdir()
    doctor = CliRunner().invoke(main, ["doctor", "--plain", "--prompts", str(folder)])
    said = next(text for text in doctor.output.splitlines() if text.split()[1:2] == ["prompts"])
    assert said.startswith("MISSING") and f"{folder} is a folder" in said and "not found" not in said, said
    line = _one_line(CliRunner().invoke(main, ["run", "--out", str(tmp_path / "run"), *SMALL, "--prompts",
                                               str(folder)]))
    assert f"{folder} is a folder" in line, line


def test_a_page_folder_that_cannot_be_taken_names_html_not_out(tmp_path):
    run = make_run(tmp_path / "bf16", "bf16", {"p": constant_video(range(100, 105))})
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("the user's")
    for page in (mine, mine / "notes.txt", run):
        line = _one_line(CliRunner().invoke(main, ["compare", str(run), "--out", str(tmp_path / "cmp"),
                                                   "--html", str(page)]))
        assert "--html" in line and "--out" not in line, line


def test_a_video_folder_that_refuses_the_video_is_named_not_the_staging_place(tmp_path, monkeypatch, one_thread):
    out = tmp_path / "run"
    real = os.replace

    def replace(src, dst, *args, **kwargs):  # what a read-only videos/ answers a rename into it
        if Path(dst).parent.name == "videos":
            raise PermissionError(errno.EACCES, "Permission denied", str(src), None, str(dst))
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    line = _one_line(CliRunner().invoke(main, ["run", "--out", str(out), *SMALL, "--num-prompts", "1",
                                               "--scenario", "Offline", "--mode", "accuracy"]))
    assert f"{out}/videos/" in line and "Permission denied" in line, line
    assert f"{OWNED}/{STAGING}" not in line, line


@pytest.mark.parametrize("args", [["doctor", "--plain"], ["schedules"], ["--help"], ["kernels", "--help"]])
def test_a_closed_output_pipe_ends_the_command_quietly_with_141(args):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line, as `| head -1` is after it
    try:
        result = subprocess.run([sys.executable, "-m", "fsbench", *args], env=env, stdout=write, capture_output=False,
                                stderr=subprocess.PIPE, timeout=120)
    finally:
        os.close(write)
    assert result.returncode == 141 and result.stderr == b"", result.stderr
