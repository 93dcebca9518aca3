"""Latency of Wan2.2 at real shapes on one GPU (run by scripts/device_e2e.sh; also runs on a CPU with --model tiny).

1. build the pipeline (a14b-synthetic: random bf16 weights created on the GPU);
2. per attention format: one denoising step = the cond and the uncond forward of the high-noise expert,
   timed with CUDA events after one warm-up forward; the self-attention core is timed with events around
   every call, and once replaced by a no-op (output = v) to measure the step without it;
3. per schedule: the mean step latency over its steps (a step runs one format in every layer, so this is
   the per-format step time weighted by the schedule's steps);
4. one full SingleStream query through LoadGen (text encoder, `--query-steps` steps, VAE decode, mp4).

Every measurement is written to OUT/device_e2e.json as soon as it is taken (atomically), so a run cut short
still reports what it measured. `--budget-s` skips what would not fit in the remaining time.
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
import torch

from fsbench.harness.measure.profile import Clock
from fsbench.harness.mlperf import loadgen
from fsbench.harness.model import pipeline
from fsbench.harness.model.synthetic import TINY_PROMPTS
from fsbench.harness.parallel import team
from fsbench.harness.precision.router import SelfAttentionCall, SelfAttentionRouter
from fsbench.harness.precision.schedule import load as load_schedule
from fsbench.harness.run import dataset, orchestrator, writer
from fsbench.harness.run.presets import build_settings


class TimedCore:
    """The router's attention core with a clock around every call (or a no-op returning v)."""

    def __init__(self, clock: Clock, impl: str, noop: bool = False):
        self.clock, self.impl, self.noop = clock, impl, noop
        self.marks: list[tuple[Any, Any]] = []

    def __call__(self, call: SelfAttentionCall) -> torch.Tensor:
        if self.noop:
            return call.v
        start = self.clock.mark()
        out = replace(call, impl="auto" if call.fmt == "bf16" else self.impl).run()
        self.marks.append((start, self.clock.mark()))
        return out

    def total(self) -> float:
        return sum(self.clock.seconds(s, e) for s, e in self.marks)


def measure_step(pipe: Any, fmt: str, inputs: dict[str, Any], clock: Clock, impl: str, noop: bool) -> dict:
    """Warm-up forward, then one timed step (cond + uncond) with every attn1 in `fmt`."""
    layers = len(pipe.transformer.blocks)
    core = TimedCore(clock, impl, noop)
    router = SelfAttentionRouter(load_schedule("bf16" if noop else fmt).resolve(1, layers), core=core)
    router.install(pipe)
    try:
        with torch.no_grad():
            t0 = clock.mark()
            pipe.transformer(encoder_hidden_states=inputs["cond"], **inputs["common"])
            warm = clock.seconds(t0, clock.mark())
            core.marks.clear()
            start = clock.mark()
            for context in (inputs["cond"], inputs["uncond"]):
                pipe.transformer(encoder_hidden_states=context, **inputs["common"])
            step = clock.seconds(start, clock.mark())
    finally:
        router.uninstall()
    result = {"step_s": step, "warmup_forward_s": warm, "attention_calls": len(core.marks)}
    if not noop:
        result["attention_s"] = core.total()
        result["attention_share"] = result["attention_s"] / step
    return result


def single_stream_query(pipe: Any, model: str, out: Path, schedule: str, steps: int, overrides: dict,
                        device: torch.device, impl: str) -> dict:
    prompts = out / "prompts.txt"
    writer.atomic_write_text(prompts, "".join(p + "\n" for p in TINY_PROMPTS))
    spec = orchestrator.prepare(model, "mlperf", schedule, prompts, 1, None, {**overrides, "steps": steps})
    run_dir = out / f"single-stream-{schedule}"
    system = orchestrator.default_system(spec.model_tag, device)
    orchestrator.open_run_dir(run_dir, spec, system, device)
    opts = loadgen.LoadgenOptions("SingleStream", "performance", count=1, time_s=0,
                                         target_latency_ms=60000)
    layout = team.Layout(1, device.type)
    job = orchestrator.Job(spec, opts, run_dir, system, impl, layout)
    summary = orchestrator.run_scenario(pipe, job, team.Team(layout, device))
    return {"schedule": schedule, "steps": steps, "latency_s": summary["latency_max_ns"] / 1e9,
            "validity_note": "one query: LoadGen needs 64 for a VALID SingleStream result",
            "run_dir": str(run_dir)}


@click.command()
@click.option("--out", type=click.Path(path_type=Path), required=True)
@click.option("--model", default="a14b-synthetic", show_default=True)
@click.option("--height", type=int, default=720, show_default=True)
@click.option("--width", type=int, default=1280, show_default=True)
@click.option("--frames", type=int, default=81, show_default=True)
@click.option("--schedules", default="bf16,mxfp8,mxfp6,mxfp4,hybrid", show_default=True)
@click.option("--query-steps", type=int, default=2, show_default=True)
@click.option("--query-schedules", default="bf16,hybrid", show_default=True)
@click.option("--impl", default="auto", show_default=True, help="kernels.attention impl for the MX formats.")
@click.option("--budget-s", type=float, default=330.0, show_default=True)
def main(out: Path, model: str, height: int, width: int, frames: int, schedules: str, query_steps: int,
         query_schedules: str, impl: str, budget_s: float) -> None:
    began = time.perf_counter()
    device = pipeline.default_device()
    overrides = {"height": height, "width": width, "num_frames": frames}
    settings = build_settings("mlperf", model, steps=20, **overrides)
    report: dict[str, Any] = {
        "command": " ".join(sys.argv), "model": model, "device": orchestrator.device_info(device, model),
        "versions": writer.versions(), "git_commit": writer.git_commit(),
        "shape": {"height": height, "width": width, "num_frames": frames, "tokens": settings.tokens},
        "formats": {}, "schedules": {}, "single_stream": [], "skipped": [],
    }

    def save() -> None:
        report["elapsed_s"] = round(time.perf_counter() - began, 2)
        if device.type == "cuda":
            report["peak_memory_gb"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
        writer.atomic_write_text(out / "device_e2e.json", json.dumps(report, indent=2) + "\n")
        click.echo(f"[{report['elapsed_s']:7.1f}s] saved {out / 'device_e2e.json'}")

    start = time.perf_counter()
    pipe = pipeline.build(model, settings, device)
    pipe.set_progress_bar_config(leave=False)
    report["build_s"] = round(time.perf_counter() - start, 2)
    save()

    with torch.no_grad():
        cond, uncond = pipe.encode_prompt(TINY_PROMPTS[0], settings.negative_prompt, True,
                                          max_sequence_length=512, device=device)
    dtype = pipe.transformer.dtype
    latent = dataset.fixed_latent(settings).to(device, dtype)
    inputs = {"cond": cond.to(dtype), "uncond": uncond.to(dtype),
              "common": {"hidden_states": latent, "timestep": torch.tensor([999], device=device),
                         "return_dict": False}}
    clock = Clock(device)
    parsed = {name: load_schedule(name).resolve(settings.steps, len(pipe.transformer.blocks))
              for name in schedules.split(",")}
    formats = ["bf16", *sorted({f for s in parsed.values() for f in s.formats} - {"bf16"}), "none"]
    for fmt in formats:
        bf16 = report["formats"].get("bf16")
        estimate = 3 * bf16["step_s"] if bf16 else 0.0
        if time.perf_counter() - began + estimate > budget_s:
            report["skipped"].append(f"format {fmt}: not enough budget left")
            continue
        try:
            report["formats"][fmt] = measure_step(pipe, fmt, inputs, clock, impl, noop=fmt == "none")
        except (RuntimeError, ValueError, ImportError) as exc:  # e.g. a kernel that does not compile here
            report["skipped"].append(f"format {fmt}: {type(exc).__name__}: {exc}")
        if fmt == "none" and "bf16" in report["formats"]:
            base = report["formats"]["bf16"]["step_s"]
            report["self_attention_share_by_noop"] = (base - report["formats"]["none"]["step_s"]) / base
        save()
    for name, resolved in parsed.items():
        steps = [report["formats"].get(f, {}).get("step_s") for f in resolved.by_step()]
        if None not in steps:
            report["schedules"][name] = {"spec": resolved.spec, "by_step": resolved.by_step(),
                                         "mean_step_s": sum(steps) / len(steps), "denoise_s": sum(steps)}
    save()
    for name in query_schedules.split(","):
        bf16 = report["formats"].get("bf16", {}).get("step_s", 0.0)
        if time.perf_counter() - began + (query_steps + 1) * bf16 > budget_s:
            report["skipped"].append(f"SingleStream query {name}: not enough budget left")
            continue
        report["single_stream"].append(single_stream_query(pipe, model, out, name, query_steps, overrides, device,
                                                           impl))
        save()


if __name__ == "__main__":
    main()
