#!/usr/bin/env python3
"""Compile the Hopper attention kernels for sm_90 (ahead of time: no GPU needed), dump their SASS and
check that both GEMMs run on FP8 wgmma (QGMMA); count the instructions of the main loop that share
the slow pipes (MUFU, F2I/I2F), the e4m3 conversions (F2FP) and the per-element ALU/FMA work.

usage: python scripts/lab/sass_qgmma.py [--engine triton|gluon] [--out DIR] [--block-m 64|128] [--stages N]
                                   [--max-registers N] [--variants a,b]
(exit code 1 when a kernel has no QGMMA)
"""
from __future__ import annotations

import collections
import os
import re
import subprocess
import sys

import click

COUNTED = ("QGMMA", "HGMMA", "DEPBAR", "MUFU", "F2I", "I2F", "F2FP", "PRMT", "FMNMX", "IMNMX", "VIMNMX", "FFMA", "FADD",
           "FMUL", "IADD3", "LOP3", "SHF", "IMAD", "FSEL", "SEL", "SHFL", "STG", "BAR", "LDS", "STS", "STL", "LDL")

VARIANTS = {  # name: (FUSED, GATE, P_EMAX, P_SHIFT, P_CLAMP, P_BLOCKS[, SKELETON: the Gluon kernel only])
    "fused-mxfp8": (True, True, 7, 0, False, False),
    "fused-mxfp8-nogate": (True, False, 7, 0, False, False),
    "fused-mx-p-e2m3-row": (True, True, 2, 6, True, False),
    "fused-mx-p-e2m3-block": (True, True, 2, -5, True, True),
    "conventional-fp8": (False, True, 7, 0, False, False),
    "skeleton-fp8": (True, True, 7, 0, False, False, True),
}


def _descriptor_types(engine: str, bm: int, bn: int, d: int) -> dict[str, str]:
    """Signature types of the Q, K, V descriptors (Gluon's carry their shared-memory layout, and each of
    its math warpgroups loads half of the query tile)."""
    shapes = {"desc_q": [bm if engine == "triton" else bm // 2, d], "desc_k": [bn, d], "desc_v": [d, bn]}
    if engine == "triton":
        return {name: f"tensordesc<fp8e4nv{shape}>" for name, shape in shapes.items()}
    from triton.experimental.gluon import language as gl

    return {name: f"tensordesc<fp8e4nv{shape},{gl.NVMMASharedLayout.get_default_for(shape, gl.float8e4nv)!r}>"
            for name, shape in shapes.items()}


def compile_variant(flags: tuple, num_stages: int = 2, head_dim: int = 128, block_m: int = 128,
                    max_registers: int | None = None, engine: str = "triton"):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from fsbench.kernels.hopper import launch, tiling

    fused, gate, p_emax, p_shift, p_clamp, p_blocks = flags[:6]
    num_warps = block_m // 16
    if engine == "gluon":  # one launch shape
        block_m, num_stages, num_warps = tiling.GLUON.block_m, tiling.GLUON.num_stages, tiling.GLUON.num_warps
    bm, bn, d = block_m, tiling.BLOCK_N, head_dim
    signature = {**_descriptor_types(engine, bm, bn, d), "q_scale_ptr": "*fp32", "k_scale_ptr": "*fp32",
                 "v_scale_ptr": "*fp32", "out_ptr": "*bf16", "flag_ptr": "*i8"}
    signature.update({n: "i32" for n in ("S_Q", "S_K", "S_QPAD", "S_KPAD", "N_ST", "N_KT", "gate_p", "HEADS",
                                          "stride_ob", "stride_oh", "stride_os")})
    constexprs = {"D": d, "BM": bm, "BN": bn, "STAT_M": tiling.STAT_M, "D_BIAS": launch.D_BIAS,
                  "FUSED": fused, "GATE": gate,
                  "P_EMAX": p_emax, "P_SHIFT": p_shift, "P_CLAMP": p_clamp,
                  "P_BLOCKS": p_blocks}
    if engine == "gluon":
        from triton.experimental.gluon._runtime import GluonASTSource

        from fsbench.kernels.hopper.gluon_fused import attention_kernel as fn

        constexprs["STAGES"] = num_stages
        constexprs["SKELETON"] = flags[6:] == (True,)
        source = GluonASTSource
    else:
        from fsbench.kernels.hopper.triton_fused import attention_kernel

        fn, source = attention_kernel.fn, ASTSource
    signature.update({k: "constexpr" for k in constexprs})
    src = source(fn=fn, signature=signature, constexprs=constexprs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": num_warps, "num_stages": num_stages, "maxnreg": max_registers})


def sass_of(cubin: bytes, workdir: str, name: str) -> str:
    import triton

    cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    path = os.path.join(workdir, f"{name}.cubin")
    with open(path, "wb") as f:
        f.write(cubin)
    return subprocess.run([cuobjdump, "-sass", path], check=True, capture_output=True, text=True).stdout


def resource_usage(workdir: str, name: str) -> str:
    """Registers, stack and spills as cuobjdump reports them."""
    import triton

    cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    out = subprocess.run([cuobjdump, "-res-usage", os.path.join(workdir, f"{name}.cubin")], check=True,
                         capture_output=True, text=True).stdout
    m = re.search(r"REG:(\d+) STACK:(\d+)", out)
    return f"registers={m.group(1)} stack={m.group(2)}" if m else "registers=?"


def opcodes(lines: list[str]) -> collections.Counter:
    counts = collections.Counter()
    for line in lines:
        m = re.search(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)((?:\.[A-Z0-9_]+)*)", line)
        if m:
            counts[m.group(1)] += 1
            if m.group(1) == "MUFU":
                counts["MUFU" + m.group(2)] += 1
    return counts


def _total(counts: collections.Counter) -> int:
    """Instructions counted (the MUFU.<op> sub-counts are not extra instructions)."""
    return sum(n for op, n in counts.items() if not op.startswith("MUFU."))


_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+\S")  # an instruction line: its address, then its text
_BRANCH = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?BRA\b[^;]*?0x([0-9a-f]+)")


def _address(line: str) -> int | None:
    m = _INSTRUCTION.search(line)
    return int(m.group(1), 16) if m else None


def _branch(line: str) -> tuple[int, bool] | None:
    """A branch's target address and whether it is predicated; None for any other line."""
    m = _BRANCH.search(line)
    return (int(m.group(2), 16), bool(m.group(1))) if m else None


def main_loop(sass: str) -> list[str]:
    """The key-tile loop: the shortest backward-branch body that holds a QGMMA and no EXIT (in the Gluon kernel
    each math warpgroup has its own, of a few instructions' difference; the longer bodies around them are the
    kernel's outer regions and the out-of-line barrier-wait trampolines)."""
    lines = [line for line in sass.splitlines() if _address(line) is not None]
    index = {_address(line): i for i, line in enumerate(lines)}
    best: list[str] = []
    for i, line in enumerate(lines):
        branch = _branch(line)
        start = index.get(branch[0]) if branch else None
        if start is None or start >= i:
            continue
        body = lines[start:i + 1]
        if any("EXIT" in b for b in body) or not any("QGMMA" in b for b in body):
            continue
        if not best or len(body) < len(best):
            best = body
    return best


def skippable(loop: list[str]) -> int:
    """Instructions of the loop that a forward branch to a target inside the loop jumps over (the O rescale a warp
    skips when no row of it rolled back): the loop's count less these is what such a warp issues per key tile."""
    addr = [_address(line) for line in loop]
    skipped = 0
    for here, line in zip(addr, loop):
        branch = _branch(line)
        if branch and branch[1] and here < branch[0] <= addr[-1]:
            skipped += sum(here < a < branch[0] for a in addr)
    return skipped


@click.command(help=__doc__)
@click.option("--engine", default="triton", type=click.Choice(["triton", "gluon"]), show_default=True,
              help="which kernel to compile")
@click.option("--out", default="/tmp/fsbench-sass", show_default=True, help="folder for the .cubin and .sass files")
@click.option("--block-m", default=128, type=click.Choice(["64", "128"]), show_default=True,
              help="query rows per program (Triton; Gluon has one launch shape, tiling.GLUON)")
@click.option("--stages", default=2, show_default=True, help="K/V pipeline stages (Triton)")
@click.option("--max-registers", type=int, help="register cap per thread (the autotuner's 168)")
@click.option("--variants", "names", default=",".join(VARIANTS), show_default=True,
              help="comma-separated subset of the variants")
def main(engine: str, out: str, block_m: str, stages: int, max_registers: int | None, names: str) -> None:
    unknown = sorted(set(names.split(",")) - set(VARIANTS))
    if unknown:
        raise click.BadParameter(f"unknown {', '.join(unknown)}; known: {', '.join(VARIANTS)}", param_hint="--variants")
    os.makedirs(out, exist_ok=True)
    ok = True
    print(f"{'variant':<22} {'scope':<6} " + " ".join(f"{c:>6}" for c in COUNTED))
    for name in names.split(","):
        if engine == "triton" and len(VARIANTS[name]) > 6:
            continue  # the skeleton is the Gluon kernel's
        kernel = compile_variant(VARIANTS[name], stages, block_m=int(block_m), max_registers=max_registers,
                                 engine=engine)
        sass = sass_of(kernel.asm["cubin"], out, name)
        with open(os.path.join(out, f"{name}.sass"), "w") as f:
            f.write(sass)
        loop = main_loop(sass)
        for scope, counts in (("kernel", opcodes(sass.splitlines())), ("loop", opcodes(loop))):
            print(f"{name:<22} {scope:<6} " + " ".join(f"{counts.get(c, 0):>6}" for c in COUNTED))
        print(f"{'':<22} {resource_usage(out, name)} shared={kernel.metadata.shared} "
              f"loop_instructions={_total(opcodes(loop))} (skippable {skippable(loop)}) "
              f"kernel_instructions={_total(opcodes(sass.splitlines()))}")
        if "QGMMA" not in sass:
            print(f"{name}: no QGMMA (FP8 wgmma) in the SASS", file=sys.stderr)
            ok = False
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
