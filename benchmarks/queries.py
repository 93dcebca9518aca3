#!/usr/bin/env python3
"""Real SingleStream queries, as a user measures them: for one schedule in one configuration, `fsbench run
--scenario SingleStream --count 1 --time 0 --profile --warm-up` into its own run folder OUT/<config>-<schedule>,
then one row appended to a JSON list (default OUT/queries.json). The warm-up (one untimed step per format before
LoadGen starts) keeps compilation out of the timed query. The front page's end-to-end tables.

`--schedule` and `--config` may each be given several times: every schedule runs in every configuration. With
`--gpus N` up to N queries run at once, each alone on its GPU (`CUDA_VISIBLE_DEVICES`; the row records the
host's number of that GPU as `gpu`), so a host of N GPUs runs N queries in the time of the slowest; rows are
appended as the queries finish. A full 20-step 720x1280x81 query of a14b-synthetic takes 5-8 minutes on the H200.

Configurations:

  optimized   FP8 GEMMs, compiled blocks (attention inside the graphs), bf16 VAE decode
  bf16-gemm   BF16 GEMMs, compiled blocks, fp32 VAE decode (only attention quantized: the BF16-GEMM column)

A row holds `schedule`, `gemm`, `compile`, `vae`, `steps`, `query_s` (LoadGen's latency of the query), `joules`
(the GPU's energy per video from the run's profile; None where not measured, with `energy_note` saying why) and
`commit`, plus the run folder and the command. `fsbench compare RUN...` over the run folders builds the Table 6
latency, speedup and energy columns.

usage: python3 benchmarks/queries.py --out DIR --schedule bf16 --schedule mxfp8 --config optimized [--gpus N]
"""
from __future__ import annotations

import json
import os
import queue
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import click

from fsbench import files
from fsbench.errors import FsbenchError
from fsbench.eval.runs import Run
from fsbench.gpus import child_gpus
from fsbench.harness.precision.schedule import builtin_names
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


def query_row(run: Path, config: str, command: list[str], gpu: str | None = None) -> dict[str, Any]:
    """The table row of a finished run folder (one SingleStream query) that ran on the host's GPU `gpu`."""
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
            "gpu": gpu if opened.manifest.get("device", {}).get("type") == "cuda" else None,
            "command": shlex.join(["fsbench", *command[3:]])}


def read_rows(table: Path) -> list[dict[str, Any]]:
    """The rows in `table` (none where it does not exist yet); FsbenchError where it is not a JSON list."""
    try:
        rows = json.loads(table.read_text()) if table.is_file() else []
    except json.JSONDecodeError as e:
        raise FsbenchError(f"{table} is not JSON: {e}") from e
    if not isinstance(rows, list):
        raise FsbenchError(f"{table} does not hold a JSON list of query rows")
    return rows


def append_row(table: Path, row: dict[str, Any]) -> list[dict[str, Any]]:
    """Add `row` to the JSON list in `table` (written atomically; a row of the same query and commit is replaced)."""
    rows = read_rows(table)
    same = ("schedule", "gemm", "compile", "vae", "steps", "commit", "model")
    rows = [r for r in rows if any(r.get(k) != row.get(k) for k in same)] + [row]
    table.parent.mkdir(parents=True, exist_ok=True)
    files.atomic_write_text(table, json.dumps(rows, indent=2) + "\n")
    return rows


def run_query(model: str, schedule: str, config: str, run: Path, extra: tuple[str, ...], warm_up: bool,
              gpus: queue.Queue[str]) -> dict[str, Any]:
    """Run one query on the first free GPU of `gpus` and return its row; FsbenchError where it failed."""
    gpu = gpus.get()
    try:
        command = run_command(model, schedule, config, run, extra, warm_up)
        click.echo(f"[GPU {gpu}] {shlex.join(command)}", err=True)
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpu,
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        done = subprocess.run(command, cwd=REPO, env=env, check=False)
        if done.returncode:
            raise FsbenchError(f"fsbench run of {config}-{schedule} exited with {done.returncode}; its run folder "
                               f"is {run}")
        return query_row(run, config, command, gpu)
    finally:
        gpus.put(gpu)


@click.command(context_settings={"ignore_unknown_options": True})
@click.option("--schedule", "schedules", multiple=True, required=True,
              help=f"A built-in schedule ({', '.join(builtin_names())}); repeat for several.")
@click.option("--config", "configs", type=click.Choice(list(CONFIGS)), multiple=True, required=True,
              help="optimized: fp8 GEMMs, --compile, bf16 VAE; bf16-gemm: bf16 GEMMs, --compile, fp32 VAE; repeat "
                   "for both.")
@click.option("--gpus", type=click.IntRange(min=1), default=1, show_default=True,
              help="Queries at once, one per GPU.")
@click.option("--model", default="a14b-synthetic", show_default=True, help="fsbench run --model.")
@click.option("--out", "runs_root", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder of the run folders (one per configuration and schedule) and of queries.json.")
@click.option("--table", type=click.Path(dir_okay=False, path_type=Path),
              help="The JSON list a row is appended to (default OUT/queries.json).")
@click.option("--warm-up/--no-warm-up", "warm_up", default=True, show_default=True,
              help="One untimed step per format before the query (keeps compilation out of it; the row says "
                   "whether it ran).")
@click.argument("extra", nargs=-1, type=click.UNPROCESSED)
def main(schedules: tuple[str, ...], configs: tuple[str, ...], gpus: int, model: str, runs_root: Path,
         table: Path | None, warm_up: bool, extra: tuple[str, ...]) -> None:
    """Run one real SingleStream query of every SCHEDULE in every CONFIG and append each one's row to TABLE;
    EXTRA arguments go to `fsbench run` (e.g. --height 32 --width 32 --frames 5 --steps 2 with --model tiny)."""
    failed: list[str] = []
    table = table or runs_root / "queries.json"
    try:
        unknown = [s for s in schedules if s not in builtin_names()]
        if unknown:
            raise FsbenchError(f"--schedule must be one of {', '.join(builtin_names())}, got {unknown[0]!r}")
        queries = list(dict.fromkeys((s, c) for c in configs for s in schedules))
        runs = {q: runs_root / f"{q[1]}-{q[0]}" for q in queries}
        taken = [str(run) for run in runs.values() if run.exists()]
        if taken:
            raise FsbenchError(f"{taken[0]} exists: a query's run folder holds one query; move it away or pass another "
                               "--out")
        read_rows(table)  # a table that cannot take the rows stops the command before the queries, not after
        free: queue.Queue[str] = queue.Queue()
        for gpu in child_gpus(min(gpus, len(queries))):
            free.put(gpu)
        with ThreadPoolExecutor(max_workers=free.qsize()) as pool:
            futures = [pool.submit(run_query, model, s, c, runs[(s, c)], extra, warm_up, free) for s, c in queries]
            for future in as_completed(futures):
                try:
                    row = future.result()
                except FsbenchError as e:
                    failed.append(str(e))
                    continue
                append_row(table, row)
                click.echo(json.dumps({k: row[k] for k in (*ROW_KEYS, "gpu")}))
        if failed:
            raise FsbenchError(f"{len(failed)} of {len(queries)} queries failed: {'; '.join(failed)}")
    except FsbenchError as e:
        click.echo(f"fsbench: error: {e}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
