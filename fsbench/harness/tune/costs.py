"""What one self-attention call costs in each format at the model's own shape: read from a bench JSON
(`fsbench kernels bench --json`) or timed here. The tuner takes every format's price from these figures and
assumes nothing: on Hopper MXFP6 and MXFP4 run as emulations at FP8 speed, and a bench there says so."""
from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from fsbench import kernels, userfiles
from fsbench.errors import FsbenchError
from fsbench.harness.model import pipeline
from fsbench.harness.model.synthetic import CONFIGS
from fsbench.harness.run.presets import Settings

# The bench rows that time each format as the pipeline runs it, preferred first (Gluon, then Triton, on sm_90).
BENCH_ROWS = {
    "bf16": ("sdpa-cudnn-bf16", "sdpa-flash-bf16"),
    "mxfp8": ("gluon-fused-mxfp8", "triton-fused-mxfp8"),
    "mxfp6": ("gluon-fused-mxfp6", "triton-fused-mxfp6"),
    "mxfp4": ("gluon-fused-mxfp4", "triton-fused-mxfp4"),
}
QUICK_REPEATS = 3
MAX_CALL_MS = 3.6e6  # an hour per attention call: beyond it a cost is a mistake, and the search's sums would overflow


@dataclass(frozen=True)
class Costs:
    """Milliseconds per self-attention call by format, at `shape` (B, H, S, D), and where they come from."""

    shape: tuple[int, int, int, int]
    ms: dict[str, float]
    source: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "ms_per_call": dict(self.ms), "source": self.source}


def call_shape(model: str, settings: Settings) -> tuple[int, int, int, int]:
    """(1, heads, tokens, head_dim) of one self-attention call of `model` at `settings`, read without weights."""
    if model in CONFIGS:
        config = CONFIGS[model]["transformer"]
    else:
        path = pipeline.checkpoint_dir(model) / "transformer" / "config.json"
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise FsbenchError(f"{path}: cannot read the transformer config ({exc})") from exc
    try:
        return (1, int(config["num_attention_heads"]), settings.tokens, int(config["attention_head_dim"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise FsbenchError(f"the transformer config of {model} has no attention heads or head dim ({exc})") from exc


def load(path: Path, shape: tuple[int, int, int, int], formats: tuple[str, ...]) -> Costs:
    """The per-call cost of each of `formats` at `shape` from a bench JSON; FsbenchError if it was measured at
    other shapes or lacks a format's row."""
    try:
        doc = json.loads(userfiles.read_text(path, "--costs"))
        measured = dict(_timed(r) for r in doc["rows"] if r.get("median_ms") is not None)
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise FsbenchError(f"--costs {path}: not a bench JSON of `fsbench kernels bench --json` ({exc})") from exc
    shapes = sorted({s for _, s in measured})
    if shape not in shapes:
        raise FsbenchError(f"--costs {path} was measured at shape(s) {', '.join(_text(s) for s in shapes) or 'none'};"
                           f" this model's calls are {_text(shape)}: bench that shape (fsbench kernels bench "
                           f"--shape {_text(shape)} --json FILE)")
    ms, rows_used = {}, {}
    for fmt in formats:
        row = next((name for name in BENCH_ROWS[fmt] if (name, shape) in measured), None)
        if row is None:
            raise FsbenchError(f"--costs {path} has no row for {fmt} at {_text(shape)}; expected one of "
                               f"{', '.join(BENCH_ROWS[fmt])}")
        ms[fmt], rows_used[fmt] = measured[(row, shape)], row
    source = {"file": str(path), "rows": rows_used,
              **{key: doc.get(key) for key in ("device", "date", "git_commit", "command") if key in doc}}
    return Costs(shape, ms, source)


def bench_here(shape: tuple[int, int, int, int], formats: tuple[str, ...], device: torch.device,
               impl: str) -> Costs:
    """Each format's call timed here at `shape` (median of a few calls after one warm-up) with the kernel the run
    would use: on a CPU that is the emulator, whose prices say nothing of a GPU's."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    b, h, s, d = shape
    q, k, v = (torch.randn(b, s, h, d, generator=gen).to(device, dtype) for _ in range(3))
    ms, impls = {}, {}
    for fmt in formats:
        chosen = "auto" if fmt == "bf16" else impl
        impls[fmt] = kernels.resolve_impl(fmt, chosen, device, d)
        times = []
        for _ in range(QUICK_REPEATS + 1):
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
            kernels.attention(q, k, v, fmt, impl=impls[fmt], layout="BSHD")  # resolved: no advice meant for scripts
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            times.append(1e3 * (time.perf_counter() - start))
        ms[fmt] = statistics.median(times[1:])
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return Costs(shape, ms, {"measured_here": name, "impl": impls, "repeats": QUICK_REPEATS})


def _timed(row: dict[str, Any]) -> tuple[tuple[str, tuple[int, ...]], float]:
    """((row name, shape), median ms) of one bench row; ValueError where the time is no time a call could take."""
    ms = float(row["median_ms"])
    if not (math.isfinite(ms) and 0 < ms <= MAX_CALL_MS):
        raise ValueError(f"row {row['row']!r} has median_ms {row['median_ms']!r}, not the time of one call "
                         f"(above 0, at most {MAX_CALL_MS:.0f})")
    shape = row["shape"]
    if not isinstance(shape, list) or not all(type(n) is int and n > 0 for n in shape):
        raise ValueError(f"row {row['row']!r} has shape {shape!r}, not a list of positive integers such as "
                         "[1, 40, 75600, 128]")
    return (str(row["row"]), tuple(shape)), ms


def _text(shape: tuple[int, ...]) -> str:
    return ",".join(str(n) for n in shape)


def rest_from_profile(path: Path) -> dict[str, Any]:
    """The part of a query no attention format changes (text encoding, GEMMs, cross-attention, VAE, encoding), in ms
    per video, from the profile.json of `fsbench run --profile`: its wall time less its self-attention."""
    try:
        doc = json.loads(userfiles.read_text(path, "--profile"))
        videos = doc["videos"]
        attention = sum(float(step["self_attention_s"]) for video in videos for step in video["steps"])
        rest_ms = 1e3 * (float(doc["summary"]["wall_s"]) - attention) / len(videos)
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, ZeroDivisionError) as exc:
        raise FsbenchError(f"--profile {path}: not a profile.json of `fsbench run --profile` ({exc})") from exc
    if not math.isfinite(rest_ms):
        raise FsbenchError(f"--profile {path}: its times are not finite numbers (rest of a query {rest_ms} ms)")
    if rest_ms < 0:
        raise FsbenchError(f"--profile {path}: its self-attention time exceeds its wall time")
    return {"ms": rest_ms, "file": str(path)}
