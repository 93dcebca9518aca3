"""Ctrl-C in `eval` and `compare`: wherever one press lands (a worker pool, a lock release in a fork handler, an
encoder), the command ends with one line and exit code 130, never "Exception ignored" and a finished exit 0."""
from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eval_runs import constant_video, make_run

REPO = Path(__file__).resolve().parents[1]
SEED = 20240611


def _fsbench_process(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "fsbench", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _two_runs(root: Path, prompts: int = 6) -> tuple[Path, Path]:
    """A BF16 run and an MXFP8 run of `prompts` short real videos: enough work for a press to land inside it."""
    videos = {f"p{i}": constant_video(range(100 + i, 109 + i)) for i in range(prompts)}
    ref = make_run(root / "bf16", "bf16", videos)
    return ref, make_run(root / "mxfp8", "mxfp8", {p: constant_video(range(110, 119)) for p in videos})


PROGRESS = re.compile(r": (prompt|video) \d+/\d+ in |: still running, ")  # the progress lines of a log


def _interrupted_once(result: subprocess.CompletedProcess | tuple[int, str]) -> None:
    code, stderr = result if isinstance(result, tuple) else (result.returncode, result.stderr)
    said = [line for line in stderr.splitlines() if line.strip() and not PROGRESS.search(line)]
    assert code == 130, stderr
    assert len(said) == 1 and said[0].startswith("fsbench: interrupted"), stderr


_PRESS_IN_A_FORK_HANDLER = """
import os, signal, sys
pressed = []
def press():  # the press lands in the fork handler itself, where Python ignores exceptions
    if not pressed:
        pressed.append(True)
        os.kill(os.getpid(), signal.SIGINT)
os.register_at_fork(after_in_parent=press)
sys.argv = ["fsbench", *sys.argv[1:]]
from fsbench.__main__ import main
main()
"""


@pytest.mark.parametrize("command", ["eval", "compare"])
def test_a_ctrl_c_that_lands_where_python_ignores_exceptions_still_ends_the_command_with_130(command, tmp_path):
    ref, run = _two_runs(tmp_path)
    args = (["eval", str(run), "--reference", str(ref), "--metrics", "psnr", "--workers", "1"] if command == "eval"
            else ["compare", str(ref), str(run), "--out", str(tmp_path / "cmp"), "--html", str(tmp_path / "page")])
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-c", _PRESS_IN_A_FORK_HANDLER, *args], env=env, capture_output=True,
                            text=True, timeout=120)
    _interrupted_once(result)
    assert "Exception ignored" not in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("command", ["eval", "compare"])
def test_one_ctrl_c_at_random_points_of_eval_and_compare_is_one_line_and_130(command, tmp_path):
    ref, run = _two_runs(tmp_path, prompts=12)
    rng = random.Random(SEED)
    interrupted, window = 0, (2.0, 6.0)  # from the imports through the pool, the lock and the encoders
    for attempt in range(6):
        out = tmp_path / f"try{attempt}"
        args = (["eval", str(run), "--reference", str(ref), "--metrics", "psnr,ssim", "--workers", "2"]
                if command == "eval" else
                ["compare", str(ref), str(run), "--out", str(out / "cmp"), "--html", str(out / "page")])
        began = time.monotonic()
        process = _fsbench_process(*args)
        time.sleep(rng.uniform(*window))
        process.send_signal(signal.SIGINT)
        try:
            _, stderr = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
        shutil.rmtree(run / "eval", ignore_errors=True)  # every try scores from the start
        if process.returncode == 0:  # finished before the press: the next press comes within this try's time
            window = (1.0, max(1.5, 0.8 * (time.monotonic() - began)))
            continue
        _interrupted_once((process.returncode, stderr))
        interrupted += 1
    assert interrupted, "every try finished before its press"
