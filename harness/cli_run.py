"""`fsbench run`, `fsbench sweep` and `fsbench schedules`."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from harness import loadgen_driver, runner
from harness.cli import main
from harness.errors import FsbenchError
from harness.presets import preset_names
from harness.schedule import builtin_names
from harness.schedule import load as load_schedule


def _options_decorator(options: list[Callable]) -> Callable[[Callable], Callable]:
    """One decorator applying several click options in the order listed."""

    def apply(fn: Callable) -> Callable:
        for option in reversed(options):
            fn = option(fn)
        return fn
    return apply


# What to generate and how: shared by `run` and `sweep`.
_generation = _options_decorator([
    click.option("--model", default="tiny", show_default=True,
                 help="tiny | a14b-synthetic | a Wan2.2-T2V-A14B-Diffusers folder or cached HF repo id."),
    click.option("--preset", type=click.Choice(preset_names()), default="mlperf", show_default=True,
                 help="Generation settings (scenarios/<preset>.toml); tiny gets small videos by default."),
    click.option("--prompts", "prompts_file", type=click.Path(path_type=Path),
                 help="One prompt per line [default: tiny's own prompts, else $FSBENCH_DATA/vbench_prompts.txt]."),
    click.option("--num-prompts", type=int, help="Use only the first N prompts."),
    click.option("--latent", "latent_file", type=click.Path(path_type=Path),
                 help="Fixed initial latent (MLPerf fixed_latent.pt) [default: N(0,1) from seed 42]."),
    click.option("--height", type=int, help="Override the preset's height (multiple of 16)."),
    click.option("--width", type=int, help="Override the preset's width (multiple of 16)."),
    click.option("--frames", "num_frames", type=int, help="Override the preset's frame count (4k+1)."),
    click.option("--steps", type=int, help="Override the preset's denoising steps."),
    click.option("--impl", type=click.Choice(["auto", "emulate", "triton"]), default="auto", show_default=True,
                 help="Kernel for the MX formats (bf16 always uses SDPA)."),
    click.option("--system", help="System name in the log layout [default: <device>-<model>]."),
])

# LoadGen settings of `run`; a sweep is AccuracyOnly (every prompt once) and needs none of them.
_loadgen = _options_decorator([
    click.option("--user-conf", type=click.Path(path_type=Path), default=loadgen_driver.USER_CONF,
                 show_default=True, help="LoadGen user.conf read after the built-in mlperf.conf."),
    click.option("--count", type=int,
                 help="LoadGen override: queries (SingleStream, >= 64 for a VALID result) / samples (Offline)."),
    click.option("--time", "time_s", type=float,
                 help="LoadGen override: minimum duration in seconds (mlperf.conf: 600; quick runs: 0)."),
    click.option("--target-latency", "target_latency_ms", type=float,
                 help="LoadGen override: expected SingleStream latency in ms."),
    click.option("--target-qps", type=float, help="LoadGen override: expected Offline samples per second."),
])


def _prepare(schedule: Any, kw: dict[str, Any]) -> runner.RunSpec:
    overrides = {k: kw[k] for k in ("height", "width", "num_frames", "steps")}
    return runner.prepare(kw["model"], kw["preset"], schedule, kw["prompts_file"], kw["num_prompts"],
                          kw["latent_file"], overrides)


@main.command()
@click.option("--scenario", type=click.Choice(loadgen_driver.SCENARIOS), default="SingleStream", show_default=True)
@click.option("--mode", type=click.Choice(loadgen_driver.MODES), default="performance", show_default=True)
@click.option("--schedule", default="bf16", show_default=True,
              help="Built-in name, a .toml file, or a spec such as 'mxfp6:0-2,17-19;mxfp4:*'.")
@click.option("--out", type=click.Path(path_type=Path),
              help="Run directory [default: results/runs/<model>-<schedule>-<preset>].")
@click.option("--capture", is_flag=True,
              help="Record every self-attention call's statistics to RUN/capture/<Scenario>-<mode>/ (replacing an "
                   "earlier capture there; accuracy runs then regenerate every video).")
@click.option("--capture-qkv", type=int, default=0, show_default=True,
              help="With --capture: also save q, k, v of the N calls with the highest rollback rates.")
@click.option("--audit", type=click.Choice(["TEST04"]),
              help="MLPerf compliance audit (performance mode): the same sample for every query; logs go to "
                   "RUN/<system>/wan-2.2-t2v-a14b/<Scenario>/TEST04/.")
@_generation
@_loadgen
def run(scenario: str, mode: str, schedule: str, out: Path | None, capture: bool, capture_qkv: int,
        audit: str | None, **kw: Any) -> None:
    """Run one LoadGen scenario and mode of one precision schedule."""
    spec = _prepare(schedule, kw)
    opts = loadgen_driver.LoadgenOptions(scenario, mode, kw["user_conf"], kw["count"], kw["time_s"],
                                         kw["target_latency_ms"], kw["target_qps"], audit)
    device = runner.check_device_for(spec.model)
    run_dir = out or Path("results/runs") / f"{spec.model_tag}-{runner.schedule_slug(spec.schedule)}-{kw['preset']}"
    system = kw["system"] or runner.default_system(spec.model_tag, device)
    loadgen_driver.build_test_settings(opts, len(spec.prompts.texts))  # a bad user.conf fails before any work
    runner.open_run_dir(run_dir, spec, system, device)
    pipe = runner.load_pipeline(spec, device)
    summary = runner.run_scenario(pipe, spec, run_dir, system, opts, impl=kw["impl"],
                                  capture_qkv=capture_qkv if capture else None)
    click.echo(runner.describe(summary))
    click.echo(f"results: {run_dir}")


@main.command()
@click.option("--schedules", default="bf16,mxfp8,mxfp6,mxfp4,hybrid", show_default=True,
              help="Comma-separated schedules (names or .toml files; spec strings contain ',' so use files).")
@click.option("--out", type=click.Path(path_type=Path),
              help="Sweep directory, one run per schedule in OUT/<schedule>/ "
                   "[default: results/runs/sweep-<model>-<preset>].")
@_generation
def sweep(schedules: str, out: Path | None, **kw: Any) -> None:
    """AccuracyOnly pass (Offline) over every prompt for each schedule; resumable: finished videos are kept."""
    parsed = [load_schedule(name.strip()) for name in schedules.split(",") if name.strip()]
    if not parsed:
        raise FsbenchError("--schedules is empty; e.g. --schedules bf16,mxfp8,hybrid")
    specs = [_prepare(schedule, kw) for schedule in parsed]
    slugs = [runner.schedule_slug(spec.schedule) for spec in specs]
    if len(set(slugs)) != len(slugs):
        raise FsbenchError(f"--schedules names a schedule twice ({', '.join(slugs)}); each gets OUT/<name>/")
    opts = loadgen_driver.LoadgenOptions("Offline", "accuracy")
    device = runner.check_device_for(specs[0].model)
    out = out or Path("results/runs") / f"sweep-{specs[0].model_tag}-{kw['preset']}"
    system = kw["system"] or runner.default_system(specs[0].model_tag, device)
    for spec, slug in zip(specs, slugs):
        runner.open_run_dir(out / slug, spec, system, device)
    pipe = runner.load_pipeline(specs[0], device)
    for spec, slug in zip(specs, slugs):
        summary = runner.run_scenario(pipe, spec, out / slug, system, opts, impl=kw["impl"])
        click.echo(f"[{spec.schedule.name}] {runner.describe(summary)}")
    click.echo(f"results: {out}/{{{','.join(slugs)}}}")


@main.command()
@click.option("--steps", type=int, default=20, show_default=True, help="Show the formats for this many steps.")
@click.option("--layers", type=int, default=40, show_default=True, help="Layers per expert (A14B: 40, tiny: 2).")
@click.argument("extra", nargs=-1)
def schedules(steps: int, layers: int, extra: tuple[str, ...]) -> None:
    """List the built-in schedules (and any EXTRA names, files or specs) with their per-step formats."""
    for name in (*builtin_names(), *extra):
        schedule = load_schedule(name)
        resolved = schedule.resolve(steps, layers)
        click.echo(f"{schedule.name:<8} {schedule.spec}")
        if schedule.description:
            click.echo(f"         {schedule.description}")
        click.echo(f"         steps 0-{steps - 1}: {' '.join(resolved.by_step())}")

