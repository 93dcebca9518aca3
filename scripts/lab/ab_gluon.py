#!/usr/bin/env python3
"""A/B of Gluon kernel variants in one process on the H200: the committed `kernels.hopper.gluon_fused.attention_kernel`,
then each variant module's `attention_kernel` swapped in (same host wrapper, prepass and launch), then the
committed kernel again (the gap between the two committed timings bounds the noise). The timings are taken in
rounds, one warm-up and one timed call of every kernel per round, so that a drift of the clocks over the run
(thermal, power) falls on every kernel alike. Each output is compared bit for bit with the committed kernel's.
With --clock-seconds, each kernel then also runs back to back for that long while nvidia-smi samples the SM clock
and power (`harness.gpu_clock`): the H200 holds its 700 W cap, so a variant can gain clock instead of cycles.
A variant is a copy of fsbench/kernels/hopper/gluon_fused.py with the change, kept outside the repository.

usage: python3 scripts/lab/ab_gluon.py VARIANT.py [VARIANT.py ...] [--shape 1,40,75600,128] [--json OUT.json]
                                  [--clock-seconds 6]
"""
from __future__ import annotations

import importlib.util
import json
import os
import statistics

import click

CONFIGS = {  # name: (fmt, options)
    "fused-mxfp8": ("mxfp8", {}),
    "conventional-fp8": ("mxfp8", {"softmax": "conventional"}),
    "fused-mxfp8-nogate": ("mxfp8", {"gate_doublings": None}),
    "fused-mxfp6": ("mxfp6", {}),
    "fused-mxfp4": ("mxfp4", {}),
    "fused-mxfp6-rowscale": ("mxfp6", {"mx_p_scale": "row"}),
}


def _load(path: str):
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return name, module.attention_kernel


@click.command(help=__doc__)
@click.argument("variants", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--shape", default="1,40,75600,128", show_default=True, help="b,h,s,d of the standard-normal inputs")
@click.option("--configs", "config_names", default=",".join(CONFIGS), show_default=True,
              help="comma-separated subset of the configurations")
@click.option("--repeats", default=9, show_default=True, help="rounds (one timed call of each kernel per round)")
@click.option("--json", "json_path", type=click.Path(dir_okay=False),
              help="write {config: {kernel: TFLOP/s, ...}} here")
@click.option("--clock-seconds", default=0.0, show_default=True,
              help="then run each kernel back to back this long, sampling SM clock and power")
def main(variants: tuple[str, ...], shape: str, config_names: str, repeats: int, json_path: str | None,
         clock_seconds: float) -> None:
    unknown = sorted(set(config_names.split(",")) - set(CONFIGS))
    if unknown:
        raise click.BadParameter(f"unknown {', '.join(unknown)}; known: {', '.join(CONFIGS)}", param_hint="--configs")
    import torch

    import fsbench.kernels.hopper.gluon_fused as gluon_fused
    from fsbench.harness import gpu_clock
    from fsbench.kernels.tools.bench import time_ms
    from fsbench.kernels.hopper.launch import triton_attention

    committed = gluon_fused.attention_kernel
    candidates = [("committed", committed), *(_load(path) for path in variants), ("committed-again", committed)]
    dims = tuple(int(x) for x in shape.split(","))
    flops = 4 * dims[0] * dims[1] * dims[2] ** 2 * dims[3]
    g = torch.Generator(device="cuda").manual_seed(0)
    inputs = [tuple(torch.randn(dims, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))]
    results = {}
    try:
        for config in config_names.split(","):
            fmt, options = CONFIGS[config]

            def run(q, k, v):
                return triton_attention(q, k, v, fmt, stats=False, engine="gluon", **options)[0]

            reference, identical, times = None, {}, {name: [] for name, _ in candidates}
            for name, kernel in candidates:  # compiles each kernel and checks its output
                gluon_fused.attention_kernel = kernel
                out = run(*inputs[0])
                reference = out if reference is None else reference
                identical[name] = bool(torch.equal(out, reference))
                del out
            for _ in range(repeats):
                for name, kernel in candidates:
                    gluon_fused.attention_kernel = kernel
                    times[name] += time_ms(run, inputs, 1, 1)
            results[config] = {}
            for name, _ in candidates:
                tflops = flops / statistics.median(times[name]) / 1e9
                results[config][name] = {"tflops": round(tflops, 1), "bit_identical": identical[name],
                                         "ms": [round(t, 3) for t in times[name]]}
                print(f"{config:<20} {name:<20} {tflops:8.1f} TFLOP/s  bit-identical {identical[name]}", flush=True)
            if clock_seconds > 0:
                for name, kernel in candidates:
                    gluon_fused.attention_kernel = kernel
                    clock = gpu_clock.back_to_back(run, inputs[0], clock_seconds, flops)
                    results[config][name]["back_to_back"] = clock
                    print(f"{config:<20} {name:<20} {clock['tflops']:8.1f} TFLOP/s back to back at "
                          f"{clock.get('clock_mhz', float('nan')):.0f} MHz, {clock.get('power_w', float('nan')):.0f} W",
                          flush=True)
            if json_path:  # after every configuration: a run cut short by its time limit keeps what it timed
                with open(json_path, "w") as f:
                    json.dump({"shape": list(dims), "repeats": repeats, "results": results}, f, indent=1)
    finally:
        gluon_fused.attention_kernel = committed


if __name__ == "__main__":
    main()
