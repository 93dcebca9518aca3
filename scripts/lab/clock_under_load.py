#!/usr/bin/env python3
"""SM clock, power and clock-event reasons while each attention kernel runs back to back on the GPU.

TFLOP/s alone mixes two things: the cycles a kernel needs per tile and the clock the GPU holds while it
runs. `nvidia-smi` samples the clock, power and the active clock-event reasons (power cap, thermal) every
50 ms while each row of `fsbench kernels bench` runs for --seconds at (1,40,75600,128); the first second of
each row (clock ramp) is left out. Reported per row: median call TFLOP/s, median SM clock and power, the
share of samples under the software power cap, and the tensor-core utilization at the clock held
(TFLOP/s over 132 SMs x 8192 FP8 FLOP per clock, or 4096 for BF16). The last row feeds the fused mxfp8
kernel Q and K scaled by 3: the same instructions on a P that is mostly zero.

usage: python3 scripts/lab/clock_under_load.py [--seconds 6] [--json FILE]   (needs an H200)
"""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import click

from fsbench.harness.measure import clocks
from fsbench.harness.run.writer import atomic_write_text, provenance

SHAPE = (1, 40, 75600, 128)
ROWS = ("sdpa-cudnn-bf16", "gluon-conventional-fp8", "gluon-fused-mxfp8", "gluon-fused-mxfp8-nogate",
        "gluon-fused-mxfp6")
FLOP_PER_CLOCK_SM = {"bf16": 4096, "fp8": 8192}  # dense tensor-core peak per SM (kernel-anchors.md)


@click.command()
@click.option("--seconds", default=6.0, show_default=True, help="back-to-back calls per row")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="write the rows as JSON here")
def main(seconds: float, json_path: str | None) -> None:
    import torch

    from fsbench.kernels.tools import bench

    flops = 4 * SHAPE[0] * SHAPE[1] * SHAPE[2] ** 2 * SHAPE[3]
    fns = {r.name: r.fn for r in bench.rows()}
    g = torch.Generator(device="cuda").manual_seed(0)
    qkv = tuple(torch.randn(SHAPE, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    cases = [(name, fns[name], qkv) for name in ROWS]
    cases.append(("gluon-fused-mxfp8 (q, k x3)", fns["gluon-fused-mxfp8"], (qkv[0] * 3, qkv[1] * 3, qkv[2])))
    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    windows = []
    with clocks.sampling(50) as samples:
        for name, fn, args in cases:
            for _ in range(2):
                fn(*args)
            torch.cuda.synchronize()
            start, times = time.time(), []
            while time.time() - start < seconds:
                begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                begin.record()
                fn(*args)
                end.record()
                end.synchronize()
                times.append(begin.elapsed_time(end))
            windows.append((name, start + 1.0, time.time(), times))
    report = {**provenance(torch.cuda.get_device_name(0), "python3 scripts/lab/clock_under_load.py"),
              "shape": list(SHAPE), "rows": []}
    for name, t0, t1, times in windows:
        tflops = flops / statistics.median(times) / 1e9
        row = {"row": name, "calls": len(times), "tflops": tflops, "samples": 0}
        clock = clocks.summarize(samples, t0, t1)
        if clock:
            peak = sm_count * FLOP_PER_CLOCK_SM["bf16" if "bf16" in name else "fp8"] * clock["clock_mhz"] * 1e6 / 1e12
            row.update(clock, tensor_utilization=tflops / peak)
        report["rows"].append(row)
        click.echo(f"{name:<30} {tflops:7.1f} TFLOP/s  " + (
            f"{row['clock_mhz']:6.0f} MHz {row['power_w']:6.1f} W {row['temp_c']:4.0f} C  power cap "
            f"{row['power_cap_share']:4.0%}  thermal {row['thermal_share']:4.0%}  "
            f"tensor {row['tensor_utilization']:5.1%}"
            if clock else "no clock samples"))
    if json_path:
        atomic_write_text(Path(json_path), json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
