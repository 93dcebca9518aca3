"""`fsbench run`, `fsbench sweep` and `fsbench schedules`."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import torch

from fsbench import rundir
from fsbench.errors import FsbenchError
from fsbench.folders import claim
from fsbench.harness.cli import params
from fsbench.harness.mlperf import loadgen
from fsbench.harness.model import options as speed
from fsbench.harness.parallel import team
from fsbench.harness.precision.schedule import GRAMMAR, builtin_names, load as load_schedule, refuse_repeats
from fsbench.harness.run import estimate, inputs, interrupts, lock, logs, orchestrator
from fsbench.kernels import registry


def _options_decorator(options: list[Callable]) -> Callable[[Callable], Callable]:
    """One decorator applying several click options in the order listed."""

    def apply(fn: Callable) -> Callable:
        for option in reversed(options):
            fn = option(fn)
        return fn
    return apply


DEFAULT_SWEEP = "bf16,mxfp8,mxfp6,mxfp4,hybrid"

# What to generate and how: shared by `run` and `sweep`.
_generation = _options_decorator([
    click.option("--model", default=inputs.DEFAULT_MODEL, show_default=True,
                 help="tiny | a14b-synthetic | a Wan2.2-T2V-A14B-Diffusers folder or cached HF repo id."),
    params.preset_option,
    click.option("--prompts", "prompts_file", type=click.Path(path_type=Path),
                 help="One prompt per line [default: tiny's own prompts, else vbench_prompts.txt in $FSBENCH_DATA, "
                      "else in $XDG_CACHE_HOME/fsbench]."),
    click.option("--num-prompts", type=params.POSITIVE_INT, help="Use only the first N prompts."),
    click.option("--latent", "latent_file", type=click.Path(path_type=Path),
                 help="Fixed initial latent file [default: fixed_latent.pt of the data folder ($FSBENCH_DATA, else "
                      "$XDG_CACHE_HOME/fsbench) for the mlperf preset at 720x1280x81, else N(0,1) from the seed]."),
    click.option("--height", type=params.int_range(16, params.MAX_SIDE),
                 help="Override the preset's height (multiple of 16)."),
    click.option("--width", type=params.int_range(16, params.MAX_SIDE),
                 help="Override the preset's width (multiple of 16)."),
    click.option("--frames", "num_frames", type=params.int_range(1, params.MAX_FRAMES),
                 help="Override the preset's frame count (4k+1)."),
    click.option("--steps", type=params.int_range(1, params.MAX_STEPS),
                 help="Override the preset's denoising steps."),
    click.option("--impl", type=click.Choice(registry.RUN_CHOICES), default=registry.AUTO,
                 show_default=True, help="Kernel for the MX formats (bf16: --bf16-impl; auto: Gluon on sm_90 at "
                 "head dim 128, else Triton there, the emulator elsewhere)."),
    click.option("--bf16-impl", type=click.Choice(registry.BF16_CHOICES), default=registry.AUTO,
                 show_default=True, help="Kernel for the bf16 layers' self-attention (auto: SDPA, cuDNN first); "
                 "another BF16 kernel makes the BF16 baseline the fastest one installed."),
    click.option("--system", type=params.NAME, help="System name in the log layout [default: <device>-<model>]."),
    click.option("--compile", "compile_blocks", is_flag=True,
                 help="torch.compile the repeated transformer blocks, self-attention inside the graphs."),
    click.option("--gemm", type=click.Choice(speed.GEMMS), default="bf16", show_default=True,
                 help="Linear layers of the transformer blocks: BF16, or FP8 e4m3 with row scales (_scaled_mm)."),
    click.option("--vae", "vae_dtype", type=click.Choice(list(speed.VAE_DTYPES)), default="fp32", show_default=True,
                 help="VAE decode precision."),
    click.option("--offload", is_flag=True,
                 help="Keep the text encoder and the idle expert in pinned host memory, each copied onto the GPU when "
                      "it runs: the same videos in less GPU memory (A14B at 720p with BF16 GEMMs on an 80 GB card)."),
])

# LoadGen settings of `run`; a sweep is AccuracyOnly (every prompt once) and needs none of them.
_loadgen = _options_decorator([
    click.option("--user-conf", type=click.Path(path_type=Path), default=loadgen.USER_CONF,
                 show_default=True, help="LoadGen user.conf read after the built-in mlperf.conf."),
    click.option("--count", type=params.int_range(1, params.MAX_COUNT),
                 help="LoadGen override: queries (SingleStream, >= 64 for a VALID result) / samples (Offline)."),
    click.option("--time", "time_s", type=params.non_negative_float(params.MAX_TIME_S),
                 help="LoadGen override: minimum duration in seconds (mlperf.conf: 600; quick runs: 0)."),
    click.option("--target-latency", "target_latency_ms",
                 type=params.positive_float(params.MAX_TARGET_LATENCY_MS),
                 help="LoadGen override: expected SingleStream latency in ms."),
    click.option("--target-qps", type=params.positive_float(params.MAX_TARGET_QPS),
                     help="LoadGen override: expected Offline samples per second."),
])


def _speed(kw: dict[str, Any]) -> speed.SpeedOptions:
    return speed.SpeedOptions(compile=kw["compile_blocks"], gemm=kw["gemm"], vae=kw["vae_dtype"],
                              offload=kw["offload"], bf16_impl=kw["bf16_impl"])


def _prepare(schedule: Any, kw: dict[str, Any]) -> orchestrator.RunSpec:
    overrides = {k: kw[k] for k in ("height", "width", "num_frames", "steps")}
    return orchestrator.prepare(kw["model"], kw["preset"], schedule, kw["prompts_file"], kw["num_prompts"],
                          kw["latent_file"], overrides)


@click.command()
@click.option("--scenario", type=click.Choice(loadgen.SCENARIOS), default="SingleStream", show_default=True)
@click.option("--mode", type=click.Choice(loadgen.MODES), default="performance", show_default=True)
@click.option("--schedule", default="bf16", show_default=True,
              help="Built-in name, a .toml file, or a spec such as 'mxfp6:0-2,17-19;mxfp4:*' (`fsbench schedules` "
                   "shows the grammar).")
@click.option("--out", type=params.OutPath(kind="run", file_okay=False),
              help="Run directory: a new or empty folder, or a run folder to add to "
                   "[default: results/runs/<model>-<schedule>-<preset>].")
@click.option("--capture", is_flag=True,
              help="Record every self-attention call's statistics to RUN/capture/<Scenario>-<mode>/ (replacing an "
                   "earlier capture there; accuracy runs then regenerate every video).")
@click.option("--reuse", is_flag=True,
              help="Accuracy mode: keep the intact videos of the same settings the run folder already holds (an "
                   "interrupted pass resumes) instead of generating every one; the manifest records how many were "
                   "reused, and a closed-division package refuses such a run.")
@click.option("--keep-all-frames", is_flag=True,
              help="Accuracy mode: keep every frame losslessly in RUN/frames/ (about 4 times the disk), not only "
                   "the every 4th that eval compares.")
@click.option("--capture-qkv", type=params.NON_NEGATIVE_INT, default=0, show_default=True,
              help="With --capture: also save q, k, v of the N calls with the highest rollback rates.")
@click.option("--audit", type=click.Choice(["TEST04"]),
              help="MLPerf compliance audit (performance mode): the same sample for every query; logs go to "
                   "RUN/<system>/wan-2.2-t2v-a14b/<Scenario>/TEST04/.")
@click.option("--profile", is_flag=True,
              help="Time every phase of every video (CUDA events): RUN/profile.json and RUN/profile.md.")
@click.option("--warm-up", "warm_up", is_flag=True,
              help="Before LoadGen starts, one untimed denoising step per attention format of the schedule (with "
                   "--compile, the graphs are built there, not in a timed query). One process only.")
@click.option("--gpus", type=params.PROCESSES,
              help="Processes, one per GPU (per CPU share with --device cpu); Offline runs a pipeline replica on "
                   "each, SingleStream splits every query over all of them [default: 1, or torchrun's WORLD_SIZE].")
@click.option("--cfg-parallel", type=params.PROCESSES,
              help="SingleStream: ranks sharing the cond/uncond passes, 1 or 2 [default: 2 for an even --gpus].")
@click.option("--ulysses", type=params.PROCESSES,
              help="SingleStream: Ulysses sequence-parallel degree [default: --gpus / --cfg-parallel].")
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto", show_default=True,
              help="Where the pipeline runs: auto = CUDA when present; cpu with --gpus N = N gloo processes.")
@_generation
@_loadgen
def run(scenario: str, mode: str, schedule: str, out: Path | None, capture: bool, reuse: bool, capture_qkv: int,
        profile: bool, warm_up: bool, audit: str | None, keep_all_frames: bool, **kw: Any) -> None:
    """Run one LoadGen scenario and mode of one precision schedule."""
    if reuse and mode != "accuracy":
        raise FsbenchError("--reuse keeps the videos of an accuracy pass: add --mode accuracy or leave --reuse out")
    if keep_all_frames and mode != "accuracy":
        raise FsbenchError("--keep-all-frames keeps the frames of an accuracy pass (a timed query keeps none): add "
                           "--mode accuracy or leave it out")
    spec = _prepare(schedule, kw)
    opts = loadgen.LoadgenOptions(scenario, mode, kw["user_conf"], kw["count"], kw["time_s"],
                                  kw["target_latency_ms"], kw["target_qps"], audit)
    layout = team.plan(scenario, spec.model, spec.settings, kw["gpus"], kw["cfg_parallel"], kw["ulysses"],
                       kw["device"], capture=capture, warm_up=warm_up)
    device = torch.device(layout.device)
    options = _speed(kw)
    options.check_device(device)
    run_dir = out or Path("results/runs") / (f"{spec.model_tag}-{orchestrator.schedule_slug(spec.schedule)}-"
                                             f"{spec.settings.preset}{options.slug}")
    system = kw["system"] or orchestrator.default_system(spec.model_tag, device)
    loadgen.build_test_settings(opts, len(spec.prompts.texts))  # a bad user.conf fails before any work
    job = orchestrator.Job(spec, opts, run_dir, system, kw["impl"], layout, options, profile,
                           capture_qkv if capture else None, warm_up, reuse,
                           keep_frames=1 if keep_all_frames else rundir.KEPT_FRAME_STEP)
    interrupts.watch(run_dir, spec.prompts.texts)
    _announce(spec, len(spec.prompts.texts) if mode == "accuracy" else kw["count"] or len(spec.prompts.texts), device)
    with lock.hold(*([run_dir] if team.leads_job() else [])):  # the leading process holds it for every rank
        summaries = orchestrator.run([job])
    if summaries is not None:  # the leading process reports
        click.echo(orchestrator.describe(summaries[0]))
        click.echo(f"results: {run_dir}")


@click.command()
@click.option("--schedules", default=None,
              help="Comma-separated schedule names or .toml files [default: bf16,mxfp8,mxfp6,mxfp4,hybrid].")
@click.option("--schedule", "schedule_list", multiple=True,
              help="One schedule (a name, a .toml file or a spec string such as 'mxfp6:0-2,17-19;mxfp4:*'); repeat "
                   "it for more. Instead of --schedules.")
@click.option("--out", type=params.OutPath(kind="sweep", file_okay=False),
              help="Sweep directory (new, empty, or an earlier sweep's), one run per schedule in OUT/<schedule>/ "
                   "[default: results/runs/sweep-<model>-<preset>].")
@click.option("--gpus", type=params.PROCESSES,
              help="Processes, one per GPU (per CPU share with --device cpu), each a pipeline replica sharing every "
                   "schedule's prompts [default: 1, or torchrun's WORLD_SIZE].")
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto", show_default=True,
              help="Where the pipelines run: auto = CUDA when present; cpu with --gpus N = N gloo processes.")
@_generation
def sweep(schedules: str | None, schedule_list: tuple[str, ...], out: Path | None, **kw: Any) -> None:
    """AccuracyOnly pass (Offline) over every prompt for each schedule; resumable on any --gpus: finished videos
    are kept."""
    if schedules is not None and schedule_list:
        raise FsbenchError("pass either --schedules A,B or --schedule A --schedule B, not both")
    names = list(schedule_list) or (DEFAULT_SWEEP if schedules is None else schedules).split(",")
    parsed = [load_schedule(name.strip()) for name in names if name.strip()]
    if not parsed:  # an empty value names no schedule: it never means the default list
        option = "--schedule" if schedule_list else "--schedules"
        raise FsbenchError(f"{option} is empty; e.g. --schedules bf16,mxfp8,hybrid or --schedule bf16")
    refuse_repeats(parsed, "--schedule" if schedule_list else "--schedules")
    specs = [_prepare(schedule, kw) for schedule in parsed]
    slugs = [orchestrator.schedule_slug(spec.schedule) for spec in specs]
    if len(set(slugs)) != len(slugs):
        raise FsbenchError(f"--schedules names a schedule twice ({', '.join(slugs)}); each gets OUT/<name>/")
    opts = loadgen.LoadgenOptions("Offline", "accuracy")
    layout = team.plan("Offline", specs[0].model, specs[0].settings, kw["gpus"], None, None, kw["device"])
    device = torch.device(layout.device)
    options = _speed(kw)
    options.check_device(device)
    out = out or Path("results/runs") / f"sweep-{specs[0].model_tag}-{specs[0].settings.preset}{options.slug}"
    system = kw["system"] or orchestrator.default_system(specs[0].model_tag, device)
    jobs = [orchestrator.Job(spec, opts, out / slug, system, kw["impl"], layout, options, reuse=True)
            for spec, slug in zip(specs, slugs)]
    if team.leads_job():
        claim(out, "sweep")
    for job in jobs:
        interrupts.watch(job.run, job.spec.prompts.texts)
    _announce(specs[0], sum(len(spec.prompts.texts) for spec in specs), device)
    with lock.hold(*(job.run for job in jobs if team.leads_job())):  # the leading process, for every rank
        summaries = orchestrator.run(jobs, _echo_pass)
    if summaries is not None:  # the leading process reports
        click.echo(f"results: {out}/{{{','.join(slugs)}}}")


def _announce(spec: orchestrator.RunSpec, videos: int, device: torch.device) -> None:
    """Say before it starts that a request will take long (the leading process only, not with --quiet)."""
    line = estimate.announce(spec.model, spec.settings, videos, device) if team.leads_job() else None
    if line and not logs.quiet():
        click.echo(f"fsbench: {line}", err=True)


def _echo_pass(job: orchestrator.Job, summary: dict[str, Any]) -> None:
    """Each pass's line as it finishes (a module-level function: the team may send it to other processes)."""
    click.echo(f"[{job.spec.schedule.name}] {orchestrator.describe(summary)}")


@click.command()
@click.option("--steps", type=params.int_range(1, params.MAX_STEPS), default=20, show_default=True,
              help="Show the formats for this many steps.")
@click.option("--layers", type=params.int_range(1, params.MAX_STEPS), default=40, show_default=True,
              help="Layers per expert (A14B: 40, tiny: 2).")
@click.argument("extra", nargs=-1)
def schedules(steps: int, layers: int, extra: tuple[str, ...]) -> None:
    """List the built-in schedules (and any EXTRA names, files or specs) with their per-step formats, then how to
    write your own."""
    # every schedule is read and resolved before one is printed: a bad EXTRA is one line, not a table and a line
    listed = [(schedule, schedule.resolve(steps, layers))
              for schedule in (load_schedule(name) for name in (*builtin_names(), *extra))]
    for schedule, resolved in listed:
        click.echo(f"{schedule.name:<8} {schedule.spec}")
        if schedule.description:
            click.echo(f"         {schedule.description}")
        click.echo(f"         steps 0-{steps - 1}: {' '.join(resolved.by_step())}")
    click.echo(f"\n{GRAMMAR}")

