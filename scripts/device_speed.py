"""On one H200: the parts of one 720p SingleStream video, measured in one command, and their sum.

A full 20-step 720x1280x81 video takes 8+ minutes in bf16 (40 expert forwards of ~12 s), so no 10-minute
command holds one per configuration. `measure` times every part once the pipeline is warm:

1. text encoding (UMT5-XXL, 512 tokens): the positive prompt alone (the negative prompt's embedding is
   cached, `harness.model.options`), and both prompts uncached;
2. one expert forward per (GEMM kind, attention format), `--repeats` times after a warm-up, with CUDA events
   and the `harness.measure.profile` split (self-attention core, cross-attention core, GEMMs, rest; with --compile
   only the self-attention core is split out). Both experts have the same shapes, so the high-noise expert
   stands for both; the active `kernels.attention` impl of every format is recorded and a format that
   would fall back to the emulator (far too slow at 75600 tokens) is skipped; the SM clock, power and
   power-cap share over the timed forwards come from nvidia-smi samples (`harness.measure.clocks`);
3. the per-step overhead outside the forwards (CFG combine + UniPC step);
4. the FP8 GEMM check (one 5120x5120 layer against BF16) and the output of every configuration against the
   BF16-GEMM, BF16-attention forward (a14b-synthetic's self-consistency);
5. VAE decode of one 720p latent in fp32 / bf16, NCDHW / channels-last-3d, and bf16 tiled;
6. postprocess (frames to host) and mp4 encoding of the decoded video;
7. LoadGen's own overhead per SingleStream query (a generator of fixed duration).

The short parts (1, 3, 5-7) run first, then the forwards. Everything goes to OUT/device_speed.json after each
measurement (atomically), so a run cut short keeps what it measured. `assemble` (runs anywhere) sums the
parts into the Table 6 latency columns:
  total = text(positive) + sum over 20 steps of [2 x forward(GEMM, format of the step) + step overhead]
          + VAE decode + postprocess + mp4 encode + LoadGen overhead,
once with the slowest forward of the repeats ("max", the paper's slowest-run convention) and once with the
median.
"""
from __future__ import annotations

import functools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click
import torch

from fsbench.harness.measure import clocks as gpu_clock
from fsbench.harness.measure.profile import Clock, Profiler
from fsbench.harness.mlperf import loadgen as loadgen_driver
from fsbench.harness.model import fp8_linear, options as speed, pipeline
from fsbench.harness.precision.router import SelfAttentionCall, SelfAttentionRouter
from fsbench.harness.precision.schedule import load as load_schedule
from fsbench.harness.run import dataset, orchestrator, writer
from fsbench.harness.run.presets import build_settings

SCHEDULES = ("bf16", "mxfp8", "mxfp6", "mxfp4", "hybrid")
ASSEMBLED_STEPS = 20  # the preset's denoising steps, the count `assemble` sums
JSON_NAME = "device_speed.json"
PROMPT = "a motorcycle rider speeding along a coastal highway at sunset"  # the paper times a motorcycle prompt


class Report:
    """The JSON under construction, saved after every measurement; `fits` keeps the command in its budget."""

    def __init__(self, out: Path, budget_s: float, data: dict[str, Any]):
        self.path, self.budget_s, self.data = out / JSON_NAME, budget_s, data
        self.began = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.began

    def fits(self, what: str, estimate_s: float) -> bool:
        if self.elapsed() + estimate_s <= self.budget_s:
            return True
        self.data["skipped"].append(f"{what}: about {estimate_s:.0f} s, not enough budget left")
        self.save()
        return False

    def save(self) -> None:
        self.data["elapsed_s"] = round(self.elapsed(), 1)
        if torch.cuda.is_available():
            self.data["peak_memory_gb"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        writer.atomic_write_text(self.path, json.dumps(self.data, indent=2) + "\n")
        click.echo(f"[{self.data['elapsed_s']:7.1f}s] saved {self.path}", err=True)


def _seconds(clock: Clock, fn: Any) -> tuple[float, Any]:
    start = clock.mark()
    out = fn()
    return clock.seconds(start, clock.mark()), out


def measure_text(pipe: Any, settings: Any, clock: Clock) -> dict[str, float]:
    encode = pipe.encode_prompt  # the plain method: nothing cached yet
    kw = dict(max_sequence_length=512, device=pipe.device)
    _seconds(clock, lambda: encode(PROMPT, settings.negative_prompt, True, **kw))
    both, _ = _seconds(clock, lambda: encode(PROMPT, settings.negative_prompt, True, **kw))
    positive, _ = _seconds(clock, lambda: encode(PROMPT, None, False, **kw))
    return {"both_prompts_s": both, "positive_only_s": positive}


def forward_inputs(pipe: Any, settings: Any) -> dict[str, Any]:
    """One expert forward's inputs: the fixed first-step latent at timestep 999, both prompts' embeddings."""
    dtype, device = pipe.transformer.dtype, pipe.device
    with torch.no_grad():
        cond, uncond = pipe.encode_prompt(PROMPT, settings.negative_prompt, True, max_sequence_length=512,
                                          device=device)
    latent = dataset.fixed_latent(settings).to(device, dtype)
    return {"cond": cond.to(dtype), "uncond": uncond.to(dtype),
            "common": {"hidden_states": latent, "timestep": torch.tensor([999], device=device),
                       "return_dict": False}}


def block_inputs(pipe: Any, inputs: dict[str, Any], clock: Clock) -> tuple[tuple, float]:
    """Block 0's inputs, from one eager BF16 forward (run before any compile): every configuration then warms
    up on one block instead of 40. Returns them with the time of that forward (model load warm-up)."""
    kept: list[tuple] = []
    handle = pipe.transformer.blocks[0].register_forward_pre_hook(lambda module, args: kept.append(args))
    try:
        with torch.no_grad():
            seconds, _ = _seconds(clock, lambda: pipe.transformer(encoder_hidden_states=inputs["cond"],
                                                                  **inputs["common"]))
    finally:
        handle.remove()
    return kept[0], seconds


def measure_forward(pipe: Any, fmt: str, impl: str, inputs: dict[str, Any], block_args: tuple,
                    repeats: int) -> tuple[dict[str, Any], torch.Tensor]:
    """Warm-up on block 0 (twice: compilation, autotuning), then `repeats` timed forwards of the
    high-noise expert with every attn1 in `fmt`."""
    router = SelfAttentionRouter(load_schedule(fmt).resolve(1, len(pipe.transformer.blocks)), impl=impl)
    router.install(pipe)
    profiler = Profiler(pipe.device)
    profiler.install(pipe, router)
    clock = profiler.clock
    try:
        with torch.no_grad():
            router.begin_video(-1)
            warm, _ = _seconds(clock, lambda: [pipe.transformer.blocks[0](*block_args) for _ in range(2)])
            output = None
            _synchronize(pipe.device)
            began = time.time()  # wall clock, to match the GPU clock samples (harness.measure.clocks)
            for r in range(repeats):
                context = inputs["cond"] if r % 2 == 0 else inputs["uncond"]
                with profiler.video(r):
                    router.begin_video(r)
                    out = pipe.transformer(encoder_hidden_states=context, **inputs["common"])[0]
                    profiler.end_denoising()
                output = out if output is None else output
            _synchronize(pipe.device)
            window = (began, time.time())
    finally:
        profiler.uninstall()
        router.uninstall()
    rows = [v["steps"][0] for v in profiler.videos]
    keys = [k for k in rows[0] if k.endswith("_s")]
    record = {"warmup_s": warm, "forward_s": [r["total_s"] for r in rows],
              **{f"median_{k}": statistics.median(r[k] for r in rows) for k in keys if k != "total_s"}}
    record["median_forward_s"] = statistics.median(record["forward_s"])
    record["max_forward_s"] = max(record["forward_s"])
    record["self_attention_share"] = record["median_self_attention_s"] / record["median_forward_s"]
    record["window"] = window
    return record, output


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def compare(test: torch.Tensor, reference: torch.Tensor) -> dict[str, float]:
    t, r = test.float().flatten(), reference.float().flatten()
    return {"rel_err": float((t - r).norm() / r.norm()),
            "cosine": float(torch.nn.functional.cosine_similarity(t, r, dim=0))}


def fp8_layer_check(pipe: Any, tokens: int, clock: Clock) -> dict[str, Any]:
    """One block linear (A14B: 5120x5120) at the video's tokens: FP8 against BF16 (error, time)."""
    linear = pipe.transformer.blocks[0].attn1.to_q
    x = torch.randn(tokens, linear.in_features, device=pipe.device, dtype=linear.weight.dtype)
    fp8 = fp8_linear.Fp8Linear(linear)
    with torch.no_grad():
        reference, test = linear(x), fp8(x)
        times = {}
        for name, layer in (("bf16", linear), ("fp8", fp8)):
            layer(x)
            times[name] = min(_seconds(clock, lambda layer=layer: layer(x))[0] for _ in range(5))
    flops = 2 * x.shape[0] * linear.in_features * linear.out_features
    return {**compare(test, reference), **{f"{k}_ms": v * 1e3 for k, v in times.items()},
            **{f"{k}_tflops": flops / v / 1e12 for k, v in times.items()}}


def measure_step_overhead(pipe: Any, latent: torch.Tensor, clock: Clock) -> float:
    """CFG combine and one UniPC step on the 720p latent: the per-step work outside the two forwards."""
    pipe.scheduler.set_timesteps(20, device=pipe.device)
    noise = torch.randn_like(latent)
    t = pipe.scheduler.timesteps[0]

    def step() -> Any:
        pred = noise + 4.0 * (latent.to(noise.dtype) - noise)
        return pipe.scheduler.step(pred, t, latent, return_dict=False)[0]

    step()
    pipe.scheduler.set_timesteps(20, device=pipe.device)
    seconds, _ = _seconds(clock, step)
    return seconds


def measure_vae(pipe: Any, settings: Any, clock: Clock, report: Report) -> torch.Tensor | None:
    """Decode one random latent per variant; returns the fp32 decode for the encode measurement."""
    vae = pipe.vae
    shape = dataset.fixed_latent(settings).shape
    z = torch.randn(shape, generator=torch.Generator().manual_seed(1)).to(pipe.device)
    reference = None
    for name, dtype, layout in (("fp32", torch.float32, torch.contiguous_format),
                                ("fp32-channels-last", torch.float32, torch.channels_last_3d),
                                ("bf16", torch.bfloat16, torch.contiguous_format),
                                ("bf16-channels-last", torch.bfloat16, torch.channels_last_3d),
                                ("bf16-tiled", torch.bfloat16, torch.contiguous_format)):
        estimate = 3 * report.data["vae"].get("fp32", {}).get("decode_s", 8.0)
        if not report.fits(f"vae {name}", estimate):
            continue
        _to(vae, dtype, layout)
        if name.endswith("tiled"):
            vae.enable_tiling()
        with torch.no_grad():
            latent = z.to(dtype).contiguous(memory_format=layout)
            vae.decode(latent, return_dict=False)
            seconds, video = _seconds(clock, lambda latent=latent: vae.decode(latent, return_dict=False)[0])
        row: dict[str, Any] = {"decode_s": seconds}
        if reference is None:
            reference = video.float()
        else:
            row.update(psnr_vs_fp32_db=_psnr(video.float(), reference))
        report.data["vae"][name] = row
        del video
        vae.disable_tiling()
        report.save()
    _to(vae, torch.float32, torch.contiguous_format)
    return reference


def _to(module: torch.nn.Module, dtype: torch.dtype, layout: torch.memory_format) -> None:
    """dtype, and channels-last for the convolution weights (3-D: channels_last_3d, 2-D: channels_last)."""
    module.to(dtype)
    for tensor in (*module.parameters(), *module.buffers()):
        if tensor.dim() == 5:
            tensor.data = tensor.data.contiguous(memory_format=layout)
        elif tensor.dim() == 4:
            tensor.data = tensor.data.contiguous(memory_format=torch.channels_last
                                                 if layout == torch.channels_last_3d else layout)


def _psnr(test: torch.Tensor, reference: torch.Tensor) -> float:
    """PSNR (dB) of the uint8 frames the pipeline would write ([-1, 1] -> [0, 255], truncated as diffusers)."""
    a, b = (((x / 2 + 0.5).clamp(0, 1) * 255).to(torch.uint8).float() for x in (test, reference))
    mse = float(((a - b) ** 2).mean())
    return float("inf") if mse == 0 else 10 * torch.log10(torch.tensor(255.0**2 / mse)).item()


def measure_encode(pipe: Any, video: torch.Tensor, fps: int) -> dict[str, float]:
    """What VideoGenerator does after the decode: postprocess to numpy frames, then export_to_video."""
    from diffusers.utils import export_to_video

    if video.is_cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    frames = pipe.video_processor.postprocess_video(video, output_type="np")[0]
    post = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        export_to_video(list(frames), str(Path(tmp) / "video.mp4"), fps=fps)
        encode = time.perf_counter() - start
        size = (Path(tmp) / "video.mp4").stat().st_size
    return {"postprocess_s": post, "video_encode_s": encode, "mp4_bytes": size}


def measure_loadgen(duration_s: float, queries: int) -> dict[str, float]:
    """SingleStream with a generator that sleeps `duration_s`: LoadGen latency minus that is its overhead."""
    def generate(index: int) -> str:
        time.sleep(duration_s)
        return "videos/x-0.mp4"

    opts = loadgen_driver.LoadgenOptions("SingleStream", "performance", count=queries, time_s=0,
                                         target_latency_ms=duration_s * 1e3)
    with tempfile.TemporaryDirectory() as tmp:
        summary = loadgen_driver.run_test(generate, 1, opts, Path(tmp) / "run_1")
    mean = summary["latency_mean_ns"] / 1e9
    return {"generator_s": duration_s, "latency_mean_s": mean, "overhead_s": mean - duration_s,
            "queries": queries}


@click.group()
def main() -> None:
    """Measure the parts of one 720p video on a GPU (`measure`) and sum them into Table 6 (`assemble`)."""


@main.command()
@click.option("--out", type=click.Path(path_type=Path), required=True)
@click.option("--model", default="a14b-synthetic", show_default=True)
@click.option("--height", type=int, default=720, show_default=True)
@click.option("--width", type=int, default=1280, show_default=True)
@click.option("--frames", type=int, default=81, show_default=True)
@click.option("--formats", default="bf16,mxfp8,mxfp6,mxfp4", show_default=True)
@click.option("--gemms", default="bf16,fp8", show_default=True, help="GEMM kinds, in this order (fp8 is final).")
@click.option("--compile", "compile_blocks", is_flag=True, help="torch.compile the blocks (harness.model.options).")
@click.option("--parts", default="text,forwards,vae,encode,loadgen", show_default=True)
@click.option("--repeats", type=int, default=3, show_default=True, help="Timed forwards per configuration.")
@click.option("--impl", default="auto", show_default=True, help="kernels.attention impl for the MX formats.")
@click.option("--budget-s", type=float, default=540.0, show_default=True)
def measure(out: Path, model: str, height: int, width: int, frames: int, formats: str, gemms: str,
            compile_blocks: bool, parts: str, repeats: int, impl: str, budget_s: float) -> None:
    """Time every part of one video; OUT/device_speed.json after every measurement."""
    from fsbench.kernels import resolve_impl

    wanted = set(parts.split(","))
    device = pipeline.default_device()
    settings = build_settings("mlperf", model, steps=20, height=height, width=width, num_frames=frames)
    report = Report(out, budget_s, {
        "command": " ".join(sys.argv), "model": model, "device": orchestrator.device_info(device, model),
        "versions": writer.versions(), "git_commit": writer.git_commit(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "shape": {"height": height, "width": width, "num_frames": frames, "tokens": settings.tokens},
        "compile": compile_blocks, "repeats": repeats, "impl": {}, "forwards": {}, "vae": {}, "skipped": []})
    clock = Clock(device)
    with speed.cudnn_first():
        start = time.perf_counter()
        pipe = pipeline.build(model, settings, device)
        pipe.set_progress_bar_config(disable=True)
        report.data["build_s"] = time.perf_counter() - start
        report.data["sdpa_priority"] = speed.sdpa_priority_names(device)
        fmts = formats.split(",")
        for fmt in fmts:
            report.data["impl"][fmt] = resolve_impl(fmt, "auto" if fmt == "bf16" else impl, device,
                                                    pipe.transformer.config.attention_head_dim)
        report.save()
        if "text" in wanted:
            report.data["text_encode"] = measure_text(pipe, settings, clock)
            report.save()
        inputs = forward_inputs(pipe, settings)
        latent = inputs["common"]["hidden_states"]
        report.data["step_overhead_s"] = measure_step_overhead(pipe, latent.float(), clock)
        # the short parts first (about a minute), so a long forward sweep cannot crowd them out
        decoded = measure_vae(pipe, settings, clock, report) if "vae" in wanted else None
        if "encode" in wanted and decoded is not None and report.fits("mp4 encode", 30):
            report.data["encode"] = measure_encode(pipe, decoded, settings.fps)
            report.save()
        del decoded
        if "loadgen" in wanted and report.fits("loadgen overhead", 10):
            report.data["loadgen"] = measure_loadgen(0.5, 8)
            report.save()
        if "forwards" in wanted:
            block_args, report.data["first_forward_s"] = block_inputs(pipe, inputs, clock)
            report.save()
            if compile_blocks:
                for expert in (pipe.transformer, pipe.transformer_2):
                    expert.compile_repeated_blocks(fullgraph=False, dynamic=False)
            with gpu_clock.sampling() as samples:
                _forwards(pipe, report, fmts, gemms.split(","), impl, inputs, block_args, repeats, settings.tokens,
                          clock)
            for rows in report.data["forwards"].values():  # the clock each configuration's timed forwards ran at
                for row in rows.values():
                    row["gpu_clock"] = gpu_clock.summarize(samples, *row.pop("window"))
            report.save()
    click.echo(json.dumps({k: report.data.get(k) for k in ("impl", "skipped", "elapsed_s")}, indent=1))


def _forwards(pipe: Any, report: Report, fmts: list[str], gemms: list[str], impl: str, inputs: dict[str, Any],
              block_args: tuple, repeats: int, tokens: int, clock: Clock) -> None:
    reference = None
    for gemm in gemms:
        if gemm == "fp8":
            report.data["fp8_layer_check"] = fp8_layer_check(pipe, tokens, clock)
            report.data["fp8"] = fp8_linear.convert([pipe.transformer, pipe.transformer_2])
            report.save()
        rows = report.data["forwards"].setdefault(gemm, {})
        for i, fmt in enumerate(fmts):
            if fmt != "bf16" and impl == "auto" and report.data["impl"][fmt] == "emulate":
                report.data["skipped"].append(f"{gemm}/{fmt}: kernels.attention would run the emulator")
                report.save()
                continue
            base = rows.get("bf16", {}).get("median_forward_s", report.data["first_forward_s"])
            # the first format of a GEMM kind warms up compilation: the blocks (--compile) or the FP8 quantizer
            warmup = (150 if report.data["compile"] else 60 if gemm == "fp8" else 5) if i == 0 else 5
            if not report.fits(f"forward {gemm}/{fmt}", repeats * base + warmup):
                continue
            try:
                rows[fmt], output = measure_forward(pipe, fmt, impl, inputs, block_args, repeats)
            except (RuntimeError, ValueError, ImportError) as exc:  # e.g. a kernel that does not build here
                report.data["skipped"].append(f"{gemm}/{fmt}: {type(exc).__name__}: {exc}")
                report.save()
                continue
            if reference is None and gemm == "bf16" and fmt == "bf16":
                reference = output
            if reference is not None:
                rows[fmt]["vs_bf16_gemm_bf16_attention"] = compare(output, reference)
            report.save()


def _median_ms(clock: Clock, fn: Any, repeats: int) -> float:
    """Median milliseconds of `repeats` calls after two warm-up calls (compilation, autotuning)."""
    fn()
    fn()
    return statistics.median(1e3 * _seconds(clock, fn)[0] for _ in range(repeats))


@main.command("attention-inputs")
@click.option("--out", type=click.Path(path_type=Path), required=True)
@click.option("--model", default="a14b-synthetic", show_default=True)
@click.option("--fmt", default="mxfp8", show_default=True)
@click.option("--layers", default="0,13,26,39", show_default=True, help="attn1 calls whose q, k, v are kept.")
@click.option("--repeats", type=int, default=5, show_default=True)
@click.option("--height", type=int, default=720, show_default=True)
@click.option("--width", type=int, default=1280, show_default=True)
@click.option("--frames", type=int, default=81, show_default=True)
def attention_inputs(out: Path, model: str, fmt: str, layers: str, repeats: int, height: int, width: int,
                     frames: int) -> None:
    """The self-attention core inside one 720p forward (high-noise expert, first step, eager) and alone on
    that forward's own q, k, v and on standard-normal inputs of the same shape: splits the gap between the
    kernel bench and the core's time in the pipeline into the inputs' share and the context's. The first
    forward keeps q, k, v and the gate statistics, the second times every call with CUDA events.
    Writes OUT/attention_inputs.json."""
    from fsbench import kernels

    device = pipeline.default_device()
    settings = build_settings("mlperf", model, steps=20, height=height, width=width, num_frames=frames)
    keep = {int(x) for x in layers.split(",")}
    clock = Clock(device)
    with speed.cudnn_first():
        pipe = pipeline.build(model, settings, device)
        inputs = forward_inputs(pipe, settings)
        kept: dict[Any, tuple[torch.Tensor, ...]] = {}
        calls: list[dict[str, Any]] = []
        spans: list[tuple[Any, Any]] = []

        def keeping(call: SelfAttentionCall) -> torch.Tensor:
            q, k, v = call.qkv()
            if len(calls) in keep:
                kept[len(calls)] = (q.clone(), k.clone(), v.clone())
            result, stats = kernels.attention_with_stats(q, k, v, call.fmt, layout="BSHD")
            calls.append({"layer": len(calls), **stats.as_dict()})
            return result

        def timing(call: SelfAttentionCall) -> torch.Tensor:
            start = clock.mark()
            result = call.run()
            spans.append((start, clock.mark()))
            return result

        for core in (keeping, timing):
            router = SelfAttentionRouter(load_schedule(fmt).resolve(1, len(pipe.transformer.blocks)), core=core)
            router.install(pipe)
            try:
                with torch.no_grad():
                    router.begin_video(0)
                    pipe.transformer(encoder_hidden_states=inputs["cond"], **inputs["common"])
            finally:
                router.uninstall()
        for call, (start, end) in zip(calls, spans):
            call["in_forward_ms"] = 1e3 * clock.seconds(start, end)
        del pipe
        first_q = next(iter(kept.values()))[0]
        shape = first_q.shape
        g = torch.Generator(device=device).manual_seed(0)
        kept["randn"] = tuple(torch.randn(shape, device=device, dtype=first_q.dtype, generator=g) for _ in range(3))
        flops = 4 * shape[0] * shape[2] * shape[1] ** 2 * shape[3]
        rows = []
        for name, qkv in kept.items():
            row: dict[str, Any] = {"inputs": name, "q_std": qkv[0].float().std().item(),
                                   "k_std": qkv[1].float().std().item()}
            for label, row_fmt in (("sdpa_bf16", "bf16"), (fmt, fmt)):
                ms = _median_ms(clock, functools.partial(kernels.attention, *qkv, row_fmt, layout="BSHD"), repeats)
                row[f"{label}_ms"], row[f"{label}_tflops"] = ms, flops / ms / 1e9
            if name != "randn":
                row.update({k: calls[name][k] for k in ("rollback_rate", "gate_trips", "in_forward_ms")})
            rows.append(row)
            click.echo(json.dumps(row), err=True)
    in_forward = [c["in_forward_ms"] for c in calls]
    data = {**writer.provenance(orchestrator.device_info(device, model), "python3 scripts/device_speed.py"),
            "model": model, "shape_bshd": list(shape), "fmt": fmt,
            "impl": kernels.resolve_impl(fmt, "auto", device, shape[3]), "repeats": repeats,
            "in_forward_ms": {"median": statistics.median(in_forward), "min": min(in_forward),
                              "max": max(in_forward), "sum": sum(in_forward)},
            "calls": calls, "rows": rows}
    click.echo(json.dumps(data["in_forward_ms"]), err=True)
    writer.atomic_write_text(out / "attention_inputs.json", json.dumps(data, indent=2) + "\n")


@main.command()
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Folder for speed.md and speed.json.")
@click.option("--queries", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Real queries (scripts/e2e_queries.py's JSON list): print the assembly's error against them.")
def assemble(inputs: tuple[Path, ...], out: Path, queries: Path | None) -> None:
    """Sum measured parts (device_speed.json files or their folders) into the Table 6 latency columns: one
    table per compile setting, the forwards of all its measurements merged (GEMM kinds measured in separate
    commands); a part a measurement lacks (a `--parts forwards` run) is taken from the first input that has
    it, and named. With --queries, each row where a real 20-step query of the same GEMMs, compile setting and
    schedule exists gets the query's latency and the assembly's error against it (the real query is the
    figure; the assembly only a cross-check)."""
    loaded = [(str(p), json.loads((p / JSON_NAME if p.is_dir() else p).read_text())) for p in inputs]
    tables = []
    for compiled in dict.fromkeys(bool(d.get("compile")) for _, d in loaded):
        members = [(s, d) for s, d in loaded if bool(d.get("compile")) == compiled]
        data = {**members[0][1], "forwards": {}, "impl": {}, "skipped": []}
        for _, d in members:
            for gemm, rows in d.get("forwards", {}).items():
                data["forwards"].setdefault(gemm, {}).update(rows)
            data["impl"].update(d.get("impl", {}))
            data["skipped"] += d.get("skipped", [])
        borrowed = {}
        for part in ("text_encode", "vae", "encode", "loadgen", "step_overhead_s"):
            if not data.get(part):
                donor = next(((s, d) for s, d in loaded if d.get(part)), None)
                if donor is not None:
                    data[part], borrowed[part] = donor[1][part], donor[0]
        table = assemble_one(data, " + ".join(s for s, _ in members))
        table["commands"] = [d.get("command") for _, d in members]
        table["borrowed_parts"] = borrowed
        if queries is not None:
            check_against_queries(table, json.loads(queries.read_text()))
        tables.append(table)
    writer.atomic_write_text(out / "speed.json", json.dumps(tables, indent=2) + "\n")
    writer.atomic_write_text(out / "speed.md", "\n\n".join(format_assembled(t) for t in tables) + "\n")
    click.echo((out / "speed.md").read_text())


def assemble_one(data: dict[str, Any], source: str) -> dict[str, Any]:
    """Totals per (GEMM kind, schedule) from one measurement; parts that were not measured are reported missing."""
    encode = data.get("encode", {})
    vae = data.get("vae", {})
    fixed = {"text_positive_s": data.get("text_encode", {}).get("positive_only_s"),
             "postprocess_s": encode.get("postprocess_s"), "video_encode_s": encode.get("video_encode_s"),
             "loadgen_overhead_s": data.get("loadgen", {}).get("overhead_s")}
    # BF16 GEMMs: the fastest fp32 decode (output unchanged); FP8 GEMMs (optimized column): the fastest of all
    fp32 = [k for k in vae if k.startswith("fp32")]
    vae_choice = {"bf16": min(fp32, key=lambda k: vae[k]["decode_s"]) if fp32 else None,
                  "fp8": min(vae, key=lambda k: vae[k]["decode_s"]) if vae else None}
    missing = sorted(k for k, v in fixed.items() if v is None)
    rows = []
    for gemm, forwards in data.get("forwards", {}).items():
        vae_name = vae_choice["bf16"] if gemm == "bf16" else vae_choice["fp8"]
        vae_s = vae.get(vae_name, {}).get("decode_s")
        for name in SCHEDULES:
            steps = load_schedule(name).resolve(ASSEMBLED_STEPS, 40).by_step()
            if any(fmt not in forwards for fmt in steps):
                continue
            row: dict[str, Any] = {"gemm": gemm, "schedule": name, "vae": vae_name}
            for stat in ("max", "median"):
                denoise = sum(2 * forwards[f][f"{stat}_forward_s"] + data.get("step_overhead_s", 0.0) for f in steps)
                row[f"denoise_{stat}_s"] = denoise
                row[f"total_{stat}_s"] = denoise + sum(v or 0.0 for v in fixed.values()) + (vae_s or 0.0)
            attention = sum(2 * forwards[f]["median_self_attention_s"] for f in steps)
            row["self_attention_share_of_denoise"] = attention / row["denoise_median_s"]
            rows.append(row)
    base = {r["gemm"]: r for r in rows if r["schedule"] == "bf16"}
    for row in rows:
        for stat in ("max", "median"):
            same = base.get(row["gemm"])
            row[f"speedup_{stat}"] = same[f"total_{stat}_s"] / row[f"total_{stat}_s"] if same else None
            bf16 = base.get("bf16")
            row[f"speedup_vs_bf16_baseline_{stat}"] = bf16[f"total_{stat}_s"] / row[f"total_{stat}_s"] if bf16 else None
    return {"source": source, "command": data.get("command"), "date": data.get("date"),
            "git_commit": data.get("git_commit"), "device": data.get("device"), "compile": data.get("compile"),
            "impl": data.get("impl"),
            "parts": {**fixed, "vae_decode_s": {k: v["decode_s"] for k, v in vae.items()},
                      "step_overhead_s": data.get("step_overhead_s")},
            "missing_parts": missing + ([] if vae else ["vae_decode_s"]), "rows": rows,
            "skipped": data.get("skipped", [])}


def check_against_queries(table: dict[str, Any], queries: list[dict[str, Any]]) -> None:
    """Add `real_query_s` and `assembly_error_{max,median}` (assembled / real - 1) to every row of `table` with a
    matching real query (the latest of them); the unmatched rows stay as they are."""
    for row in table["rows"]:
        same = [q for q in queries if q.get("steps") == ASSEMBLED_STEPS and q.get("schedule") == row["schedule"]
                and q.get("gemm") == row["gemm"] and bool(q.get("compile")) == bool(table["compile"])]
        if not same or not same[-1].get("query_s"):
            continue
        real = same[-1]
        row["real_query_s"], row["real_query_commit"] = real["query_s"], real.get("commit")
        for stat in ("max", "median"):
            row[f"assembly_error_{stat}"] = row[f"total_{stat}_s"] / real["query_s"] - 1


def format_assembled(table: dict[str, Any]) -> str:
    device = (table.get("device") or {}).get("name")
    head = (f"## {table['source']} (compile: {table['compile']}, {table['date']}, commit {table.get('git_commit')}, "
            f"{device})\n\n"
            + "".join(f"command: `{c}`  \n" for c in table.get("commands") or [table["command"]])
            + f"impl per format: {table['impl']}  \n"
            f"parts: {json.dumps(table['parts'])}  \nparts taken from another measurement: "
            f"{table.get('borrowed_parts') or 'none'}  \nmissing parts (counted as 0): {table['missing_parts']}\n\n"
            "| GEMMs | schedule | VAE | total s (slowest) | x same GEMMs | x BF16 baseline | total s (median) | "
            "x same GEMMs | self-attention share |\n|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in table["rows"]:
        def x(v: float | None) -> str:
            return f"{v:.2f}x" if v else "-"
        lines.append(f"| {r['gemm']} | {r['schedule']} | {r['vae']} | {r['total_max_s']:.1f} | {x(r['speedup_max'])} | "
                     f"{x(r['speedup_vs_bf16_baseline_max'])} | {r['total_median_s']:.1f} | "
                     f"{x(r['speedup_median'])} | {r['self_attention_share_of_denoise']:.1%} |")
    if table["skipped"]:
        lines.append("\nskipped: " + "; ".join(table["skipped"]))
    checked = [r for r in table["rows"] if "real_query_s" in r]
    if checked:
        lines += ["", "Assembly against real 20-step queries (scripts/e2e_queries.py; error = assembled / real - 1):",
                  "", "| GEMMs | schedule | real query s | commit | error (slowest) | error (median) |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {r['gemm']} | {r['schedule']} | {r['real_query_s']:.1f} | {r['real_query_commit']} | "
                  f"{r['assembly_error_max']:+.1%} | {r['assembly_error_median']:+.1%} |" for r in checked]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
