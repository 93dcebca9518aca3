"""benchmarks/front_page.sh on a CPU: the order of its steps, its budget and its resume, with the GPU faked at the
process boundary (a `python` that answers the campaigns' fsbench calls with plausible JSON and logs each call), and
render.py --from publishing what it left."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import load_script

REPO = Path(__file__).resolve().parents[1]
render = load_script("render", "benchmarks")

FAKE = r'''
import json, os, sys
from pathlib import Path

args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(" ".join(args) + "\n")
line = " ".join(args)
if any(word and word in line for word in os.environ.get("FAKE_FAIL", "").split(",")):
    sys.exit(3)
if args[:2] == ["-m", "pytest"]:
    sys.exit(0)
if args[0] == "-c":  # `import PEER`: no peer is installed here
    sys.exit(1)


def value(option):
    return args[args.index(option) + 1]


def provenance(command):
    return {"command": command, "git_commit": os.environ["FSBENCH_COMMIT"], "device": "NVIDIA H100 80GB HBM3",
            "date": "2026-12-08T01:02:03+00:00"}


if args[:3] == ["-m", "fsbench", "kernels"]:
    if "--list" in args:
        print("cudnn-fp8\nsdpa-cudnn-bf16")
        sys.exit(0)
    if args[3] == "plot-sweep":
        Path(args[5]).write_bytes(b"png")
        sys.exit(0)
    Path(value("--json")).write_text(json.dumps({**provenance("fsbench " + line[12:]), "rows": []}))
    if "--markdown" in args:
        Path(value("--markdown")).write_text("")
elif args[0].endswith("step_pairs.py"):
    out = Path(value("--out"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "step_pairs.json").write_text(json.dumps({"device": "NVIDIA H100 80GB HBM3", "rows": [], "provenance": {
        "pair": {"command": "fsbench run", "commit": os.environ["FSBENCH_COMMIT"], "date": "2026-12-08"}}}))
else:
    sys.exit(f"fake python: no answer for {line}")
'''


@pytest.fixture
def node(tmp_path):
    """A fake GPU node's python, its call log and the environment that puts it under the campaigns."""
    fake = tmp_path / "python"
    fake.write_text(f"#!{sys.executable}\n{FAKE}")
    fake.chmod(0o755)
    log = tmp_path / "calls.log"
    env = {**os.environ, "PYTHON": str(fake), "FAKE_LOG": str(log), "FSBENCH_COMMIT": "a" * 40}
    return env, log


def front_page(out: Path, minutes: float, env: dict) -> subprocess.CompletedProcess:
    """benchmarks/front_page.py under this Python, its campaigns under the fake node's (front_page.sh runs both
    under $PYTHON)."""
    return subprocess.run([sys.executable, str(REPO / "benchmarks/front_page.py"), "--out", str(out), "--minutes",
                           str(minutes)], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def _calls(log: Path) -> list[str]:
    """The fsbench calls the campaigns made, as 'kernels bench' / 'kernels check' / 'step_pairs'."""
    calls = []
    for line in log.read_text().splitlines():
        words = line.split()
        if words[:2] == ["-m", "fsbench"] and "--list" not in words:
            calls.append(" ".join(words[2:4]) + (" --calibrate" if "--calibrate" in words else ""))
        elif words[0].endswith("step_pairs.py"):
            calls.append(f"step_pairs {words[words.index('--gemm') + 1]}")
    return calls


def test_steps_run_by_value_within_the_budget_and_a_second_call_goes_on_where_the_first_stopped(tmp_path, node):
    env, log = node
    out = tmp_path / "fp"
    first = front_page(out, 12, env)
    assert first.returncode == 0, first.stdout + first.stderr
    # kernels (5 min) and check (2) fit 12 minutes; calibrate (6) would end past them, so it is not started
    assert _calls(log) == ["kernels bench", "kernels check"]
    assert "ran: kernels (" in first.stdout and "check (" in first.stdout
    assert "left: calibrate (~6 min), step-fp8 (~5 min), step-bf16" in first.stdout
    assert "peers (~9 min)" in first.stdout and f"next: benchmarks/front_page.sh --out {out}" in first.stdout
    state = json.loads((out / "front_page.json").read_text())
    assert state["commit"] == "a" * 40 and set(state["steps"]) == {"kernels", "check"}
    assert (out / "kernels" / "bench.json").is_file() and (out / "check" / "check_gluon.json").is_file()

    log.unlink()
    second = front_page(out, 12, env)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "1. kernels: already in" in second.stdout and "2. check: already in" in second.stdout
    # calibrate (6) and the FP8-GEMM step pair (5) fit; the BF16-GEMM pair (5) would not
    assert _calls(log) == ["kernels bench --calibrate", "kernels bench", "step_pairs fp8"]
    assert "left: step-bf16 (~5 min), sweep (~9 min)" in second.stdout


def test_a_failed_step_is_named_and_run_again_while_done_steps_of_another_commit_are_not_trusted(tmp_path, node):
    env, log = node
    out = tmp_path / "fp"
    failing = {**env, "FAKE_FAIL": "kernels check"}
    first = front_page(out, 7, failing)
    assert first.returncode == 1
    assert "2. check: the Gluon" in first.stdout and "FAILED (exit 3; missing check_gluon.json)" in first.stdout
    assert "failed: check" in first.stdout and "left: check (~2 min), calibrate" in first.stdout
    assert json.loads((out / "front_page.json").read_text())["steps"]["check"]["status"] == "failed"

    log.unlink()
    again = front_page(out, 2, env)
    assert again.returncode == 0 and _calls(log) == ["kernels check"]

    log.unlink()
    other = {**env, "FSBENCH_COMMIT": "b" * 40}
    third = front_page(out, 5, other)
    assert third.returncode == 0 and _calls(log) == ["kernels bench"]  # the other commit's kernels are redone
    assert json.loads((out / "front_page.json").read_text())["commit"] == "b" * 40


def test_render_from_publishes_each_finished_step_under_its_card_beside_the_other_cards_figures(tmp_path, node,
                                                                                              monkeypatch):
    env, _ = node
    out = tmp_path / "fp"
    done = front_page(out, 7, env)
    assert done.returncode == 0, done.stdout + done.stderr
    monkeypatch.setattr(render, "RESULTS", tmp_path / "results")
    assert render.publish(out) == ["h100/kernels/bench_peers_aaaaaaa.json", "h100/kernels/check_gluon_aaaaaaa.json"]
    figures = json.loads((tmp_path / "results" / "figures.json").read_text())
    # the H100's figure replaces the H100's older source of the headline; the H200's stays
    assert figures["headline"] == ["h100/kernels/bench_peers_aaaaaaa.json", "h200/kernels/bench_peers_f338843.json"]
    assert figures["peers"] == ["h100/kernels/bench_peers_aaaaaaa.json", "h200/kernels/bench_peers_f338843.json"]
    assert figures["check"] == ["h100/kernels/check_gluon_aaaaaaa.json"]
    assert set(figures) == {"headline", "peers", "check"}
    with pytest.raises(render.RenderError, match="holds no finished step"):
        render.publish(tmp_path / "empty")
    (out / "front_page.json").write_text("[1]")
    with pytest.raises(render.RenderError, match="is not a state of benchmarks/front_page.sh"):
        render.publish(out)
    refused = subprocess.run(["bash", str(REPO / "benchmarks/front_page.sh"), "--out", str(out)], cwd=REPO,
                             env={**env, "PYTHON": sys.executable}, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "move it away" in refused.stderr


def _bench(folder: Path, rows: dict[str, float]) -> None:
    folder.mkdir(parents=True)
    (folder / "bench.json").write_text(json.dumps({"rows": [
        {"row": name, "shape": [1, 40, 75600, 128], "tflops": tflops} for name, tflops in rows.items()]}))


def test_the_bf16_query_through_fa3_runs_only_where_the_peers_bench_found_it_the_fastest_bf16_kernel(tmp_path):
    front_page = load_script("front_page", "benchmarks")
    (step,) = [s for s in front_page.STEPS if s.name == "queries-bf16-fa3"]
    assert "has not benched fa3-bf16" in step.missing(tmp_path)
    _bench(tmp_path / "slower" / "peers", {"sdpa-cudnn-bf16": 554.5, "cudnn-bf16": 554.7, "fa3-bf16": 540.0})
    assert step.missing(tmp_path / "slower") == (
        "fa3-bf16 (540.0 TFLOP/s) is not faster than cudnn-bf16 (554.7) at (1, 40, 75600, 128): the bf16 "
        "schedule's default SDPA stays the end-to-end baseline")
    _bench(tmp_path / "faster" / "peers", {"sdpa-cudnn-bf16": 554.5, "fa3-bf16": 600.0, "cudnn-fp8": 800.0})
    assert step.missing(tmp_path / "faster") is None
    assert step.command(tmp_path, "py")[-2:] == ["--bf16-impl", "fa3"]


def test_only_runs_the_named_steps_in_the_pages_order_and_leaves_the_rest_for_later(tmp_path, node):
    env, log = node
    out = tmp_path / "fp"
    picked = subprocess.run([sys.executable, str(REPO / "benchmarks/front_page.py"), "--out", str(out), "--minutes",
                             "60", "--only", "step-fp8,kernels"], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=120)
    assert picked.returncode == 0, picked.stdout + picked.stderr
    assert _calls(log) == ["kernels bench", "step_pairs fp8"]
    assert "left: check (~2 min), calibrate (~6 min), step-bf16" in picked.stdout
    wrong = subprocess.run([sys.executable, str(REPO / "benchmarks/front_page.py"), "--out", str(out), "--only",
                            "kernels,peer"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1 and "no step peer" in wrong.stderr
