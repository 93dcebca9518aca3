"""One real SingleStream query per invocation, as a user measures it: `fsbench run --scenario SingleStream
--count 1 --time 0 --profile --warm-up` for one schedule in one configuration, into its own run folder, then one
row appended to a JSON list (default results/h200/e2e_queries.json). The warm-up (one untimed step per format
before LoadGen starts) keeps compilation out of the timed query.

A full 20-step 720x1280x81 query of a14b-synthetic takes 5-8 minutes on the H200, so each 10-minute device
command runs one (schedule, configuration) pair:

  optimized   FP8 GEMMs, compiled blocks (attention inside the graphs), bf16 VAE decode
  bf16-gemm   BF16 GEMMs, compiled blocks, fp32 VAE decode (only attention quantized: the BF16-GEMM column)

A row holds `schedule`, `gemm`, `compile`, `vae`, `steps`, `query_s` (LoadGen's latency of the query), `joules`
(the GPU's energy per video from the run's profile; None where not measured, with `energy_note` saying why) and
`commit`, plus the run folder and the command. `fsbench compare RUN...` over the run folders builds the Table 6
latency, speedup and energy columns; `scripts/device_speed.py assemble ... --queries TABLE` prints the error
of the assembly from parts against these queries.
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

from fsbench.errors import FsbenchError
from fsbench.eval.runs import Run
from fsbench.harness import results
from fsbench.harness.schedule import builtin_names
from fsbench.paths import REPO

CONFIGS = {"optimized": {"gemm": "fp8", "compile": True, "vae": "bf16"},
           "bf16-gemm": {"gemm": "bf16", "compile": True, "vae": "fp32"}}
ROW_KEYS = ("schedule", "gemm", "compile", "vae", "steps", "query_s", "joules", "commit")


def run_command(model: str, schedule: str, config: str, run: Path, extra: tuple[str, ...],
                warm_up: bool = True) -> list[str]:
    """The `fsbench run` command line of one query."""
    c = CONFIGS[config]
    return [sys.executable, "-m", "fsbench", "run", "--model", model, "--scenario", "SingleStream", "--count", "1",
            "--time", "0", "--profile", *(["--warm-up"] if warm_up else []), "--schedule", schedule,
            "--gemm", c["gemm"], "--vae", c["vae"], *(["--compile"] if c["compile"] else []), "--out", str(run), *extra]


def query_row(run: Path, config: str, command: list[str]) -> dict[str, Any]:
    """The table row of a finished run folder (one SingleStream query)."""
    opened = Run.open(run)
    single = opened.performance("SingleStream")
    if single.latency_p90_s is None:
        raise FsbenchError(f"{run} has no SingleStream latency: the query did not finish")
    performance = opened.manifest["results"]["SingleStream"]["performance"]
    speed = performance.get("speed") or {}
    row = {"schedule": opened.schedule, "gemm": speed.get("gemm", CONFIGS[config]["gemm"]),
           "compile": bool(speed.get("compile", CONFIGS[config]["compile"])),
           "vae": speed.get("vae", CONFIGS[config]["vae"]), "steps": opened.settings.get("steps"),
           "query_s": single.latency_p90_s, "joules": single.joules_per_video,
           "commit": opened.manifest.get("git_commit")}
    return {**row, "energy_note": single.energy_note, "warm_up": "warm_up" in performance, "config": config,
            "model": opened.manifest.get("model"), "run": os.path.relpath(run.resolve(), REPO),
            "command": shlex.join(["fsbench", *command[3:]])}


def append_row(table: Path, row: dict[str, Any]) -> list[dict[str, Any]]:
    """Add `row` to the JSON list in `table` (written atomically; a row of the same query and commit is replaced)."""
    rows = json.loads(table.read_text()) if table.is_file() else []
    if not isinstance(rows, list):
        raise FsbenchError(f"{table} does not hold a JSON list of query rows")
    same = ("schedule", "gemm", "compile", "vae", "steps", "commit", "model")
    rows = [r for r in rows if any(r.get(k) != row.get(k) for k in same)] + [row]
    table.parent.mkdir(parents=True, exist_ok=True)
    results.atomic_write_text(table, json.dumps(rows, indent=2) + "\n")
    return rows


@click.command(context_settings={"ignore_unknown_options": True})
@click.option("--schedule", required=True, help=f"A built-in schedule ({', '.join(builtin_names())}).")
@click.option("--config", "config", type=click.Choice(list(CONFIGS)), required=True,
              help="optimized: fp8 GEMMs, --compile, bf16 VAE; bf16-gemm: bf16 GEMMs, --compile, fp32 VAE.")
@click.option("--model", default="a14b-synthetic", show_default=True, help="fsbench run --model.")
@click.option("--runs", "runs_root", type=click.Path(path_type=Path), default=REPO / "results/runs/e2e",
              show_default=True, help="Folder of the run folders (one per configuration and schedule).")
@click.option("--table", type=click.Path(path_type=Path), default=REPO / "results/h200/e2e_queries.json",
              show_default=True, help="The JSON list a row is appended to.")
@click.option("--warm-up/--no-warm-up", "warm_up", default=True, show_default=True,
              help="One untimed step per format before the query (keeps compilation out of it); leave it out only "
                   "where the query and the warm-up do not fit one command together (the row says so).")
@click.argument("extra", nargs=-1, type=click.UNPROCESSED)
def main(schedule: str, config: str, model: str, runs_root: Path, table: Path, warm_up: bool,
         extra: tuple[str, ...]) -> None:
    """Run one real SingleStream query of SCHEDULE in CONFIG and append its row to TABLE; EXTRA arguments go
    to `fsbench run` (e.g. --height 32 --width 32 --frames 5 --steps 2 with --model tiny)."""
    try:
        if schedule not in builtin_names():
            raise FsbenchError(f"--schedule must be one of {', '.join(builtin_names())}, got {schedule!r}")
        run = runs_root / f"{config}-{schedule}"
        if run.exists():
            raise FsbenchError(f"{run} exists: a query's run folder holds one query; move it away or pass --runs")
        command = run_command(model, schedule, config, run, extra, warm_up)
        click.echo(shlex.join(command), err=True)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        done = subprocess.run(command, cwd=REPO, env=env, check=False)
        if done.returncode:
            raise FsbenchError(f"fsbench run exited with {done.returncode}; its run folder is {run}")
        row = query_row(run, config, command)
        append_row(table, row)
    except FsbenchError as e:
        click.echo(f"fsbench: error: {e}", err=True)
        sys.exit(2)
    click.echo(json.dumps({k: row[k] for k in ROW_KEYS}))


if __name__ == "__main__":
    main()
