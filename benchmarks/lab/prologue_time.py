#!/usr/bin/env python3
"""Is the `norm_rope` Triton kernel (Wan's q/k RMSNorm over all heads and RoPE in one pass) faster than what
torch.compile makes of the same two operations, alone and followed by the prepass?

On the H200 at (B, S, H, D) = (1, 75600, 40, 128), bf16 projections: (1) torch.compile'd RMSNorm + RoPE of q and
k, then the Gluon kernel's prepass (`launch.quantize`, mxfp8, V included) on its output, against `norm_rope` then
the same prepass (the router's path); (2) the two prologues alone. CUDA events, the variants of a pair timed in
turn each repeat, median of 15 repeats after 3 warm-ups.

usage: python3 benchmarks/lab/prologue_time.py [--json OUT.json]
"""
from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path

import click

from fsbench.files import atomic_write_text
from fsbench.harness.run.writer import provenance

SHAPE = (1, 75600, 40, 128)


def interleaved_ms(fns: dict[str, Callable[[], object]], warmup: int = 3, repeats: int = 15) -> dict[str, float]:
    """Median milliseconds of each call, the calls timed in turn within every repeat (`sweep.interleaved_ms`)."""
    from fsbench.kernels.tools.sweep import interleaved_ms as round_robin

    times = round_robin(list(fns.values()), [[()]] * len(fns), warmup, repeats)
    return {name: statistics.median(t) for name, t in zip(fns, times)}


@click.command()
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="write the measurements here")
def main(json_path: str | None) -> None:
    import torch

    from fsbench.kernels.hopper.launch import GLUON_KERNEL, norm_rope, parse_options, quantize
    from fsbench.kernels.prologue import Prologue, rope
    from fsbench.kernels.tools.bench import EPS

    b, s, h, d = SHAPE
    g = torch.Generator(device="cuda").manual_seed(0)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, device="cuda")

    xq, xk = ((randn(b, s, h * d) * 4).bfloat16().unflatten(2, (h, d)) for _ in range(2))
    v = randn(b, s, h, d).bfloat16()
    wq, wk = ((torch.rand(h * d, generator=g, device="cuda") + 0.5).bfloat16() for _ in range(2))
    freqs = 1.0 / 10000.0 ** (torch.arange(0, d, 2, dtype=torch.float64, device="cuda") / d)
    angles = torch.outer(torch.arange(s, dtype=torch.float64, device="cuda"), freqs).repeat_interleave(2, dim=-1)
    cos, sin = angles.cos().float()[None, :, None], angles.sin().float()[None, :, None]
    pro = Prologue(wq, wk, EPS, cos, sin)

    @torch.compile(fullgraph=True)
    def compiled(xq: torch.Tensor, xk: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q = torch.nn.functional.rms_norm(xq.flatten(2), (h * d,), wq, EPS).unflatten(2, (h, d))
        k = torch.nn.functional.rms_norm(xk.flatten(2), (h * d,), wk, EPS).unflatten(2, (h, d))
        return rope(q, cos, sin), rope(k, cos, sin)

    opts = parse_options("mxfp8", {})

    def compiled_then_prepass() -> object:
        q, k = compiled(xq, xk)
        return quantize(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), opts, GLUON_KERNEL)

    def norm_rope_then_prepass() -> object:
        q, k = norm_rope(xq, xk, pro)
        return quantize(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), opts, GLUON_KERNEL)

    prepass = interleaved_ms({"compiled_norm_rope_then_prepass": compiled_then_prepass,
                              "norm_rope_kernel_then_prepass": norm_rope_then_prepass})
    alone = interleaved_ms({"compiled_norm_rope": lambda: compiled(xq, xk), "norm_rope_kernel":
                            lambda: norm_rope(xq, xk, pro)})
    report = {**provenance(torch.cuda.get_device_name(0), "python3 benchmarks/lab/prologue_time.py"),
              "shape": list(SHAPE),
              "prepass_mxfp8_gluon_ms": prepass, "norm_rope_ms": alone}
    click.echo(json.dumps(report, indent=1))
    if json_path:
        atomic_write_text(Path(json_path), json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
