#!/usr/bin/env python3
"""Every GPU figure of the front page, most valuable first, within a time budget, resumable: a user with a short
GPU reservation gets the kernel table first, and a second call into the same DIR goes on where the first stopped.

Each step runs one campaign of benchmarks/ into DIR/<step> and has an estimate in minutes; a step is started only
where the minutes spent so far plus its estimate fit --minutes, so none is cut off. A step that ran counts as its
real time or its estimate, whichever is longer: the estimates are the budget's upper bounds, and a step that once
ran fast does not let the next one start past the reservation's end. DIR/front_page.json records
each step's commit, status and seconds: a step done on this commit is skipped, one that failed or never ran is
(re)run from an empty folder. `python benchmarks/render.py --from DIR` then publishes what is done. Written by hand
because the budget and resume rules are this project's; the campaigns themselves are the scripts beside this file.

usage: python3 benchmarks/front_page.py --out DIR [--minutes N] [--only STEP,...]   (front_page.sh is the same)
"""
from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import click

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's fsbench, also where this file is imported
STATE = "front_page.json"
PROMPTS = str(REPO / "benchmarks" / "prompts.txt")  # the queries' prompts: no dataset is needed on the node


@dataclass(frozen=True)
class Output:
    """A file or run folder a step leaves in DIR/<step>/, where render.py --from publishes it under
    results/<card>/ (`{commit}`: the commit's first 7 digits), and the front page's tables it feeds."""

    path: str
    dest: str
    tables: tuple[str, ...] = ()


@dataclass(frozen=True)
class Step:
    name: str
    minutes: float  # the estimate on one H100 or H200, start-up included: the budget check uses it
    what: str
    command: Callable[[Path, str], list[str]]  # (the step's folder, the Python to run) -> argv, run in the repo
    outputs: tuple[Output, ...]
    missing: Callable[[Path], str | None] = lambda out: None  # (DIR) -> why the step cannot run, None where it can


def _script(name: str) -> Callable[[Path, str], list[str]]:
    return lambda out, py: ["bash", f"benchmarks/{name}", "--out", str(out)]


def _query(schedule: str, *extra: str) -> Callable[[Path, str], list[str]]:
    return lambda out, py: [py, "benchmarks/queries.py", "--out", str(out), "--schedule", schedule, "--config",
                            "optimized", "--prompts", PROMPTS, *extra]


def _step_pair(gemm: str) -> Callable[[Path, str], list[str]]:
    return lambda out, py: [py, "benchmarks/step_pairs.py", "--out", str(out), "--gemm", gemm, "--prompts", PROMPTS]


def _tune(out: Path, py: str) -> list[str]:
    return ["bash", "benchmarks/tune.sh", "--out", str(out), "--prompts", PROMPTS]


def _peer_sources(out: Path) -> str | None:
    if (REPO / "build/peers-src/SOURCES.txt").is_file():
        return None
    return "no peer sources in build/peers-src (scripts/peer_sources.sh lays them out on a connected machine)"


def _fa3_faster(out: Path) -> str | None:
    """None where the peers step found FlashAttention-3's BF16 forward faster than every other BF16 row at the
    main shape (then the bf16 query through it is the end-to-end baseline); else why that query is not run."""
    from fsbench.kernels.tools.bench import BF16_ROWS, SHAPES  # torch: only where this step is considered

    main = list(SHAPES[0])
    try:
        rows = json.loads((out / "peers" / "bench.json").read_text())["rows"]
    except (OSError, ValueError, KeyError):
        return "the peers step has not benched fa3-bf16 in this folder"
    at = {r["row"]: r["tflops"] for r in rows if r["shape"] == main and r["row"] in BF16_ROWS}
    others = {name: tflops for name, tflops in at.items() if name != "fa3-bf16"}
    if "fa3-bf16" not in at or not others:
        return "the peers bench lacks fa3-bf16 or another BF16 row at the main shape"
    best = max(others, key=others.__getitem__)
    if at["fa3-bf16"] <= others[best]:
        return (f"fa3-bf16 ({at['fa3-bf16']:.1f} TFLOP/s) is not faster than {best} ({others[best]:.1f}) at "
                f"{tuple(main)}: the bf16 schedule's default SDPA stays the end-to-end baseline")
    return None


STEPS = (
    Step("kernels", 5, "the interleaved kernel table at the paper shapes (benchmarks/kernels.sh)",
         _script("kernels.sh"),
         (Output("bench.json", "kernels/bench_peers_{commit}.json", ("peers", "headline")),)),
    Step("check", 2, "the Gluon kernels against the emulator (benchmarks/check.sh)", _script("check.sh"),
         (Output("check_gluon.json", "kernels/check_gluon_{commit}.json", ("check",)),)),
    Step("calibrate", 6, "the calibration against NVIDIA's figures (benchmarks/calibrate.sh)", _script("calibrate.sh"),
         (Output("calibrate.json", "kernels/calibrate_{commit}.json", ("calibration",)),)),
    Step("step-fp8", 5, "the per-step pair bf16/mxfp8 with FP8 GEMMs (benchmarks/step_pairs.py)", _step_pair("fp8"),
         (Output("step_pairs.json", "e2e/step_fp8gemm_{commit}.json", ("step-pairs",)),)),
    Step("step-bf16", 5, "the per-step pair bf16/mxfp8 with BF16 GEMMs (benchmarks/step_pairs.py)", _step_pair("bf16"),
         (Output("step_pairs.json", "e2e/step_bf16gemm_{commit}.json", ("step-pairs",)),)),
    Step("sweep", 9, "the kernels against sequence length (benchmarks/sweep.sh)", _script("sweep.sh"),
         (Output("sweep.json", "kernels/sweep_{commit}.json", ("sweep",)),
          Output("sweep.png", "kernels/sweep_{commit}.png"))),
    Step("queries-bf16", 8, "a real 720p query, bf16 (benchmarks/queries.py)", _query("bf16"),
         (Output("optimized-bf16", "e2e/queries_{commit}/bf16", ("queries-optimized",)),)),
    Step("queries-mxfp8", 8, "a real 720p query, mxfp8 (benchmarks/queries.py)", _query("mxfp8"),
         (Output("optimized-mxfp8", "e2e/queries_{commit}/mxfp8", ("queries-optimized",)),)),
    Step("tune", 9, "an a14b-synthetic 480p tune, 2+2 prompts (benchmarks/tune.sh)", _tune,
         (Output("tune_summary.json", "e2e/tune_{commit}.json", ("tune",)),
          Output("report.md", "e2e/tune_{commit}.md"))),
    Step("peers", 9, "FlashAttention-3 and SageAttention2 built here, then the kernel table with every BF16 row "
         "(benchmarks/peers.sh)", _script("peers.sh"),
         (Output("bench.json", "kernels/bench_peers_{commit}.json", ("peers", "headline")),), _peer_sources),
    Step("queries-bf16-fa3", 8, "a real 720p bf16 query through FlashAttention-3's BF16 forward, where the peers "
         "step found it the fastest BF16 kernel (benchmarks/queries.py --bf16-impl fa3)", _query("bf16", "--bf16-impl",
                                                                                               "fa3"),
         (Output("optimized-bf16", "e2e/queries_{commit}/bf16-fa3", ("queries-optimized",)),), _fa3_faster),
)


def commit() -> str:
    """The commit of the tree that runs (FSBENCH_COMMIT names it where the tree travelled without git)."""
    from fsbench.harness.run.writer import git_commit

    return git_commit() or "unknown"


class StateError(Exception):
    """A DIR whose front_page.json cannot be trusted (one line saying which and why)."""


def read_state(out: Path) -> dict:
    """DIR/front_page.json: {"commit", "steps": {name: {"status", "seconds", "exit", "date"}}}; a state of
    another commit counts for nothing. StateError where it is not such a file."""
    try:
        state = json.loads((out / STATE).read_text())
    except FileNotFoundError:
        return {"steps": {}}
    except (OSError, json.JSONDecodeError) as e:
        raise StateError(f"{out / STATE} cannot be read ({e}): move it away to start afresh") from None
    if not isinstance(state, dict) or not isinstance(state.get("steps"), dict):
        raise StateError(f"{out / STATE} is not a state of benchmarks/front_page.sh: move it away to start afresh")
    return state


def done_steps(out: Path, state: dict, this: str) -> list[Step]:
    """The steps DIR holds for commit `this`: recorded done, and every output there."""
    if state.get("commit") != this:
        return []
    return [s for s in STEPS if (state["steps"].get(s.name) or {}).get("status") == "done"
            and all((out / s.name / o.path).exists() for o in s.outputs)]


def _save(out: Path, state: dict) -> None:
    tmp = out / f".{STATE}.tmp"
    tmp.write_text(json.dumps(state, indent=1) + "\n")
    tmp.replace(out / STATE)


def _left(steps: list[Step]) -> str:
    return ", ".join(f"{s.name} (~{s.minutes:g} min)" for s in steps) or "nothing"


def refresh(out: Path, minutes: float, only: frozenset[str] = frozenset()) -> int:
    """Run the steps DIR lacks, in order, while each one's estimate fits what is left of `minutes` (only those
    named in `only`, where it names any); 0 unless a step failed."""
    out.mkdir(parents=True, exist_ok=True)
    this = commit()
    state = read_state(out)
    have = {s.name for s in done_steps(out, state, this)}
    if state.get("commit") != this:
        state = {"commit": this, "steps": {}}
    py = os.environ.get("PYTHON", sys.executable)
    env = {**os.environ, "PYTHON": py, "FSBENCH_COMMIT": this,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    spent = 0.0
    ran, failed, left, cannot = [], [], [], []
    for number, step in enumerate(STEPS, 1):
        if step.name in have:
            click.echo(f"{number}. {step.name}: already in {out} for this commit")
            continue
        if only and step.name not in only:
            left.append(step)
            continue
        if any(s.name in only or not only for s in left) or spent + step.minutes > minutes:
            left.append(step)
            continue
        why = step.missing(out)
        if why:
            click.echo(f"{number}. {step.name}: cannot run here: {why}")
            cannot.append(step)
            continue
        folder = out / step.name
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        click.echo(f"{number}. {step.name}: {step.what}, ~{step.minutes:g} min ({spent:.1f} of {minutes:g} spent)")
        began = time.monotonic()
        with open(out / f"{step.name}.log", "w") as log:
            code = subprocess.run(step.command(folder, py), cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                  check=False).returncode
        seconds = time.monotonic() - began
        spent += max(seconds / 60, step.minutes)
        missing = [o.path for o in step.outputs if not (folder / o.path).exists()]
        status = "done" if code == 0 and not missing else "failed"
        state["steps"][step.name] = {"status": status, "seconds": round(seconds, 1), "exit": code,
                                     "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        _save(out, state)
        if status == "done":
            ran.append(f"{step.name} ({seconds / 60:.1f} min)")
            click.echo(f"   done in {seconds / 60:.1f} min")
        else:
            failed.append(step.name)
            lacking = f"; missing {', '.join(missing)}" if missing else ""
            click.echo(f"   FAILED (exit {code}{lacking}); the end of {out / step.name}.log:")
            click.echo("".join((out / f"{step.name}.log").read_text().splitlines(True)[-15:]))
    _save(out, state)
    click.echo(f"ran: {', '.join(ran) or 'nothing'}")
    if failed:
        click.echo(f"failed: {', '.join(failed)} (run again to retry)")
    click.echo(f"left: {_left([s for s in STEPS if s in left or s in cannot or s.name in failed])}")
    if left or failed or cannot:
        click.echo(f"next: benchmarks/front_page.sh --out {out} --minutes N")
    click.echo(f"publish: python benchmarks/render.py --from {out}")
    return 1 if failed else 0


@click.command()
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder of every step's output and of front_page.json; a second call into it resumes.")
@click.option("--minutes", type=click.FloatRange(min=0, min_open=True), default=60.0, show_default=True,
              help="Time budget: a step starts only where its estimate fits what is left.")
@click.option("--only", "only", metavar="STEP[,STEP...]", default="",
              help=f"Run only these steps, in the page's order ({', '.join(s.name for s in STEPS)}).")
def main(out: Path, minutes: float, only: str) -> None:
    """Run the front page's GPU figures into OUT, most valuable first, within MINUTES."""
    names = frozenset(filter(None, only.split(",")))
    unknown = sorted(names - {s.name for s in STEPS})
    if unknown:
        click.echo(f"front_page: error: --only names no step {', '.join(unknown)} (steps: "
                   f"{', '.join(s.name for s in STEPS)})", err=True)
        sys.exit(2)
    try:
        code = refresh(out.resolve(), minutes, names)
    except StateError as e:
        click.echo(f"front_page: error: {e}", err=True)
        code = 2
    sys.exit(code)


if __name__ == "__main__":
    main()
