"""Validation: generate every candidate schedule's videos on the held-out prompts and score them against BF16.

Each candidate is a run folder `DIR/runs/<name>/` made by the machinery of `fsbench sweep` (an Offline
AccuracyOnly pass through LoadGen, atomic videos with their `made_with` sidecars), so an interrupted or repeated
tune reuses every finished video and loads no pipeline when nothing is left to generate. Fidelity comes from
`fsbench.eval.fidelity`, which keeps its per-prompt scores and so resumes too.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fsbench import rundir
from fsbench.eval import fidelity
from fsbench.eval.runs import Run
from fsbench.harness.mlperf import loadgen
from fsbench.harness.parallel import team
from fsbench.harness.precision.schedule import load_file
from fsbench.harness.run import lock, made_with, orchestrator
from fsbench.harness.run.orchestrator import RunSpec

REFERENCE = "bf16"


@dataclass(frozen=True)
class Job:
    """One candidate to validate: its name and schedule file."""

    name: str
    schedule_file: Path


def specs(jobs: list[Job], model: str, preset: str, prompts_file: Path, overrides: dict[str, Any]) -> list[RunSpec]:
    return [orchestrator.prepare(model, preset, load_file(job.schedule_file), prompts_file, None, None, overrides)
            for job in jobs]


def pending(spec: RunSpec, run: Path, impl: str) -> int:
    """Videos of `spec` not yet in `run` as this tune would make them."""
    digest = spec.made_with(impl, None)
    return sum(not made_with.reusable(rundir.videos_dir(run) / rundir.video_name(text), digest)
               for text in spec.prompts.texts)


def generate(jobs: list[Job], run_specs: list[RunSpec], out: Path, device: torch.device, impl: str,
             pipe: Callable[[], Any], echo: Callable[[str], None]) -> dict[str, int]:
    """Every job's videos in `out/runs/<name>/` (finished ones kept), with the pipeline `pipe()` returns (loaded
    only when a video is missing); returns videos generated per job."""
    runs = [out / "runs" / job.name for job in jobs]
    todo = {job.name: pending(spec, run, impl) for job, spec, run in zip(jobs, run_specs, runs)}
    generated = {job.name: 0 for job in jobs}
    if not any(todo.values()):
        return generated
    system = orchestrator.default_system(run_specs[0].model_tag, device)
    opts = loadgen.LoadgenOptions("Offline", "accuracy")
    layout = team.plan("Offline", run_specs[0].model, run_specs[0].settings, 1, None, None, device.type)
    one = team.Team(layout, device)  # one process: the tune's pipeline, shared with its calibration
    with lock.hold(*runs):
        for spec, run in zip(run_specs, runs):
            orchestrator.open_run_dir(run, spec, system, device)
        for job, spec, run in zip(jobs, run_specs, runs):
            if not todo[job.name]:
                continue
            job_spec = orchestrator.Job(spec, opts, run, system, impl, layout, reuse=True)
            summary = orchestrator.run_scenario(pipe(), job_spec, one)
            generated[job.name] = summary["videos_generated"]
            echo(f"[{job.name}] {orchestrator.describe(summary)}")
    return generated


def score(out: Path, names: list[str], metrics: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """Mean of each metric over the validation prompts for every run, against the BF16 run."""
    reference = Run.open(out / "runs" / REFERENCE)
    scores = {}
    for name in names:
        result = fidelity.evaluate(Run.open(out / "runs" / name), reference, metrics, workers=1)
        means = result.summary["metrics"]
        scores[name] = {"prompts_compared": result.summary["prompts_compared"],
                        **{m: _mean(means.get(m, {}), result.summary["prompts_compared"]) for m in metrics},
                        **({"not_computed": result.not_computed} if result.not_computed else {})}
    return scores


def _mean(metric: dict[str, Any], compared: int) -> float | None:
    """A metric's mean over the prompts; for PSNR, infinite only where every compared prompt is identical to BF16
    (the mean leaves identical prompts out, so a few of them never carry a budget)."""
    if metric.get("mean") is None and compared and metric.get("identical") == compared:
        return math.inf
    return metric.get("mean")
