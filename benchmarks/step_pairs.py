#!/usr/bin/env python3
"""The denoising step of a real 720p query, bf16 against mxfp8, in both GEMM configurations: the end-to-end ratio
per step in about 4 minutes a configuration instead of two full queries. Each pair runs `fsbench run --model
a14b-synthetic --scenario SingleStream --count 1 --steps 2 --profile --warm-up --vae bf16 --compile --gemm G`
for the bf16 and the mxfp8 schedule, each into its own run folder OUT/<G>gemm-<schedule>, then writes
OUT/step_pairs.json: each run's step split, clocks and joules per step from its profile, with its command, commit
and date. The front page's "Per denoising step" table; `python benchmarks/render.py` draws the ratio.

usage: python3 benchmarks/step_pairs.py --out DIR [--gemm fp8] [--gemm bf16] [--steps 2] [FSBENCH RUN OPTIONS...]
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import click

REPO = Path(__file__).resolve().parents[1]  # this checkout: its fsbench runs, wherever another is installed
sys.path.insert(0, str(REPO))
from fsbench import files  # noqa: E402
from fsbench.errors import FsbenchError  # noqa: E402

SCHEDULES = ("bf16", "mxfp8")  # the pair: the baseline first, the ratio is its step time over the other's
GEMMS = ("fp8", "bf16")


def run_command(schedule: str, gemm: str, steps: int, run: Path, extra: tuple[str, ...]) -> list[str]:
    return [sys.executable, "-m", "fsbench", "run", "--model", "a14b-synthetic", "--scenario", "SingleStream",
            "--count", "1", "--time", "0", "--steps", str(steps), "--profile", "--warm-up", "--schedule", schedule,
            "--gemm", gemm, "--vae", "bf16", "--compile", "--out", str(run), *extra]


def step_row(run: Path, schedule: str, gemm: str) -> dict[str, Any]:
    """One run's denoising step (both CFG passes, mean over its steps) from its profile.json."""
    try:
        profile = json.loads((run / "profile.json").read_text())["summary"]
    except (FileNotFoundError, json.JSONDecodeError, KeyError) as e:
        raise FsbenchError(f"{run} holds no profile of a finished query ({e})") from None
    step = profile["step_by_format"][schedule]
    clock = profile.get("clock") or {}
    energy = ((profile.get("energy") or {}).get("by_format") or {}).get(schedule) or {}
    return {"gemm": gemm, "schedule": schedule, "steps": step["steps"], "step_s": step["total_s"],
            "self_attention_s": step["self_attention_s"], "rest_s": step["rest_s"],
            "self_attention_call_ms": step["self_attention_call_ms"],
            "attention_mhz": (clock.get("self_attention") or {}).get("clock_mhz"),
            "attention_w": (clock.get("self_attention") or {}).get("power_w"),
            "rest_mhz": (clock.get("rest_of_loop") or {}).get("clock_mhz"),
            "rest_w": (clock.get("rest_of_loop") or {}).get("power_w"),
            "joules_per_step": energy.get("joules_per_step"), "file": run.name}


@click.command(context_settings={"ignore_unknown_options": True})
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder of the run folders and of step_pairs.json.")
@click.option("--gemm", "gemms", type=click.Choice(GEMMS), multiple=True, help="GEMM configuration (default both).")
@click.option("--steps", type=click.IntRange(1, 20), default=2, show_default=True, help="Denoising steps per run.")
@click.argument("extra", nargs=-1, type=click.UNPROCESSED)
def main(out: Path, gemms: tuple[str, ...], steps: int, extra: tuple[str, ...]) -> None:
    """Run the bf16/mxfp8 pair in each GEMM configuration and write OUT/step_pairs.json."""
    rows, provenance, device = [], {}, None
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    try:
        for gemm in gemms or GEMMS:
            for schedule in SCHEDULES:
                run = out / f"{gemm}gemm-{schedule}"
                if run.exists():
                    raise FsbenchError(f"{run} exists: a run folder holds one query; move it away or pass another "
                                       "--out")
                command = run_command(schedule, gemm, steps, run, extra)
                click.echo(shlex.join(command), err=True)
                if subprocess.run(command, cwd=REPO, env=env, check=False).returncode:
                    raise FsbenchError(f"fsbench run of {gemm}gemm-{schedule} failed; its run folder is {run}")
                manifest = json.loads((run / "manifest.json").read_text())
                device = manifest["device"]["name"]
                provenance[f"{gemm} GEMMs, {schedule}"] = {
                    "command": shlex.join(["fsbench", *command[3:]]), "commit": manifest["git_commit"],
                    "date": manifest["date"], "file": run.name}
                rows.append(step_row(run, schedule, gemm))
                files.atomic_write_text(out / "step_pairs.json", json.dumps(
                    {"device": device, "provenance": provenance, "rows": rows}, indent=1) + "\n")
    except FsbenchError as e:
        click.echo(f"fsbench: error: {e}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
