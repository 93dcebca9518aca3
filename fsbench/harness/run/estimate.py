"""How long a request will take, said before it starts when that is long: the transformer's multiply-adds per video
(its config and the settings, no weights loaded) over the rate this device multiplies at (a short timed matmul).
A request of a size nobody meant (2048x2048x257 on a CPU) then says so at once instead of sitting at step 0."""
from __future__ import annotations

import json
import time
from typing import Any

import torch

from fsbench.harness.model import pipeline
from fsbench.harness.model.synthetic import CONFIGS
from fsbench.harness.run.presets import Settings

LONG_S = 600.0  # a request expected to take longer than this is announced
SLOWEST = {"cuda": 1e12, "cpu": 1e9}  # FLOP/s no device of the kind falls below: what needs no timed matmul
TEXT_TOKENS = 512  # the text encoder's sequence length, which cross-attention reads


def transformer_config(model: str) -> dict[str, Any] | None:
    """The transformer's config (synthetic models' own, a checkpoint's config.json); None where unreadable."""
    if model in CONFIGS:
        return CONFIGS[model]["transformer"]
    try:
        config = json.loads((pipeline.checkpoint_dir(model) / "transformer" / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def video_flops(config: dict[str, Any], settings: Settings) -> float:
    """Floating-point operations of the transformer for one video: every block's projections, self- and
    cross-attention and feed-forward, for each denoising step and each guidance pass (VAE and text encoder left out:
    at the sizes where an estimate matters they are a small part)."""
    tokens = settings.tokens
    width = config["num_attention_heads"] * config["attention_head_dim"]
    per_block = (2 * tokens * width * width * 6  # q, k, v, out of self-attention; q, out of cross-attention
                 + 4 * tokens * tokens * width  # QK^T and PV
                 + 4 * tokens * TEXT_TOKENS * width  # cross-attention over the text
                 + 4 * tokens * width * config["ffn_dim"])  # the feed-forward's two matmuls
    passes = 2 if settings.guidance_scale > 1 else 1
    return per_block * config["num_layers"] * passes * settings.steps


def device_rate(device: torch.device) -> float:
    """Floating-point operations per second of a square matmul on `device` in the pipeline's precision."""
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    n = 1024
    a = torch.randn(n, n, device=device, dtype=dtype)
    torch.matmul(a, a)
    runs, start = 0, time.perf_counter()
    while time.perf_counter() - start < 0.2:
        torch.matmul(a, a)
        runs += 1
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return 2 * n ** 3 * runs / (time.perf_counter() - start)


def announce(model: str, settings: Settings, videos: int, device: torch.device) -> str | None:
    """The line to print where `videos` videos of `settings` are expected to take over LONG_S on `device`."""
    config = transformer_config(model)
    if config is None or videos < 1:
        return None
    flops = video_flops(config, settings) * videos
    if flops / SLOWEST.get(device.type, SLOWEST["cpu"]) <= LONG_S:
        return None
    seconds = flops / device_rate(device)
    if seconds <= LONG_S:
        return None
    return (f"this request is estimated at {_duration(seconds)} on {device.type} ({videos} video(s) of "
            f"{settings.height}x{settings.width}x{settings.num_frames}, {settings.steps} steps, at least); the denoise "
            "bar shows each step")


def _duration(seconds: float) -> str:
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} days"


# A campaign's plan bar weighs its stages by these estimates; only their ratios matter there. Besides the
# transformer, a video costs a fixed part (the VAE, the encoder, LoadGen) and a part per pixel (frames x height x
# width), as do its scores and its page, which also cost a start (worker processes, plots); measured with the tiny
# model on a 2-core CPU.
PER_VIDEO_S = {"generate": 0.9, "eval": 0.1, "page": 0.5}
PER_PIXEL_S = {"generate": 1e-6, "eval": 1e-7, "page": 1e-7}
START_S = {"eval": 5.0, "page": 5.0}


def _pixels(settings: Settings) -> int:
    return settings.num_frames * settings.height * settings.width


def generation_s(model: str, settings: Settings, videos: int, rate: float, min_duration_s: float = 0.0) -> float:
    """Seconds to generate `videos` videos at `rate` FLOP/s (`device_rate`), a LoadGen test's minimum
    duration at least."""
    config = transformer_config(model)
    flops = video_flops(config, settings) if config is not None and rate > 0 else 0.0
    one = flops / rate if flops else 0.0
    one += PER_VIDEO_S["generate"] + PER_PIXEL_S["generate"] * _pixels(settings)
    return max(one * videos, min_duration_s)


def eval_s(settings: Settings, videos: int) -> float:
    """Seconds to score `videos` videos against their reference."""
    return START_S["eval"] + videos * (PER_VIDEO_S["eval"] + PER_PIXEL_S["eval"] * _pixels(settings))


def page_s(settings: Settings, videos: int) -> float:
    """Seconds to write a compare page of `videos` videos (copies and differences)."""
    return START_S["page"] + videos * (PER_VIDEO_S["page"] + PER_PIXEL_S["page"] * _pixels(settings))
