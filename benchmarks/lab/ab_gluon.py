#!/usr/bin/env python3
"""A/B of Gluon kernel variants in one process on the H200: the committed `kernels.hopper.gluon`'s attention_kernel,
then each variant module's `attention_kernel` swapped in (same host wrapper, prepass and launch), then the
committed kernel again (the gap between the two committed timings bounds the noise). The timings are taken in
rounds, one warm-up and one timed call of every kernel per round, so that a drift of the clocks over the run
(thermal, power) falls on every kernel alike. Each output is compared bit for bit with the committed kernel's.
With --clock-seconds, each kernel then also runs back to back for that long while nvidia-smi samples the SM clock
and power (`harness.measure.clocks`): the H200 holds its 700 W cap, so a variant can gain clock instead of cycles.
A variant is a copy of fsbench/kernels/hopper/gluon/kernel.py with the change, kept outside the repository, or
with --old-tree the Gluon kernel of an extracted older tree (`git archive COMMIT fsbench | tar -x -C DIR`): its
`attention_kernel` takes the same launch, so a refactor is checked for identical output and speed in one process.

usage: python3 benchmarks/lab/ab_gluon.py [VARIANT.py ...] [--old-tree DIR] [--shape 1,40,75600,128 ...]
                                  [--json OUT.json] [--clock-seconds 6]
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import os
import statistics
import sys

import click

from fsbench.harness.run.writer import provenance

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


PACKAGE = "fsbench.kernels.hopper.gluon"


def _old_tree_kernel(tree: str):
    """The Gluon kernel of an extracted tree: a single module (before the kernel became a package, and before the
    kernels were sorted into rooms), or the tree's own package, imported with the tree's `hopper` folder first on
    the package's path and then dropped from the module cache again (its jit functions keep their own modules)."""
    for rel in ("fsbench/kernels/hopper/gluon_fused.py", "fsbench/kernels/gluon_fused.py"):
        if os.path.exists(os.path.join(tree, rel)):
            return _load(os.path.join(tree, rel))[1]
    if not os.path.exists(os.path.join(tree, *PACKAGE.split("."), "kernel.py")):
        raise click.BadParameter(f"{tree} holds no Gluon kernel", param_hint="--old-tree")
    ours = {name: module for name, module in sys.modules.items() if name.startswith(PACKAGE)}
    for name in ours:
        del sys.modules[name]
    hopper = importlib.import_module(PACKAGE.rsplit(".", 1)[0])
    hopper.__path__.insert(0, os.path.join(tree, "fsbench", "kernels", "hopper"))
    try:
        return importlib.import_module(PACKAGE + ".kernel").attention_kernel
    finally:
        hopper.__path__.pop(0)
        for name in [n for n in sys.modules if n.startswith(PACKAGE)]:
            del sys.modules[name]
        sys.modules.update(ours)


@click.command(help=__doc__)
@click.argument("variants", nargs=-1, type=click.Path(exists=True, dir_okay=False))
@click.option("--old-tree", type=click.Path(exists=True, file_okay=False),
              help="an extracted older tree whose Gluon kernel joins as the variant 'old-tree'")
@click.option("--shape", "shapes", multiple=True, default=("1,40,75600,128",), show_default=True,
              help="b,h,s,d of the standard-normal inputs (repeat the option for several shapes)")
@click.option("--configs", "config_names", default=",".join(CONFIGS), show_default=True,
              help="comma-separated subset of the configurations")
@click.option("--repeats", default=9, show_default=True, help="rounds (one timed call of each kernel per round)")
@click.option("--json", "json_path", type=click.Path(dir_okay=False),
              help="write the command, commit, device, date and {shape: {config: {kernel: ...}}} here")
@click.option("--clock-seconds", default=0.0, show_default=True,
              help="then run each kernel back to back this long, sampling SM clock and power")
def main(variants: tuple[str, ...], old_tree: str | None, shapes: tuple[str, ...], config_names: str, repeats: int,
         json_path: str | None, clock_seconds: float) -> None:
    if not variants and not old_tree:
        raise click.UsageError("give a VARIANT.py or --old-tree DIR")
    unknown = sorted(set(config_names.split(",")) - set(CONFIGS))
    if unknown:
        raise click.BadParameter(f"unknown {', '.join(unknown)}; known: {', '.join(CONFIGS)}", param_hint="--configs")
    import torch

    import fsbench.kernels.hopper.gluon.kernel as gluon_fused

    committed = gluon_fused.attention_kernel
    loaded = [_load(path) for path in variants]
    if old_tree:
        loaded.append(("old-tree", _old_tree_kernel(old_tree)))
    candidates = [("committed", committed), *loaded, ("committed-again", committed)]
    header = provenance(torch.cuda.get_device_name(), program="python3 benchmarks/lab/ab_gluon.py")
    every = {}
    try:
        for shape in shapes:
            every[shape] = results = {}
            _ab_shape(shape, config_names, candidates, repeats, clock_seconds, results, gluon_fused,
                      lambda: json_path and _write(json_path, header, repeats, every))
    finally:
        gluon_fused.attention_kernel = committed


def _write(path: str, header: dict, repeats: int, every: dict) -> None:
    with open(path, "w") as f:
        json.dump({**header, "repeats": repeats, "shapes": every}, f, indent=1)


def _ab_shape(shape: str, config_names: str, candidates: list, repeats: int, clock_seconds: float, results: dict,
              gluon_fused, save) -> None:
    """Every configuration at one shape into `results`, saved after each (a run cut short keeps what it timed)."""
    import torch

    from fsbench.harness.measure import clocks as gpu_clock
    from fsbench.kernels.hopper.launch import GLUON_KERNEL, triton_attention
    from fsbench.kernels.tools.bench import time_ms

    dims = tuple(int(x) for x in shape.split(","))
    flops = 4 * dims[0] * dims[1] * dims[2] ** 2 * dims[3]
    g = torch.Generator(device="cuda").manual_seed(0)
    inputs = [tuple(torch.randn(dims, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))]
    for config in config_names.split(","):
        fmt, options = CONFIGS[config]

        def run(q, k, v, fmt=fmt, options=options):
            return triton_attention(q, k, v, fmt, stats=False, kernel=GLUON_KERNEL, **options)[0]

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
            print(f"{shape:<16} {config:<20} {name:<20} {tflops:8.1f} TFLOP/s  bit-identical {identical[name]}",
                  flush=True)
        if clock_seconds > 0:
            for name, kernel in candidates:
                gluon_fused.attention_kernel = kernel
                clock = gpu_clock.back_to_back(run, inputs[0], clock_seconds, flops)
                results[config][name]["back_to_back"] = clock
                print(f"{config:<20} {name:<20} {clock['tflops']:8.1f} TFLOP/s back to back at "
                      f"{clock.get('clock_mhz', float('nan')):.0f} MHz, {clock.get('power_w', float('nan')):.0f} W",
                      flush=True)
        save()


if __name__ == "__main__":
    main()
