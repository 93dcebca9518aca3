"""`fsbench kernels bench --calibrate`: the baseline rows in NVIDIA's own configuration, beside NVIDIA's figures.

NVIDIA publishes cuDNN's forward attention figures (`published`): b=1, 64 query heads sharing 8 KV heads, head dim
128, no mask, as many queries as keys, q, k and v BSHD in memory, at 4k, 16k and 32k keys. Each row is measured
here in that configuration twice: as the timed call (CUDA events, as `bench` times every row; an FP8 row's scales
and casts from BF16 included) and as its attention kernel alone under the profiler (`kernel_time`), the way
NVIDIA times it. The kernel's TFLOP/s stands beside NVIDIA's figure for its precision where NVIDIA publishes one
for this GPU (`x_published`). cuDNN's own rows run the training forward (the softmax statistics written), as
NVIDIA's benchmark does. A row that cannot take grouped KV heads runs with 64 KV heads (MHA: the same FLOPs, more
bytes of k and v) and says why in `mha_reason`.
"""
from __future__ import annotations

import functools
import logging
import statistics
import warnings
from collections.abc import Callable
from typing import Any

import torch

from fsbench.kernels.tools import bench, published
from fsbench.kernels.tools.kernel_time import kernel_alone

ROWS = ("cudnn-bf16", "sdpa-cudnn-bf16", "sdpa-flash-bf16", "fa3-bf16", "cudnn-fp8", "fa3-fp8")
SHAPES = tuple((1, published.HEADS, s, published.HEAD_DIM) for s in published.SEQ_LENS)
KERNEL_CALLS = 10  # profiled calls per row for its kernel alone (NVIDIA's benchmark runs 10 iterations)
NOT_GROUPED = "the row takes one head count for q, k and v"


def rows() -> list[bench.Row]:
    """The calibration's rows: `ROWS` of the bench, cuDNN's in its training forward as NVIDIA runs it."""
    from fsbench.kernels.tools import cudnn_bf16, cudnn_fp8

    training = {"cudnn-bf16": functools.partial(cudnn_bf16.cudnn_bf16_attention, stats=True),
                "cudnn-fp8": functools.partial(cudnn_fp8.cudnn_fp8_attention, stats=True)}
    by_name = {row.name: row for row in bench.rows()}
    return [bench.Row(name, training.get(name, by_name[name].fn), by_name[name].missing, gqa=by_name[name].gqa)
            for name in ROWS]


def precision(row_name: str) -> str | None:
    """"bf16" or "fp8" from a row's name (its last word, before any "@cuDNN version"), None for other rows."""
    last = row_name.split("@", 1)[0].rsplit("-", 1)[-1]
    return last if last in ("bf16", "fp8") else None


def make_inputs(shape: tuple[int, int, int, int], kv_heads: int, sets: int) -> list[tuple[torch.Tensor, ...]]:
    """`sets` (q, k, v) triples of standard normal BF16 (seed 0), BSHD in memory and indexed BHSD: q with the
    shape's heads, k and v with `kv_heads`."""
    b, h, s, d = shape
    g = torch.Generator(device="cuda").manual_seed(0)

    def bshd(heads: int) -> torch.Tensor:
        return torch.randn(b, s, heads, d, device="cuda", generator=g, dtype=torch.bfloat16).transpose(1, 2)

    return [(bshd(h), bshd(kv_heads), bshd(kv_heads)) for _ in range(sets)]


def ungrouped(inputs: list[tuple[torch.Tensor, ...]]) -> list[tuple[torch.Tensor, ...]]:
    """The same inputs with each KV head repeated for the query heads that share it (MHA), still BSHD in memory."""
    def expand(t: torch.Tensor, heads: int) -> torch.Tensor:
        return t.repeat_interleave(heads // t.shape[1], dim=1).transpose(1, 2).contiguous().transpose(1, 2)

    return [(q, expand(k, q.shape[1]), expand(v, q.shape[1])) for q, k, v in inputs]


def grouped_refusal(row: bench.Row, args: tuple[torch.Tensor, ...]) -> str | None:
    """Why `row` cannot run grouped KV heads (its error and warnings, in its own words), None where it can."""
    if not row.gqa:
        return NOT_GROUPED
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            row.fn(*args)
            torch.cuda.synchronize()
            return None
        except Exception as exc:  # noqa: BLE001 - any refusal of grouped heads: the row then runs MHA, saying why
            said = [first_line(w.message) for w in caught] + [first_line(exc)]
            return "; ".join(dict.fromkeys(said))


def first_line(said: object) -> str:
    """The first line of a message, or its type's name where it says nothing."""
    return (str(said).splitlines() or [type(said).__name__])[0]


def calibrate_shape(shape: tuple[int, int, int, int], selected: list[bench.Row], device_name: str,
                    kv_heads: int = published.KV_HEADS, warmup: int = 2, repeats: int = 7, input_sets: int = 3,
                    kernel_calls: int = KERNEL_CALLS,
                    hold: Callable[[Callable, tuple, int], dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Each row at one BHSD shape with `kv_heads` KV heads: the call, the kernel alone, NVIDIA's figure, and with
    `hold` (as `bench.bench_shape` takes it) the row back to back with its clock and power."""
    from fsbench.kernels.tools.cudnn_bf16 import versions

    b, h, s, d = shape
    flops = 4 * b * h * s * s * d
    inputs = make_inputs(shape, kv_heads, input_sets)
    mha = ungrouped(inputs)  # for the rows that cannot take grouped heads, and the reference
    ref = torch.nn.functional.scaled_dot_product_attention(*mha[0])
    results = []
    for row in selected:
        reason = grouped_refusal(row, inputs[0])
        own = mha if reason else inputs
        try:
            ms = bench.time_ms(row.fn, own, warmup, repeats)
        except Exception as exc:  # noqa: BLE001 - one row that cannot run at all leaves the others measured
            logging.getLogger("fsbench").warning("calibration row %s failed at %s: %s", row.name, shape,
                                                 first_line(exc))
            continue
        med = statistics.median(ms)
        kind = precision(row.name)
        result = {"row": row.name, "shape": list(shape), "kv_heads": h if reason else kv_heads, "mha_reason": reason,
                  "median_ms": med, "min_ms": min(ms), "max_ms": max(ms), "tflops": flops / med / 1e9,
                  "repeats": repeats, **bench.accuracy(row.fn(*own[0]), ref),
                  **kernel_alone(row.fn, own, kernel_calls, flops), "precision": kind,
                  "published_tflops": published.figure(kind, s, device_name) if kind else None}
        result["x_published"] = (result["kernel_tflops"] / result["published_tflops"]
                                 if result["published_tflops"] and result.get("kernel_tflops") else None)
        if "cudnn" in row.name:
            result["cudnn"] = versions()
        if hold:
            result["back_to_back"] = hold(row.fn, own[0], flops)
        results.append(result)
        torch.cuda.empty_cache()
    return bench.add_ratios(results)
