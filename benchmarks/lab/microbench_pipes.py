#!/usr/bin/env python3
"""Issue rates of the instructions the softmax of an FP8 attention kernel lives on, on the GPU at hand.

Each op runs in 8 independent chains of 4 elements per thread (32 in flight) for ITERS iterations, as
inline PTX so the compiler neither folds nor reorders it; the rate is ops per SM per clock at the clock
given (the H200's 1980 MHz by default: a lower real clock makes the figures pessimistic). What the
Fused-Softmax design trades: MUFU.EX2 (the exp unit) and F2I against FFMA/FADD (Schraudolph), F2FP (the
e4m3x2 convert), FMNMX (row maxima), PRMT and SHFL (moving P between the two GEMMs' layouts).

usage: python benchmarks/lab/microbench_pipes.py [--iters N] [--clock-mhz F] [--json FILE]   (needs a CUDA GPU)
"""
from __future__ import annotations

import json
from pathlib import Path

import click
import torch
import triton
import triton.language as tl

from fsbench.files import atomic_write_text

# name: (PTX for one op with $0 = f(chain $1), the SASS it should become); every op maps b32 -> b32.
OPS = {
    "ffma": ("fma.rn.f32 $0, $1, 0f3F7FBE77, 0f3A83126F;", "FFMA"),
    "fadd": ("add.f32 $0, $1, 0f3A83126F;", "FADD"),
    "fmnmx": ("max.f32 $0, $1, 0f3A83126F;", "FMNMX"),
    "ex2": ("ex2.approx.ftz.f32 $0, $1;", "MUFU.EX2"),
    "f2i": ("cvt.rni.s32.f32 $0, $1;", "F2I"),
    "cvt_e4m3x2": ("{ .reg .b16 h; cvt.rn.satfinite.e4m3x2.f32 h, $1, $1; cvt.u32.u16 $0, h; }",
                   "F2FP + LOP3 (zero-extend)"),
    "prmt": ("prmt.b32 $0, $1, $1, 0x3210;", "PRMT"),
    "shfl": ("shfl.sync.bfly.b32 $0, $1, 1, 0x1f, 0xffffffff;", "SHFL"),
}
CHAINS = 8
BLOCK = 1024
WARPS = 8


@triton.jit
def _step(x, ASM: tl.constexpr):
    return tl.inline_asm_elementwise(ASM, "=r,r", [x], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _pipe_kernel(out_ptr, ITERS: tl.constexpr, ASM: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    base = (offs.to(tl.float32) * 1e-6 + 0.5).to(tl.int32, bitcast=True)
    c0, c1, c2, c3 = base, base + 1, base + 2, base + 3
    c4, c5, c6, c7 = base + 4, base + 5, base + 6, base + 7
    for _ in range(ITERS):
        c0 = _step(c0, ASM)
        c1 = _step(c1, ASM)
        c2 = _step(c2, ASM)
        c3 = _step(c3, ASM)
        c4 = _step(c4, ASM)
        c5 = _step(c5, ASM)
        c6 = _step(c6, ASM)
        c7 = _step(c7, ASM)
    tl.store(out_ptr + offs, (c0 ^ c1 ^ c2 ^ c3) ^ (c4 ^ c5 ^ c6 ^ c7))


def measure(asm: str, iters: int, clock_mhz: float, repeats: int = 5) -> dict[str, float]:
    """Ops per SM per clock and per nanosecond of one op, all SMs busy (8 programs of 256 threads each)."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    grid = sms * 8
    out = torch.empty(grid * BLOCK, dtype=torch.int32, device="cuda")
    def run() -> None:
        _pipe_kernel[(grid,)](out, ITERS=iters, ASM=asm, BLOCK=BLOCK, num_warps=WARPS)

    run()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    ms = sorted(times)[len(times) // 2]
    ops = grid * BLOCK * CHAINS * iters
    per_ns = ops / (ms * 1e6) / sms
    return {"median_ms": ms, "ops_per_sm_per_ns": per_ns, "ops_per_sm_per_clock": per_ns * 1e3 / clock_mhz}


@click.command(help=__doc__)
@click.option("--iters", default=4096, show_default=True, help="iterations of the 8 chains per thread")
@click.option("--clock-mhz", default=1980.0, show_default=True, help="SM clock the per-clock rate assumes")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), help="also write JSON here")
def main(iters: int, clock_mhz: float, json_path: Path | None) -> None:
    if not torch.cuda.is_available():
        raise click.UsageError("needs a CUDA GPU")
    rows = []
    for name, (asm, sass) in OPS.items():
        rows.append({"op": name, "sass": sass, **measure(asm, iters, clock_mhz)})
        r = rows[-1]
        click.echo(f"{name:<11} {sass:<22} {r['ops_per_sm_per_clock']:7.1f} per SM per clock "
                   f"({r['ops_per_sm_per_ns']:.1f}/ns, {r['median_ms']:.2f} ms)")
    if json_path:
        meta = {"device": torch.cuda.get_device_name(0), "clock_mhz_assumed": clock_mhz, "iters": iters,
                "chains": CHAINS, "threads_per_program": WARPS * 32, "triton": triton.__version__}
        atomic_write_text(json_path, json.dumps({**meta, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
