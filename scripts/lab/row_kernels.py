#!/usr/bin/env python3
"""Split one call of each `fsbench kernels bench` row into its GPU kernels, at the clock the 700 W cap allows.

The bench times whole calls (a row's casts or prepass included); this gives the attention kernel's own time
beside the rest, so that cuDNN's FP8 kernel and ours compare kernel for kernel. Each row first runs back to back
for --warm-seconds (the clock settles under the power cap: a short call after idle runs near the 1980 MHz
boost), then its calls are profiled back to back for --seconds in one torch.profiler session, with nvidia-smi
sampling the clock (a window of a few calls is too short for its samples: they lag by a few hundred ms). The
row's attention kernel is its longest; TFLOP/s counts 4*b*h*s^2*d over its median time.

usage: python3 scripts/lab/row_kernels.py --rows cudnn-fp8,gluon-fused-mxfp8 [--shape 1,40,75600,128] [--json OUT]
"""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import click

from fsbench.harness.run.writer import atomic_write_text, provenance


@click.command(help=__doc__)
@click.option("--rows", "row_names", required=True, help="comma-separated bench row names")
@click.option("--shape", default="1,40,75600,128", show_default=True, help="b,h,s,d of the standard-normal inputs")
@click.option("--seconds", default=2.0, show_default=True, help="how long each row's calls are profiled")
@click.option("--warm-seconds", default=4.0, show_default=True, help="back-to-back calls before the profiled ones")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="write the split here")
def main(row_names: str, shape: str, seconds: float, warm_seconds: float, json_path: str | None) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from fsbench.harness.measure import clocks
    from fsbench.kernels.tools import bench

    try:
        selected, _ = bench.select_rows(row_names.split(","))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--rows") from exc
    dims = tuple(int(x) for x in shape.split(","))
    flops = 4 * dims[0] * dims[1] * dims[2] ** 2 * dims[3]
    g = torch.Generator(device="cuda").manual_seed(0)
    qkv = tuple(torch.randn(dims, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    report = {**provenance(torch.cuda.get_device_name(0), "python3 scripts/lab/row_kernels.py"), "shape": list(dims),
              "rows": {}}
    with profile(activities=[ProfilerActivity.CUDA]):
        torch.cuda.synchronize()  # the profiler's first session sets up CUPTI: not inside a row's window
    for row in selected:
        name, fn = row.name, row.fn
        start = time.time()
        while time.time() - start < warm_seconds:
            fn(*qkv)
            torch.cuda.synchronize()
        with clocks.sampling(50) as samples, profile(activities=[ProfilerActivity.CUDA]) as prof:
            begin, calls = time.time(), 0
            while time.time() - begin < seconds:
                fn(*qkv)
                torch.cuda.synchronize()  # keeps the queue short, so the window ends with the calls
                calls += 1
            end = time.time()
        per_kernel: dict[str, list[float]] = {}
        for event in prof.events():
            if event.device_type.name == "CUDA":
                per_kernel.setdefault(event.name, []).append(event.device_time / 1000)
        split = sorted(((sum(ms) / calls, kernel) for kernel, ms in per_kernel.items()), reverse=True)
        main_kernel = split[0][1]
        attention = per_kernel[main_kernel]
        entry = report["rows"][name] = {
            "attention_kernel": main_kernel, "calls": calls, "attention_ms": statistics.median(attention),
            "attention_tflops": round(flops / statistics.median(attention) / 1e9, 1),
            "other_kernels_ms": round(sum(ms for ms, _ in split[1:]), 3),
            "kernels_ms_per_call": {kernel: round(ms, 4) for ms, kernel in split},
            "clock": clocks.summarize(samples, begin, end)}
        clock = entry["clock"] or {}
        click.echo(f"{name:<24} attention kernel {entry['attention_ms']:.2f} ms ({entry['attention_tflops']:.1f} "
                   f"TFLOP/s), other kernels {entry['other_kernels_ms']:.2f} ms per call, at "
                   f"{clock.get('clock_mhz', 0):.0f} MHz {clock.get('power_w', 0):.0f} W; {main_kernel[:60]}")
        if json_path:  # after every row: a run stopped by its time limit keeps what it measured
            atomic_write_text(Path(json_path), json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
