"""Progress bars are drawn on a terminal only, and -q hides every one of them (eval's too); `sweep` takes spec
strings through repeated --schedule; `fsbench schedules` prints the grammar and refuses a bad spec in one line."""
from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest
from click.testing import CliRunner

from fsbench.harness.cli import main
from fsbench.harness.precision.schedule import GRAMMAR
from fsbench.rundir import load_manifest

ROOT = Path(__file__).resolve().parents[1]
SPEC = "mxfp8:0,1;bf16:*"  # a spec string holding both a comma and a semicolon
SMALL = ["--model", "tiny", "--height", "32", "--width", "32", "--frames", "5", "--steps", "2", "--num-prompts", "2"]


def _on_a_terminal(*args: str) -> tuple[int, str]:
    """`fsbench ARGS` with stdout and stderr on a pseudo-terminal; its exit code and everything it wrote."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))  # 40 rows, 120 columns
    proc = subprocess.Popen([sys.executable, "-m", "fsbench", *args], stdin=subprocess.DEVNULL, stdout=slave,
                            stderr=slave, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    return proc.wait(timeout=60), b"".join(chunks).decode(errors="replace")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("bars") / "sweep"
    result = CliRunner().invoke(main, ["sweep", "--schedule", "bf16", "--schedule", SPEC, "--out", str(out), *SMALL])
    assert result.exit_code == 0, result.output + result.stderr
    return out


def test_sweep_takes_spec_strings_through_repeated_schedule(sweep):
    folders = sorted(p.name for p in sweep.iterdir() if not p.name.startswith("."))  # .fsbench: the folder's kind
    assert folders[0] == "bf16" and folders[1].startswith("spec-")
    assert load_manifest(sweep / folders[1])["schedule"]["spec"] == SPEC
    assert load_manifest(sweep / folders[1])["results"]["Offline"]["accuracy"]["samples"] == 2


@pytest.mark.slow
def test_each_pass_of_a_sweep_logs_its_lines_into_its_own_run_once(sweep):
    spec = next(p for p in sweep.iterdir() if p.name.startswith("spec-"))
    for run, other in ((sweep / "bf16", SPEC), (spec, "[bf16]")):
        lines = (run / "fsbench.log").read_text().splitlines()
        messages = [line.split(" ", 2)[2] for line in lines if line[:2] == "20"]
        assert messages[0].startswith("INFO fsbench: command: fsbench sweep")
        assert not [m for m in messages[1:] if other in m], messages
        assert len(messages) == len(set(messages)) and sum("finished in" in m for m in messages) == 1, messages
        assert any(m.endswith("video 2/2 in " + m.split(" in ")[-1]) for m in messages if "accuracy" in m), messages


@pytest.mark.slow
def test_eval_draws_its_bar_on_a_terminal_and_quiet_hides_it(sweep):
    spec = next(p for p in sweep.iterdir() if p.name.startswith("spec-"))
    args = ["eval", str(spec), "--reference", str(sweep / "bf16"), "--metrics", "psnr", "--workers", "1"]
    code, shown = _on_a_terminal(*args)
    assert code == 0, shown
    assert "\r" in shown.replace("\r\n", "\n") and f"fidelity [{spec.name}]:" in shown  # the bar, redrawn in place
    (spec / "eval" / "summary.json").unlink()
    code, quiet = _on_a_terminal("-q", *args)
    assert code == 0, quiet
    assert "\r" not in quiet.replace("\r\n", "\n") and f"fidelity [{spec.name}]:" not in quiet
    assert "fidelity vs" in quiet  # the result itself is still printed


@pytest.mark.slow
def test_a_run_on_a_terminal_draws_bars_and_quiet_hides_every_one(tmp_path):
    args = ["run", *SMALL, "--count", "1", "--time", "0", "--out", str(tmp_path / "run")]
    code, shown = _on_a_terminal(*args)
    assert code == 0, shown
    assert "denoise" in shown and "SingleStream performance [bf16]" in shown
    code, quiet = _on_a_terminal("-q", *args)
    assert code == 0, quiet
    assert "\r" not in quiet.replace("\r\n", "\n") and "denoise" not in quiet


def test_schedules_prints_the_grammar():
    result = CliRunner().invoke(main, ["schedules", "--steps", "4", "--layers", "2"])
    assert result.exit_code == 0
    assert result.output.rstrip().endswith(GRAMMAR.splitlines()[-1]) and "FORMAT[@LAYERS]:STEPS" in result.output


def test_a_bad_spec_in_schedules_is_one_line_and_no_table():
    result = CliRunner().invoke(main, ["schedules", "mxfp6:0-2;mxfp4:2-3", "--steps", "4", "--layers", "2"])
    assert result.exit_code == 2
    assert result.stdout == "" and result.stderr.count("\n") == 1 and "both set step 2" in result.stderr


@pytest.mark.slow
def test_a_campaign_on_a_terminal_shows_one_bar_with_its_stage_and_eta_and_prints_nothing_over_it(tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text(f'model = "tiny"\nschedules = ["bf16"]\nout = "{tmp_path / "out"}"\ndevice = "cpu"\n'
                    'metrics = []\naccuracy = false\nhtml = false\n[prompts]\ncount = 2\n'
                    '[settings]\nheight = 32\nwidth = 32\nframes = 5\nsteps = 2\n'
                    '[performance.SingleStream]\ncount = 3\ntime = 0\n')
    code, shown = _on_a_terminal("campaign", str(plan))
    assert code == 0, shown
    drawn = shown.replace("\r\n", "\n").replace("\r", "\n").splitlines()
    generating = [line for line in drawn if line.startswith("[1/2] SingleStream performance [bf16] ")]
    comparing = [line for line in drawn if line.startswith("[2/2] compare ")]
    assert any("3/3" in line for line in drawn if line.startswith("SingleStream performance [bf16]:")), shown
    assert generating and all("<" in line for line in generating), shown  # elapsed<remaining
    percent = [int(line.split("%")[0].split()[-1]) for line in generating]
    assert max(percent) < 100 and percent[-1] > 0, percent  # compare weighs on the plan bar too
    assert comparing[-1].split("%")[0].endswith("100"), comparing
    # every message and result starts a line of its own: none is drawn over a bar
    for said in ("[bf16] SingleStream PerformanceOnly", "[1/2] SingleStream performance [bf16]: done in",
                 "wrote ", "results: "):
        at = shown.index(said)
        assert shown[at - 1] in "\r\n", repr(shown[at - 80:at + 40])
