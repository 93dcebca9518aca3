"""One benchmark run, as numbered steps: settings -> schedule -> prompts + latent -> run directory ->
pipeline + attention routing -> LoadGen -> writer. `fsbench run` and `fsbench sweep` call `prepare`,
`load_pipeline` and `run_scenario`; the device script reuses `VideoGenerator`."""
from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from tqdm.auto import tqdm

from fsbench import rundir
from fsbench.harness.mlperf import loadgen
from fsbench.harness.model import pipeline
from fsbench.harness.run import dataset, logs, made_with as artifacts, writer
from fsbench.harness.precision.router import Capture, SelfAttentionRouter
from fsbench.harness.run.presets import Settings, build_settings
from fsbench.harness.measure.profile import NullProfiler, Profiler
from fsbench.harness.precision.schedule import ResolvedSchedule, Schedule
from fsbench.harness.precision.schedule import load as load_schedule
from fsbench.kernels.registry import AUTO


class Team(Protocol):
    """Rank 0's side of a run on several processes (`harness.parallel.team.Team` is the one implementation): it
    supplies the attention router, serves LoadGen's samples with the other ranks and describes the layout."""

    def router(self, schedule: ResolvedSchedule, *, impl: str, capture: Capture | None,
               bf16_impl: str = AUTO) -> SelfAttentionRouter: ...

    def serve(self, generator: VideoGenerator) -> contextlib.AbstractContextManager[tuple[Callable[[int], str], int]]:
        ...

    def describe(self) -> dict[str, Any]: ...


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


def prepare(model: str, preset: str, schedule: str | Schedule, prompts_file: Path | None, num_prompts: int | None,
            latent_file: Path | None, overrides: dict[str, Any]) -> RunSpec:
    """Steps 1-3: everything cheap that can be wrong is checked before any weights load."""
    settings = build_settings(preset, model, **overrides)
    parsed = schedule if isinstance(schedule, Schedule) else load_schedule(schedule)
    resolved = parsed.resolve(settings.steps, pipeline.num_layers(model))
    prompts = dataset.load_prompts(prompts_file, model, num_prompts)
    latent = dataset.load_latent(settings, latent_file)
    return RunSpec(model, settings, resolved, prompts, latent.tensor, latent.as_dict())


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
    writer.open_run(run, header)
    if not (run / rundir.LATENT).is_file():
        writer.atomic_write(run / rundir.LATENT, lambda tmp: torch.save(spec.latent, tmp))


def device_info(device: torch.device, model: str) -> dict[str, Any]:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({torch.get_num_threads()} threads)"
    dtype = "bfloat16" if device.type == "cuda" or model not in pipeline.SYNTHETIC else "float32"
    return {"type": device.type, "name": name, "count": 1, "dtype": dtype}


def load_pipeline(spec: RunSpec, device: torch.device) -> Any:
    """Step 5: the diffusers pipeline, with its per-video denoising bar kept short-lived."""
    pipe = pipeline.build(spec.model, spec.settings, device)
    pipe.set_progress_bar_config(leave=False, desc="denoise", unit="step", disable=logs.quiet())
    return pipe


class VideoGenerator:
    """`generate(qsl_index) -> video path relative to the run`: the one function LoadGen's SUT calls.

    Videos are encoded to mp4 next to their final name, renamed into place, checked to decode and recorded with
    `made_with` (harness.run.made_with). With `reuse`, a video that exists, was made with the same `made_with` and is
    intact is returned as is: a resumed accuracy pass never regenerates finished work, and never trusts a name.
    """

    def __init__(self, pipe: Any, spec: RunSpec, run: Path, router: SelfAttentionRouter | None, reuse: bool,
                 profiler: Profiler | None = None, made_with: str = ""):
        self.pipe, self.spec, self.run, self.router, self.reuse = pipe, spec, run, router, reuse
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
        return self.reuse and artifacts.reusable(self.path(index), self.made_with)

    def warm_up(self) -> dict[str, Any]:
        """One denoising step of prompt 0 per attention format of the schedule, before LoadGen starts (the
        MLPerf SUT's untimed warm-up): compiled blocks (`--compile`) build their graph of every format here, not
        inside a timed query. No statistics are captured and nothing is written; returns what ran."""
        router, s = self.router, self.spec.settings
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
        from diffusers.utils import export_to_video

        with self.profiler.video(index):
            frames = self.frames(index)
            with self.profiler.region("video_encode"):
                writer.atomic_write(path, lambda tmp: export_to_video(list(frames), str(tmp),
                                                                       fps=self.spec.settings.fps))
                s = self.spec.settings
                artifacts.record(path, self.made_with, (s.num_frames, s.height, s.width),
                                 self.router.kernels_used if self.router is not None else {})
        if self.router is not None and self.router.capture is not None:
            self.router.capture.flush()
        self.generated += 1
        return str(relative)


def run_scenario(pipe: Any, spec: RunSpec, run: Path, system: str, opts: loadgen.LoadgenOptions, *,
                 impl: str = "auto", capture_qkv: int | None = None, profile: bool = False,
                 speed: dict[str, Any] | None = None, team: Team | None = None,
                 warm_up: bool = False) -> dict[str, Any]:
    """Steps 6-7: route attention, run LoadGen, merge the summary into the manifest; returns the summary.

    `capture_qkv` None: no capture; N >= 0: record every call's statistics and keep q, k, v of the top N.
    `profile`: time every phase of every video into RUN/profile.{json,md}; `speed`: the record of
    `harness.model.options.apply`, kept in the summary; `team`: rank 0 of a `fsbench run --gpus N` (harness.parallel.team),
    which supplies the router and serves LoadGen's samples with the other ranks; `warm_up`: one step per
    attention format before LoadGen starts (`VideoGenerator.warm_up`; one process only).
    """
    capture = None
    if capture_qkv is not None:
        capture = Capture(rundir.capture_dir(run, opts.scenario, opts.mode), save_qkv=capture_qkv)
        (capture.out_dir / "calls.jsonl").unlink(missing_ok=True)
    router = (SelfAttentionRouter if team is None else team.router)(
        spec.schedule, impl=impl, capture=capture, bf16_impl=(speed or {}).get("bf16_impl", AUTO))
    router.install(pipe)
    profiler = Profiler(pipe.device) if profile else None
    # A resumed accuracy pass reuses finished videos, except under --capture, which must see every call.
    generator = VideoGenerator(pipe, spec, run, router, reuse=opts.mode == "accuracy" and capture is None,
                               profiler=profiler, made_with=spec.made_with(impl, speed))
    warmed = generator.warm_up() if warm_up and team is None else None
    if profiler is not None:
        profiler.install(pipe, router)
    total = len(spec.prompts.texts)
    expected = total if opts.mode == "accuracy" else opts.count
    log_dir = rundir.loadgen_dir(run, system, opts.scenario, opts.mode, audit=opts.audit)
    try:
        serving = contextlib.nullcontext((generator, 1)) if team is None else team.serve(generator)
        with serving as (generate, concurrency), \
                tqdm(total=expected, desc=f"{opts.scenario} {opts.mode} [{spec.schedule.name}]", unit="video",
                     disable=logs.quiet()) as bar:
            summary = loadgen.run_test(generate, total, opts, log_dir, on_sample=bar.update,
                                              concurrency=concurrency)
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
                       accuracy_log=str((log_dir / "mlperf_log_accuracy.json").relative_to(run)))
    if capture is not None:
        capture_summary = capture.finish()
        summary["capture"] = {"dir": str(capture.out_dir.relative_to(run)), "calls": capture_summary["calls"]}
    if speed is not None:
        summary["speed"] = speed
    if warmed is not None:
        summary["warm_up"] = warmed
    if team is not None:
        summary["parallel"] = team.describe()
    if profiler is not None:
        summary["profile"] = profiler.write(run, summary)
    writer.record_result(run, opts.scenario, opts.audit or opts.mode, summary)
    logging.getLogger("fsbench").info("%s (%s)", describe(summary), spec.schedule.name)
    return summary


def describe(summary: dict[str, Any]) -> str:
    """A one-line human summary of a LoadGen result."""
    head = f"{summary.get('scenario')} {summary.get('mode')}"
    if "validity" not in summary:
        return (f"{head}: {summary.get('samples')} videos ({summary.get('videos_generated')} generated, "
                f"{summary.get('videos_reused')} reused), accuracy log {summary.get('accuracy_log')}")
    p90 = summary["latency_p90_ns"]
    text = (f"{head}: {summary['validity']}  p90 latency {p90 / 1e9:.3f} s  "
            f"samples/s {summary['samples_per_second']:.4g}  ({summary.get('samples')} samples)")
    if summary["invalid_reasons"]:
        text += "\n  INVALID because: " + "; ".join(summary["invalid_reasons"])
    return text

