#!/usr/bin/env python3
"""Split one call of each `fsbench kernels bench` row into its GPU kernels, at the clock the 700 W cap allows.

The bench times whole calls (a row's casts or prepass included); this gives the attention kernel's own time
beside the rest, so that cuDNN's FP8 kernel and ours compare kernel for kernel. Each row first runs back to back
for --warm-seconds (the clock settles under the power cap: a short call after idle runs near the 1980 MHz
boost), then its calls are profiled back to back for --seconds in one torch.profiler session, with nvidia-smi
sampling the clock (a window of a few calls is too short for its samples: they lag by a few hundred ms). The
row's attention kernel is its longest; TFLOP/s counts 4*b*h*s^2*d over its median time. The front page's "Kernel
for kernel" table; about a minute per shape for four rows.

usage: python3 benchmarks/row_kernels.py --out DIR --rows cudnn-fp8,gluon-fused-mxfp8 [--shape 1,40,75600,128 ...]
       (DIR/row_kernels_<keys>.json per shape, rewritten after every row)
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import click

from fsbench.files import atomic_write_text
from fsbench.harness.run.writer import provenance


@click.command(help=__doc__)
@click.option("--rows", "row_names", required=True, help="comma-separated bench row names")
@click.option("--shape", "shapes", multiple=True, default=("1,40,75600,128", "1,24,32768,128"), show_default=True,
              help="b,h,s,d of the standard-normal inputs; repeat for several")
@click.option("--seconds", default=2.0, show_default=True, help="how long each row's calls are profiled")
@click.option("--warm-seconds", default=4.0, show_default=True, help="back-to-back calls before the profiled ones")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="folder of the JSON files, one per shape")
def main(row_names: str, shapes: tuple[str, ...], seconds: float, warm_seconds: float, out: Path) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from fsbench.kernels.tools import bench

    try:
        selected, _ = bench.select_rows(row_names.split(","))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--rows") from exc
    with profile(activities=[ProfilerActivity.CUDA]):
        torch.cuda.synchronize()  # the profiler's first session sets up CUPTI: not inside a row's window
    for shape in shapes:
        dims = tuple(int(x) for x in shape.split(","))
        split_rows(selected, dims, seconds, warm_seconds, out / f"row_kernels_{dims[2]}.json")


def split_rows(selected: list, dims: tuple[int, ...], seconds: float, warm_seconds: float, path: Path) -> None:
    """Profile each row at `dims` and write the split to `path` after every row."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from fsbench.harness.measure import clocks
    from fsbench.kernels.tools import kernel_time

    flops = 4 * dims[0] * dims[1] * dims[2] ** 2 * dims[3]
    g = torch.Generator(device="cuda").manual_seed(0)
    qkv = tuple(torch.randn(dims, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    report = {**provenance(torch.cuda.get_device_name(0), "python3 benchmarks/row_kernels.py"), "shape": list(dims),
              "rows": {}}
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
        per_kernel: dict[str, list[float]] = {}  # microseconds of each launch
        for event in prof.events():
            if event.device_type.name == "CUDA":
                per_kernel.setdefault(event.name, []).append(event.device_time)
        found = kernel_time.summarize(per_kernel, calls, flops)  # the attention kernel: the longest
        main_kernel = found["kernel"]
        split = sorted(((sum(us) / calls / 1e3, kernel) for kernel, us in per_kernel.items()), reverse=True)
        entry = report["rows"][name] = {
            "attention_kernel": main_kernel, "calls": calls, "attention_ms": found["kernel_ms"],
            "attention_tflops": round(found["kernel_tflops"], 1),
            "other_kernels_ms": round(sum(ms for ms, kernel in split if kernel != main_kernel), 3),
            "kernels_ms_per_call": {kernel: round(ms, 4) for ms, kernel in split},
            "clock": clocks.summarize(samples, begin, end)}
        clock = entry["clock"] or {}
        click.echo(f"{name:<24} attention kernel {entry['attention_ms']:.2f} ms ({entry['attention_tflops']:.1f} "
                   f"TFLOP/s), other kernels {entry['other_kernels_ms']:.2f} ms per call, at "
                   f"{clock.get('clock_mhz', 0):.0f} MHz {clock.get('power_w', 0):.0f} W; {main_kernel[:60]}")
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(report, indent=1) + "\n")  # after every row: a stopped run keeps them


if __name__ == "__main__":
    main()
