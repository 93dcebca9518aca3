#!/usr/bin/env python3
"""Launch each Hopper attention kernel once, for Nsight Compute: the Triton autotuner is pinned to the
configuration it picks on the H200 (64 rows, 4 warps, 2 stages, 168 registers), so no tuning launches
are profiled. Run under ncu on the H200 (`scripts/install_offline.sh wheelhouse` first):

  ncu --clock-control none -k regex:attention_kernel --section SpeedOfLight --section ComputeWorkloadAnalysis \\
      --section SchedulerStats --section WarpStateStats --section Occupancy --section MemoryWorkloadAnalysis \\
      -o attn python3 benchmarks/lab/ncu_attention.py
"""
from __future__ import annotations

import click

VARIANTS = {  # name: (engine, fmt, options)
    "triton-fused-mxfp8": ("triton", "mxfp8", {}),
    "triton-conventional-fp8": ("triton", "mxfp8", {"softmax": "conventional"}),
    "gluon-fused-mxfp8": ("gluon", "mxfp8", {}),
    "triton-fused-mxfp6": ("triton", "mxfp6", {}),
    "gluon-conventional-fp8": ("gluon", "mxfp8", {"softmax": "conventional"}),
}


@click.command(help=__doc__)
@click.option("--shape", default="1,8,16384,128", show_default=True, help="b,h,s,d of the standard-normal inputs")
@click.option("--variants", "names", default=",".join(VARIANTS), show_default=True,
              help="comma-separated subset, in launch order")
def main(shape: str, names: str) -> None:
    unknown = sorted(set(names.split(",")) - set(VARIANTS))
    if unknown:
        raise click.BadParameter(f"unknown {', '.join(unknown)}; known: {', '.join(VARIANTS)}", param_hint="--variants")
    import torch

    from fsbench.kernels import registry
    from fsbench.kernels.hopper.launch import triton_attention
    from fsbench.kernels.hopper.triton_fused import attention_kernel

    attention_kernel.configs = [c for c in attention_kernel.configs if c.kwargs["BM"] == 64 and c.maxnreg == 168]
    g = torch.Generator(device="cuda").manual_seed(0)
    dims = tuple(int(x) for x in shape.split(","))
    q, k, v = (torch.randn(dims, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    for name in names.split(","):
        engine, fmt, options = VARIANTS[name]
        triton_attention(q, k, v, fmt, stats=False, kernel=registry.get(engine).hopper, **options)
        torch.cuda.synchronize()
        print("launched", name, flush=True)


if __name__ == "__main__":
    main()
