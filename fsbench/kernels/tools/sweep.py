"""Shape behaviour: the bench's rows over a fixed grid of sequence lengths and head counts, timed interleaved.

Within each repeat every row runs once, in turn (round-robin), so a drift of the clock under the power cap
reaches all rows alike; each figure is the median over the repeats. The grid is fixed so sweeps from different
commits compare: 4k to 128k keys, aligned and ragged (75600, Wan's 720x1280x81), at 24 and 40 heads, b=1, d=128.
TFLOP/J is the back-to-back TFLOP/s over the median power drawn meanwhile (`--clock-seconds`).
"""
from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from fsbench.kernels.tools import bench

SEQ_LENS = (4096, 8192, 16384, 32768, 65536, 75600, 131072)
HEADS = (24, 40)
GRID = tuple((1, h, s, 128) for s in SEQ_LENS for h in HEADS)
ROWS = ("gluon-fused-mxfp8", "cudnn-fp8", "sdpa-cudnn-bf16")


def interleaved_ms(fns: list[Callable], inputs: list[list[tuple]], warmup: int, repeats: int) -> list[list[float]]:
    """Per-call milliseconds of each fn on its own input sets (`inputs[j]` for `fns[j]`), `repeats` rounds in which
    each fn runs once in turn, after `warmup` calls of each. Consecutive calls take different input sets, so none
    finds its inputs in L2."""
    for fn, own in zip(fns, inputs):
        bench.time_ms(fn, own, warmup, 0)
    times: list[list[float]] = [[] for _ in fns]
    for i in range(repeats):
        for j, (fn, own) in enumerate(zip(fns, inputs)):
            times[j] += bench.time_ms(fn, [own[(i * len(fns) + j) % len(own)]], 0, 1)
    return times


def bench_interleaved(shape: tuple[int, int, int, int], selected: list[bench.Row], warmup: int = 2,
                      repeats: int = 5, input_sets: int = 3,
                      hold: Callable[[Callable, tuple, int], dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The bench's result for each row at one BHSD shape (as `bench.bench_shape`, without the emulator), timed
    interleaved; `hold(fn, inputs, flops)`, when given, then runs each row back to back for its "back_to_back"
    (clock, power and TFLOP/J: the harness samples them; this module knows nothing of how)."""
    import torch
    import torch._dynamo
    from torch.nn.attention import SDPBackend

    b, h, s, d = shape
    flops = 4 * b * h * s * s * d
    # the FP8 rows compile their casts once per shape: let them, over the whole grid, rather than fall back to
    # eager casts (dynamo's default limit is 8 shapes) and slow down at the largest shapes
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 2 * len(GRID))
    inputs = bench.make_inputs(shape, input_sets)
    own = bench.row_inputs(selected, inputs)
    times = interleaved_ms([row.fn for row in selected], own, warmup, repeats)
    ref = bench._sdpa(SDPBackend.CUDNN_ATTENTION)(*inputs[0])
    results = []
    for row, ms, sets in zip(selected, times, own):
        med = statistics.median(ms)
        result = {"row": row.name, "shape": list(shape), "median_ms": med, "min_ms": min(ms), "max_ms": max(ms),
                  "tflops": flops / med / 1e9, "repeats": repeats, "interleaved": True,
                  **bench.accuracy(row.fn(*sets[0]), ref)}
        if hold:
            result["back_to_back"] = hold(row.fn, sets[0], flops)
        results.append(result)
    del inputs, own, ref
    torch.cuda.empty_cache()
    return bench.add_ratios(results)
