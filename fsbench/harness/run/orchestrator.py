"""One benchmark run, as numbered steps: settings -> schedule -> prompts + latent -> run directory ->
pipeline + attention routing -> LoadGen -> writer. `fsbench run` and `fsbench sweep` call `prepare`, then `run`
with one `Job` per LoadGen test; `run` hands the jobs to the run's team (harness.parallel.team), which runs the
same steps on one process or on N."""
from __future__ import annotations

import functools
import hashlib
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch

from fsbench import files, rundir
from fsbench.harness.measure import profile_report
from fsbench.harness.measure.profile import NullProfiler, Profiler
from fsbench.harness.mlperf import loadgen
from fsbench.harness.model import options, pipeline
from fsbench.harness.parallel import team as teams
from fsbench.harness.precision.router import Capture, SelfAttentionRouter
from fsbench.harness.precision.schedule import ResolvedSchedule, Schedule, load as load_schedule
from fsbench.harness.run import dataset, inputs, logs, made_with as artifacts, progress, writer
from fsbench.harness.run.presets import Settings


@dataclass(frozen=True)
class RunSpec:
    """What one run directory holds: model, settings, schedule, prompts and the fixed latent."""

    model: str
    settings: Settings
    schedule: ResolvedSchedule
    prompts: dataset.Prompts
    latent: torch.Tensor
    latent_info: dict[str, Any]  # dataset.Latent.as_dict(): source, shape, file digests, official

    @property
    def model_tag(self) -> str:
        return self.model if self.model in pipeline.SYNTHETIC else "a14b"

    def made_with(self, impl: str, speed: dict[str, Any] | None) -> str:
        """The digest a video of this run records (harness.run.made_with): what shapes its pixels."""
        return artifacts.made_with(self.model, self.settings.as_dict(), dataset.latent_sha256(self.latent),
                                   self.schedule.spec, impl, speed)


@dataclass(frozen=True)
class Job:
    """One LoadGen test of a run, as every process of its team needs it (picklable: started processes get a copy).

    `capture_qkv` None: no capture; N >= 0: record every call's statistics and keep q, k, v of the top N.
    `profile`: time every phase of every video into RUN/profile.{json,md}; `warm_up`: one step per attention
    format before LoadGen starts (`VideoGenerator.warm_up`); `reuse`: an accuracy pass keeps the intact videos of
    the same settings the folder holds (a resumed pass; the summary counts them)."""

    spec: RunSpec
    opts: loadgen.LoadgenOptions
    run: Path
    system: str
    impl: str
    layout: teams.Layout
    speed: options.SpeedOptions = options.SpeedOptions()
    profile: bool = False
    capture_qkv: int | None = None
    warm_up: bool = False
    reuse: bool = False
    keep_frames: int = rundir.KEPT_FRAME_STEP  # an accuracy pass keeps every N-th frame losslessly (1: all)


def prepare(model: str, preset: str, schedule: str | Schedule, prompts_file: Path | None, num_prompts: int | None,
            latent_file: Path | None, overrides: dict[str, Any]) -> RunSpec:
    """Steps 1-3: everything cheap that can be wrong is checked before any weights load, the inputs as
    `fsbench doctor` checks them (harness.run.inputs)."""
    parsed = schedule if isinstance(schedule, Schedule) else load_schedule(schedule)
    found = inputs.read(model, preset, prompts_file, num_prompts, latent_file, overrides, first_only=True)
    found.raise_first()
    assert found.settings and found.layers and found.prompts and found.latent  # raise_first refused the unread
    resolved = parsed.resolve(found.settings.steps, found.layers)
    return RunSpec(model, found.settings, resolved, found.prompts, found.latent.tensor, found.latent.as_dict())


def schedule_slug(schedule: ResolvedSchedule) -> str:
    """A folder-safe schedule name: the built-in/file name, or `spec-<hash>` for spec strings (and for names that
    could leave the folder, such as `..`)."""
    if re.fullmatch(r"\w[\w.-]{0,99}", schedule.name):
        return schedule.name
    return "spec-" + hashlib.sha256(schedule.spec.encode()).hexdigest()[:8]


def default_system(model_tag: str, device: torch.device) -> str:
    if device.type == "cuda":
        gpu = re.sub(r"[^a-z0-9]+", "-", torch.cuda.get_device_name(device).lower()).strip("-")
        return f"{gpu}-{model_tag}"
    return f"{device.type}-{model_tag}"


def open_run_dir(run: Path, spec: RunSpec, system: str, device: torch.device) -> None:
    """Step 4: create or reopen the run directory, save the latent once, write the manifest header."""
    sha = dataset.latent_sha256(spec.latent)
    header = {
        "model": spec.model,
        "preset": spec.settings.preset,
        "system": system,
        "device": device_info(device, spec.model),
        "settings": {**spec.settings.as_dict(), "latent_sha256": sha},
        "latent": {"file": rundir.LATENT, **spec.latent_info},
        "schedule": {"name": spec.schedule.name, "spec": spec.schedule.spec, "by_step": spec.schedule.by_step()},
        "prompts": spec.prompts.as_dict(),
        "videos": rundir.VIDEOS,
        "versions": writer.versions(),
        "git_commit": writer.git_commit(),
    }
    writer.open_run(run, cast(rundir.Manifest, header))
    if not (run / rundir.LATENT).is_file():
        files.atomic_write(run / rundir.LATENT, lambda tmp: torch.save(spec.latent, tmp))


def device_info(device: torch.device, model: str) -> dict[str, Any]:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({torch.get_num_threads()} threads)"
    dtype = "bfloat16" if device.type == "cuda" or model not in pipeline.SYNTHETIC else "float32"
    return {"type": device.type, "name": name, "count": 1, "dtype": dtype}


def load_pipeline(spec: RunSpec, device: torch.device) -> Any:
    """Step 5: the diffusers pipeline, with its per-video denoising bar kept short-lived."""
    progress.quiet_libraries()
    with progress.working(f"loading {spec.model}"):
        pipe = pipeline.build(spec.model, spec.settings, device)
    pipe.set_progress_bar_config(leave=False, desc="denoise", unit="step", disable=not progress.shown())
    return pipe


class VideoGenerator:
    """`generate(qsl_index) -> video path relative to the run`: the one function LoadGen's SUT calls.

    Videos are encoded to mp4 next to their final name, renamed into place, checked to decode and recorded with
    `made_with` (harness.run.made_with). With `keep_frames` N (an accuracy pass: never inside a timed query), every
    N-th frame is also kept losslessly in RUN/frames/, the frames fidelity compares. With `reuse`, a video that
    exists, was made with the same `made_with` and is intact is returned as is: a resumed accuracy pass never
    regenerates finished work, and never trusts a name.
    """

    def __init__(self, pipe: Any, spec: RunSpec, run: Path, router: SelfAttentionRouter | None, reuse: bool,
                 profiler: Profiler | None = None, made_with: str = "", keep_frames: int | None = None):
        self.pipe, self.spec, self.run, self.router, self.reuse = pipe, spec, run, router, reuse
        self.keep_frames = keep_frames
        self.made_with = made_with or spec.made_with("auto", None)
        self.profiler = profiler or NullProfiler()
        self.latent = spec.latent.to(pipe.device)
        self.generated = self.reused = 0

    def frames(self, index: int) -> Any:
        """The (F, H, W, 3) float frames in [0, 1] of prompt `index`."""
        s = self.spec.settings
        if self.router is not None:
            self.router.begin_video(index)
        return self.pipe(
            prompt=self.spec.prompts.texts[index], negative_prompt=s.negative_prompt, height=s.height, width=s.width,
            num_frames=s.num_frames, num_inference_steps=s.steps, guidance_scale=s.guidance_scale,
            guidance_scale_2=s.guidance_scale_2, latents=self.latent.clone(), output_type="np",
            callback_on_step_end=self.router.on_step_end if self.router is not None else None,
        ).frames[0]

    def path(self, index: int) -> Path:
        return rundir.videos_dir(self.run) / rundir.video_name(self.spec.prompts.texts[index])

    def can_reuse(self, index: int) -> bool:
        """An intact video of these settings, with its kept frames where this pass keeps them (a video a
        performance run made has none: it is made again, not scored on its mp4)."""
        kept = rundir.kept_frames(self.run, self.spec.prompts.texts[index])
        return self.reuse and artifacts.reusable(self.path(index), self.made_with) and (
            not self.keep_frames or kept.is_file())

    def warm_up(self) -> dict[str, Any]:
        """One denoising step of prompt 0 per attention format of the schedule, before LoadGen starts (the
        MLPerf SUT's untimed warm-up): compiled blocks (`--compile`) build their graph of every format here, not
        inside a timed query. No statistics are captured and nothing is written; returns what ran."""
        router, s = self.router, self.spec.settings
        if router is None:
            raise ValueError("a warm-up routes attention: this generator has no router")
        schedule, capture = router.schedule, router.capture
        start = time.perf_counter()
        router.capture = None
        try:
            for fmt in schedule.formats:
                router.schedule = ResolvedSchedule(f"warm-up {fmt}", fmt, ((fmt,) * len(schedule.table[0]),))
                router.begin_video(-1)
                self.pipe(prompt=self.spec.prompts.texts[0], negative_prompt=s.negative_prompt, height=s.height,
                          width=s.width, num_frames=s.num_frames, num_inference_steps=1,
                          guidance_scale=s.guidance_scale, guidance_scale_2=s.guidance_scale_2,
                          latents=self.latent.clone(), output_type="latent", callback_on_step_end=router.on_step_end)
        finally:
            router.schedule, router.capture = schedule, capture
            router.begin_video(-1)
        return {"formats": list(schedule.formats), "steps_per_format": 1, "seconds": time.perf_counter() - start}

    def __call__(self, index: int) -> str:
        path = self.path(index)
        relative = path.relative_to(self.run)
        if self.can_reuse(index):
            self.reused += 1
            return str(relative)
        with self.profiler.video(index):
            frames = self.frames(index)
            with self.profiler.region("video_encode"):
                s = self.spec.settings
                expected = (s.num_frames, s.height, s.width)
                kept = rundir.kept_frames(self.run, self.spec.prompts.texts[index])
                if self.keep_frames:
                    kept.unlink(missing_ok=True)  # never the frames of an earlier video beside this one
                files.atomic_write(path, lambda tmp: artifacts.encode(frames, tmp, s.fps, expected))
                try:
                    if self.keep_frames:
                        artifacts.keep(frames[::self.keep_frames], kept, s.fps)
                    artifacts.record(path, self.made_with, expected,
                                     self.router.kernels_used if self.router is not None else {})
                except BaseException:  # a video without its record is one no resume trusts: it goes with the error
                    files.remove(path)
                    raise
        if self.router is not None and self.router.capture is not None:
            self.router.capture.flush()
        self.generated += 1
        return str(relative)


def run(jobs: Sequence[Job], on_summary: Callable[[Job, dict[str, Any]], None] | None = None
        ) -> list[dict[str, Any]] | None:
    """Steps 4-7 of every job in turn on the processes of their layout, the pipeline loaded once (a sweep's
    passes share it): returns the summaries where this process leads the run, None on a torchrun rank above 0.

    `on_summary(job, summary)` is called where the run is led, as each job finishes."""
    layout = jobs[0].layout
    if teams.leads_job():
        for job in jobs:
            open_run_dir(job.run, job.spec, job.system, torch.device(layout.device))
            logs.attach(job.run)
    return teams.launch(layout, jobs[0].opts.scenario, functools.partial(_passes, tuple(jobs), on_summary))


def _passes(jobs: tuple[Job, ...], on_summary: Callable[[Job, dict[str, Any]], None] | None,
            team: teams.Team) -> list[dict[str, Any]] | None:
    """One process's part of `run`: load and split the pipeline, then lead (rank 0) or follow every job."""
    pipe = load_pipeline(jobs[0].spec, team.device)
    team.parallelize(pipe)
    record = options.apply(pipe, jobs[0].speed)
    if not team.leads:
        pipe.set_progress_bar_config(disable=True)
    summaries = []
    with options.cudnn_first():
        for job in jobs:
            if not team.leads:
                _follow(pipe, job, team, record)
                continue
            with logs.scope(job.run):  # this job's lines in its run's log only
                summary = run_scenario(pipe, job, team, speed=record)
            summaries.append(summary)
            if on_summary is not None:
                on_summary(job, summary)
    return summaries if team.leads else None


def _follow(pipe: Any, job: Job, team: teams.Team, speed: dict[str, Any]) -> None:
    """A rank above 0: compute what rank 0 asks of this job until it is done."""
    router = team.router(job.spec.schedule, impl=job.impl, capture=None, bf16_impl=job.speed.bf16_impl)
    router.install(pipe)
    try:
        team.follow(VideoGenerator(pipe, job.spec, job.run, router, reuse=job.reuse and job.opts.mode == "accuracy",
                                   made_with=job.spec.made_with(job.impl, speed),
                                   keep_frames=job.keep_frames if job.opts.mode == "accuracy" else None))
    finally:
        router.uninstall()


def run_scenario(pipe: Any, job: Job, team: teams.Team, speed: dict[str, Any] | None = None) -> dict[str, Any]:
    """Steps 6-7 on the leading process: route attention, run LoadGen with the team serving its samples, merge
    the summary into the manifest; returns the summary. `speed`: the record of `harness.model.options.apply`,
    kept in the summary."""
    spec, run, opts = job.spec, job.run, job.opts
    capture = None
    capture_dir = rundir.capture_dir(run, opts.scenario, opts.mode)
    if job.capture_qkv is not None:
        capture = Capture(capture_dir, save_qkv=job.capture_qkv)
        files.remove(capture_dir / "calls.jsonl")
    router = team.router(spec.schedule, impl=job.impl, capture=capture, bf16_impl=job.speed.bf16_impl)
    router.install(pipe)
    profiler = Profiler(pipe.device) if job.profile else None
    # Only an accuracy pass asked to may reuse finished videos, and never under --capture, which must see every call.
    reuse = job.reuse and opts.mode == "accuracy" and capture is None
    generator = VideoGenerator(pipe, spec, run, router, reuse=reuse, profiler=profiler,
                               made_with=spec.made_with(job.impl, speed),
                               keep_frames=job.keep_frames if opts.mode == "accuracy" else None)
    warmed = generator.warm_up() if job.warm_up else None
    if profiler is not None:
        profiler.install(pipe, router)
    total = len(spec.prompts.texts)
    expected = total if opts.mode == "accuracy" else opts.count
    log_dir = rundir.loadgen_dir(run, job.system, opts.scenario, opts.mode, audit=opts.audit)
    try:
        with team.serve(generator) as (generate, concurrency), \
                progress.bar(expected, f"{opts.scenario} {opts.mode} [{spec.schedule.name}]", "video") as bar:
            summary = loadgen.run_test(generate, total, opts, log_dir, on_sample=bar.update, concurrency=concurrency)
    finally:
        if profiler is not None:
            profiler.uninstall()
        router.uninstall()
    summary["log_dir"] = str(log_dir.relative_to(run))
    summary["overrides"] = opts.overrides()
    # Reused videos ran no kernel in this process: their sidecars say which kernels made them.
    made = artifacts.kernels_of(generator.path(i) for i in range(total)) if opts.mode == "accuracy" else {}
    summary["attention_kernels"] = dict(sorted({**made, **router.kernels_used}.items()))
    if generator.profiler.peak.bytes is not None:
        summary["peak_gpu_memory_bytes"] = generator.profiler.peak.bytes
    if router.kernel_fallbacks:
        summary["attention_kernel_fallbacks"] = dict(sorted(router.kernel_fallbacks.items()))
    if opts.mode == "accuracy":
        summary.update(samples=total, videos_generated=generator.generated, videos_reused=generator.reused,
                       reuse=generator.reuse, made_with=generator.made_with,
                       accuracy_log=str((log_dir / "mlperf_log_accuracy.json").relative_to(run)))
    if capture is not None:
        capture_summary = capture.finish()
        summary["capture"] = {"dir": str(capture_dir.relative_to(run)), "calls": capture_summary["calls"]}
    if speed is not None:
        summary["speed"] = speed
    if warmed is not None:
        summary["warm_up"] = warmed
    summary.update(team.record())
    if profiler is not None:
        summary["profile"] = profile_report.write(run, profiler, summary)
    writer.record_result(run, opts.scenario, opts.audit or opts.mode, cast(rundir.Summary, summary))
    logging.getLogger("fsbench").info("%s (%s)", describe(summary), spec.schedule.name)
    return summary


def describe(summary: dict[str, Any]) -> str:
    """A one-line human summary of a LoadGen result."""
    head = f"{summary.get('scenario')} {summary.get('mode')}"
    if "validity" not in summary:
        return (f"{head}: {summary.get('samples')} videos ({summary.get('videos_generated')} generated, "
                f"{summary.get('videos_reused')} reused), accuracy log {summary.get('accuracy_log')}")
    # Offline issues every sample in one query: its latencies are not a figure of merit, its throughput is
    latency = ("" if summary.get("scenario") == "Offline" else
               f"p90 latency {summary['latency_p90_ns'] / 1e9:.3f} s  ")
    text = (f"{head}: {summary['validity']}  {latency}"
            f"samples/s {summary['samples_per_second']:.4g}  ({summary.get('samples')} samples)")
    if summary["invalid_reasons"]:
        text += "\n  INVALID because: " + "; ".join(summary["invalid_reasons"])
    return text

