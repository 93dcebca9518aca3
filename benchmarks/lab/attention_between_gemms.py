#!/usr/bin/env python3
"""The pipeline's attention call on its own, and between the FP8 GEMM work a Wan block does around it.

Inside a real A14B query an mxfp8 self-attention call took 138.4 ms at 1665 MHz, where the bench's same op, back
to back, took 133.2 ms at 1740 MHz: the same clock cycles at a lower clock (results/README.md). This runs that op
(`gluon-fused-mxfp8-op` at (1,40,75600,128)) three ways for --seconds each:
  back_to_back   one call after another, as the bench runs it;
  after_gemms    each call after A14B FFNs in FP8 (`harness.model.fp8_linear`, 5120 -> 13824 -> 5120 over 75600
                 tokens), as many as take --filler-ms: the pipeline's time outside self-attention per call
                 (3.349 s per step over 80 calls = 41.9 ms);
  after_idle     each call after the GPU idled for --filler-ms.
Each gets the median ms per call and the median SM clock and board power of the nvidia-smi samples taken while
attention ran. If the GEMMs alone bring the call to the pipeline's time, the gap is the clock the power cap
leaves after GEMM work, not the call.

usage: python3 benchmarks/lab/attention_between_gemms.py [--seconds 8] [--filler-ms 41.9] [--json FILE]  (a GPU)
"""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import click

from fsbench.files import atomic_write_text
from fsbench.harness.measure import clocks
from fsbench.harness.run.writer import provenance

SHAPE = (1, 40, 75600, 128)
ROW = "gluon-fused-mxfp8-op"
FFN = (5120, 13824)  # Wan2.2-T2V-A14B's model dim and FFN width
REGIMES = ("back_to_back", "after_gemms", "after_idle")


def _ffn(device):
    """One FFN of an A14B block with FP8 GEMMs (random weights) and a 720p token batch for it."""
    import torch
    from torch import nn

    from fsbench.harness.model.fp8_linear import Fp8Linear

    dim, hidden = FFN
    up, down = (Fp8Linear(nn.Linear(a, b, dtype=torch.bfloat16, device=device)) for a, b in ((dim, hidden),
                                                                                             (hidden, dim)))
    x = torch.randn(SHAPE[2], dim, device=device, dtype=torch.bfloat16)
    return lambda: down(torch.nn.functional.gelu(up(x), approximate="tanh"))


def _median_ms(fn, repeats: int) -> float:
    from fsbench.kernels.tools.bench import time_ms

    return statistics.median(time_ms(fn, [()], 2, repeats))


@click.command()
@click.option("--seconds", default=8.0, show_default=True, help="seconds of calls in each regime")
@click.option("--filler-ms", default=41.9, show_default=True, help="GEMM work or idle time before each call")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="write the regimes as JSON here")
def main(seconds: float, filler_ms: float, json_path: str | None) -> None:
    import torch

    from fsbench.harness.measure.profile import Clock
    from fsbench.kernels.tools import bench

    device = torch.device("cuda")
    row = next(r for r in bench.rows() if r.name == ROW)
    (args,) = bench.row_inputs([row], bench.make_inputs(SHAPE, 1))[0]
    ffn = _ffn(device)
    ffn_ms = _median_ms(ffn, 10)
    ffns = max(1, round(filler_ms / ffn_ms))
    click.echo(f"one FP8 FFN {ffn_ms:.2f} ms: {ffns} before each call ({ffns * ffn_ms:.1f} ms)")
    fillers = {"back_to_back": lambda: None, "after_gemms": lambda: [ffn() for _ in range(ffns)],
               "after_idle": lambda: (torch.cuda.synchronize(), time.sleep(filler_ms / 1000))}
    clock = Clock(device)
    for _ in range(3):
        row.fn(*args)
    report = {**provenance(torch.cuda.get_device_name(0), "python3 benchmarks/lab/attention_between_gemms.py"),
              "shape": list(SHAPE), "row": ROW, "filler_ms": filler_ms, "ffn_ms": ffn_ms, "ffns_per_call": ffns,
              "regimes": []}
    with clocks.sampling(50) as samples:
        windows = []
        for regime in REGIMES:
            anchor, marks = clock.anchor(), []
            start = time.time()
            while time.time() - start < seconds:
                fillers[regime]()
                begin = clock.mark()
                row.fn(*args)
                marks.append((begin, clock.mark()))
                marks[-1][1].synchronize()
            windows.append((regime, start + 1.0, [(clock.when(anchor, a), clock.when(anchor, b)) for a, b in marks],
                            [clock.seconds(a, b) * 1000 for a, b in marks]))
    for regime, settled, spans, times in windows:
        kept = [(span, ms) for span, ms in zip(spans, times) if span[0] >= settled]  # the first second: clock ramp
        entry = {"regime": regime, "calls": len(kept), "ms": statistics.median(ms for _, ms in kept),
                 "during_attention": clocks.summarize(
                     [s for s, hit in zip(samples, clocks.in_spans(samples, [span for span, _ in kept])) if hit])}
        report["regimes"].append(entry)
        during = entry["during_attention"]
        click.echo(f"{regime:<13} {entry['ms']:7.2f} ms a call over {entry['calls']:3d} calls  " + (
            f"{during['clock_mhz']:5.0f} MHz {during['power_w']:5.0f} W {during['temp_c']:3.0f} C "
            f"(x clock {entry['ms'] * during['clock_mhz'] / 1000:.1f} M cycles)" if during else "no clock samples"))
    if json_path:
        atomic_write_text(Path(json_path), json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
