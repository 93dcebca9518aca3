#!/usr/bin/env python3
"""How much of a Gluon attention call is the prepass, and does the score distribution change its speed?

On the H200 at (1,40,75600,128), per format: the prepass alone (Hadamard rotation and quantization, the
operands the kernel reads) and the whole call, for BHSD-contiguous and BSHD-view inputs (the pipeline passes
BSHD views); the prepass kernels one by one (torch.profiler); then the whole call with Q and K scaled by 1, 2
and 3 (wider scores: more gate rollbacks). CUDA events, median of 7 calls (5 for the scaled inputs) after 2
warm-ups. The bench (`fsbench kernels bench`) times whole calls only; this splits them.

usage: python3 benchmarks/lab/prepass_time.py [--json OUT.json]
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

import click

from fsbench.files import atomic_write_text
from fsbench.harness.run.writer import provenance

SHAPE = (1, 40, 75600, 128)


@click.command()
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="write the measurements here")
def main(json_path: str | None) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from fsbench.kernels.hopper.launch import (
        GLUON_KERNEL,
        parse_options,
        quantize,
        triton_attention,
    )
    from fsbench.kernels.tools.bench import time_ms

    b, h, s, d = SHAPE
    flops = 4 * b * h * s * s * d
    g = torch.Generator(device="cuda").manual_seed(0)
    layouts = {"bhsd": tuple(torch.randn(SHAPE, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3)),
               "bshd": tuple(torch.randn((b, s, h, d), device="cuda", dtype=torch.bfloat16, generator=g).transpose(1, 2)
                             for _ in range(3))}

    def call(fmt: str):
        return lambda q, k, v: triton_attention(q, k, v, fmt, stats=False, kernel=GLUON_KERNEL)

    report = {**provenance(torch.cuda.get_device_name(0), "python3 benchmarks/lab/prepass_time.py"),
              "shape": list(SHAPE),
              "formats": {}, "scaled": {}}
    for fmt in ("mxfp8", "mxfp6", "mxfp4"):
        opts = parse_options(fmt, {})
        row = report["formats"][fmt] = {}
        for layout, qkv in layouts.items():
            prepass = statistics.median(time_ms(lambda q, k, v, opts=opts: quantize(q, k, v, opts, GLUON_KERNEL),
                                                [qkv], 2, 7))
            whole = statistics.median(time_ms(call(fmt), [qkv], 2, 7))
            row[layout] = {"prepass_ms": prepass, "call_ms": whole, "tflops": flops / whole / 1e9}
            click.echo(f"{fmt} {layout}: prepass {prepass:.2f} ms, call {whole:.2f} ms "
                       f"({flops / whole / 1e9:.1f} TFLOP/s)")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            quantize(*layouts["bshd"], opts, GLUON_KERNEL)
            torch.cuda.synchronize()
        row["prepass_kernels_ms"] = {e.key: e.device_time_total / e.count / 1000 for e in prof.key_averages()
                                     if e.device_time_total > 0}
        for name, ms in row["prepass_kernels_ms"].items():
            click.echo(f"    {name[:70]} {ms:.2f} ms")
    for fmt in ("mxfp8", "mxfp6"):
        for scale in (1.0, 2.0, 3.0):
            q, k, v = layouts["bshd"]
            q, k = q * scale, k * scale
            whole = statistics.median(time_ms(call(fmt), [(q, k, v)], 2, 5))
            stats = triton_attention(q, k, v, fmt, kernel=GLUON_KERNEL)[1]
            report["scaled"][f"{fmt} x{scale:g}"] = {"call_ms": whole, "tflops": flops / whole / 1e9,
                                                    "rollback_rate": stats.rollback_rate}
            click.echo(f"{fmt} q,k x{scale:g}: {whole:.2f} ms ({flops / whole / 1e9:.1f} TFLOP/s), "
                       f"rollback rate {stats.rollback_rate:.4f}")
    if json_path:
        atomic_write_text(Path(json_path), json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
