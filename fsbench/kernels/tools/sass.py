"""`fsbench kernels sass`: the instructions a warp issues per key tile, counted from the sm_90 SASS of the Hopper
kernels compiled ahead of time (Triton's bundled ptxas and cuobjdump: no GPU).

Energy per FLOP under the power cap grows with the instructions a warp issues per key tile, so the count is the
figure a change to the softmax policy moves first. The key-tile loop is the shortest backward-branch body that
holds a QGMMA; the instructions a predicated forward branch inside it jumps over (the O rescale a warp skips when
none of its rows rolled back) are "skippable", and the loop less them is what a warp issues per tile. Each loop
instruction is put in one step by its opcode and operands (`step_of`): the score reduction, Stage-A, the narrowing
of P, the O update, the GEMMs and their synchronisation, and the per-row bookkeeping.
"""
from __future__ import annotations

import collections
import os
import re
import subprocess
from dataclasses import dataclass
from typing import Any

from fsbench.kernels.constants import D_BIAS
from fsbench.kernels.hopper import launch, tiling
from fsbench.kernels.registry import GLUON, TRITON

STEPS = ("reduction", "stage_a", "narrowing", "o_update", "gemm_sync", "bookkeeping")


@dataclass(frozen=True)
class Variant:
    """One compiled kernel: the format and options `kernels.attention` would launch it with (and, for the skeleton,
    the Gluon kernel's SKELETON switch)."""

    fmt: str
    options: tuple[tuple[str, Any], ...] = ()
    skeleton: bool = False  # the Gluon kernel's GEMMs and schedule without the softmax

    def constexprs(self) -> dict[str, Any]:
        """The kernel's compile-time switches, resolved as the launcher resolves them."""
        opts = launch.parse_options(self.fmt, dict(self.options))
        p_emax, p_shift, p_clamp, p_blocks = opts.p_format
        consts = dict(D=tiling.GLUON_HEAD_DIM, BN=tiling.BLOCK_N, STAT_M=tiling.STAT_M, D_BIAS=D_BIAS,
                      FUSED=opts.fused, GATE=opts.gate_doublings is not None, P_EMAX=p_emax, P_SHIFT=p_shift,
                      P_CLAMP=p_clamp, P_BLOCKS=p_blocks)
        return consts


VARIANTS = {
    "skeleton-fp8": Variant("mxfp8", skeleton=True),
    "fused-mxfp8": Variant("mxfp8"),
    "fused-mxfp6": Variant("mxfp6"),
    "fused-mxfp4": Variant("mxfp4"),
    "conventional-fp8": Variant("mxfp8", (("softmax", "conventional"),)),
}
BASELINE = "skeleton-fp8"  # the variant every other's extra instructions are counted against


def _descriptor_types(engine: str, bm: int, bn: int, d: int) -> dict[str, str]:
    """Signature types of the Q, K, V descriptors (Gluon's carry their shared-memory layout, and each of its math
    warpgroups loads half of the query tile)."""
    shapes = {"desc_q": [bm if engine == TRITON else bm // 2, d], "desc_k": [bn, d], "desc_v": [d, bn]}
    if engine == TRITON:
        return {name: f"tensordesc<fp8e4nv{shape}>" for name, shape in shapes.items()}
    from triton.experimental.gluon import language as gl

    return {name: f"tensordesc<fp8e4nv{shape},{gl.NVMMASharedLayout.get_default_for(shape, gl.float8e4nv)!r}>"
            for name, shape in shapes.items()}


def compile_variant(variant: Variant, engine: str = GLUON, ones: tuple[str, ...] = ()):
    """The kernel compiled for sm_90 (a Triton `CompiledKernel`; its asm["cubin"] is the machine code). Triton
    compiles at its first autotuner configuration (`tiling.candidates`), Gluon at its one launch shape. `ones`
    names integer arguments equal to 1, which the launcher specialises to constants (one key tile, one query)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    consts = variant.constexprs()
    if engine == GLUON:
        tile = tiling.GLUON
        from triton.experimental.gluon._runtime import GluonASTSource

        from fsbench.kernels.hopper.gluon.kernel import attention_kernel as fn

        consts.update(STAGES=tile.num_stages, SKELETON=variant.skeleton)  # every argument in the signature
        source = GluonASTSource
    else:
        if variant.skeleton:
            raise ValueError("the skeleton is the Gluon kernel's")
        tile = tiling.candidates()[0]
        from fsbench.kernels.hopper.triton_fused import attention_kernel

        fn, source = attention_kernel.fn, ASTSource
    consts["BM"] = tile.block_m
    signature = {**_descriptor_types(engine, tile.block_m, tile.block_n, consts["D"]), "q_scale_ptr": "*fp32",
                 "k_scale_ptr": "*fp32", "v_scale_ptr": "*fp32", "out_ptr": "*bf16", "flag_ptr": "*i8"}
    signature.update({n: "i32" for n in ("S_Q", "S_K", "S_QPAD", "S_KPAD", "N_ST", "N_KT", "gate_p", "HEADS",
                                          "stride_ob", "stride_oh", "stride_os")})
    consts.update({name: 1 for name in ones})
    signature.update({k: "constexpr" for k in consts})
    src = source(fn=fn, signature=signature, constexprs=consts)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": tile.num_warps, "num_stages": tile.num_stages,
                                   "maxnreg": tile.max_registers})


def _cuobjdump(*args: str) -> str:
    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    return subprocess.run([tool, *args], check=True, capture_output=True, text=True).stdout


def sass_of(cubin: bytes, workdir: str, name: str) -> str:
    """The SASS of `cubin` (written to workdir/name.cubin for cuobjdump)."""
    path = os.path.join(workdir, f"{name}.cubin")
    with open(path, "wb") as f:
        f.write(cubin)
    return _cuobjdump("-sass", path)


def registers(workdir: str, name: str) -> tuple[int, int]:
    """(registers per thread, stack bytes) of workdir/name.cubin, as cuobjdump reports them."""
    m = re.search(r"REG:(\d+) STACK:(\d+)", _cuobjdump("-res-usage", os.path.join(workdir, f"{name}.cubin")))
    return (int(m.group(1)), int(m.group(2))) if m else (-1, -1)


_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)((?:\.[A-Z0-9_]+)*)\s*([^;]*);")
_BRANCH = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?BRA\b[^;]*?0x([0-9a-f]+)")


def _address(line: str) -> int | None:
    m = _INSTRUCTION.search(line)
    return int(m.group(1), 16) if m else None


def _branch(line: str) -> tuple[int, bool] | None:
    """A branch's target address and whether it is predicated; None for any other line."""
    m = _BRANCH.search(line)
    return (int(m.group(2), 16), bool(m.group(1))) if m else None


def opcodes(lines: list[str]) -> collections.Counter:
    """Instructions per opcode (no modifiers)."""
    return collections.Counter(m.group(2) for m in map(_INSTRUCTION.search, lines) if m)


def main_loop(sass: str) -> list[str]:
    """The key-tile loop: the shortest backward-branch body that holds a QGMMA and no EXIT (in the Gluon kernel
    each math warpgroup has its own, a few instructions apart; the longer bodies around them are the kernel's
    outer regions and the out-of-line barrier-wait trampolines)."""
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


def skipped_lines(loop: list[str]) -> set[int]:
    """Indices of the loop's instructions that a predicated forward branch to a target inside the loop jumps over
    (the O rescale a warp skips when no row of it rolled back)."""
    addr = [a for a in map(_address, loop) if a is not None]
    skipped: set[int] = set()
    for here, line in zip(addr, loop):
        branch = _branch(line)
        if branch and branch[1] and here < branch[0] <= addr[-1]:
            skipped |= {i for i, a in enumerate(addr) if here < a < branch[0]}
    return skipped


_GEMM_SYNC = {"QGMMA", "HGMMA", "WARPGROUP", "BAR", "SYNCS", "STSM", "DEPBAR", "WARPSYNC", "FENCE", "R2UR", "BRA",
              "NOP", "CCTL", "MEMBAR", "ELECT"}
_NARROWING = {"F2FP", "PRMT", "HMUL2", "HFMA2", "HADD2", "I2IP", "F2IP"}
_STAGE_A_IMMEDIATES = ("192", "1024.935546875", "0.0009765625")  # P_BASE, P_SAT_BASE and the skeleton's 2^-10
_SHIFT_TO_HIGH_HALF = re.compile(  # a BF16 pattern moved into a float32's high half (and to P's scale by an addend)
    r"(?:SHF\.L\.U32 R\d+, R\d+, 0x10, RZ|IMAD(?:\.U32|\.SHL\.U32)? R\d+, R\d+, -?0x10000, -?R[Z\d]+"
    r"|LEA R\d+, R\d+, -?R\d+, 0x10)$")


def step_of(line: str) -> str:
    """The step a loop instruction belongs to (one of STEPS), from its opcode and operands: the score reduction
    (float, integer or packed maxima and their shuffles), Stage-A (the clamping FFMA and the add that rounds the
    pattern, the conventional policy's MUFU exponential, or the skeleton's scale), the narrowing of P (the shift or
    multiply-add that makes a BF16 pattern a float32, the packed converts and moves), the O update (the FFMA that
    accumulates PV into O and the rescale's FMUL, its vote and tests), the GEMMs and their synchronisation, and the
    per-row bookkeeping (everything else)."""
    m = _INSTRUCTION.search(line)
    if not m:
        raise ValueError(f"not an instruction: {line!r}")
    operands = m.group(4).replace(".reuse", "").strip()  # the operand-reuse cache hint is no operand
    op, mods, args = m.group(2), m.group(3), [a.strip() for a in operands.split(",")]
    text = f"{op}{mods} {operands}"
    if op in ("FMNMX", "HMNMX2", "SHFL", "VIMNMX3") or (op in ("VIMNMX", "IMNMX") and "16X2" in mods) \
            or (op == "VIMNMX" and all(re.fullmatch(r"R\d+", a) for a in args[1:3])):
        return "reduction"
    if (op == "FFMA" and ".SAT" in mods) or op == "MUFU" \
            or (op in ("FADD", "FMUL") and len(args) == 3 and args[2] in _STAGE_A_IMMEDIATES):
        return "stage_a"
    if op in _NARROWING or _SHIFT_TO_HIGH_HALF.match(text):
        return "narrowing"
    registers_only = len(args) == 4 and all(a.startswith("R") for a in args[1:3])
    if (op == "FFMA" and registers_only and args[0] == args[3] != args[1]) \
            or (op == "FMUL" and len(args) == 3 and args[0] == args[1] and args[2].startswith("R")) \
            or op == "VOTE" or (op == "FSETP" and "1" in args):
        return "o_update"
    if op in _GEMM_SYNC or op.startswith("U"):
        return "gemm_sync"
    return "bookkeeping"


@dataclass(frozen=True)
class LoopCount:
    """One variant's key-tile loop: instructions in it, those a warp may skip, and the issued ones per step."""

    variant: str
    loop: int
    skippable: int
    steps: dict[str, int]
    opcodes: dict[str, int]
    registers: int
    qgmma: int

    @property
    def issued(self) -> int:
        """Instructions a warp issues per key tile where no row of it rolled back."""
        return self.loop - self.skippable


def count_loop(sass: str, variant: str, regs: int = -1) -> LoopCount:
    """The loop count of one variant's SASS, issued instructions split by step (the skipped ones left out)."""
    loop = main_loop(sass)
    if not loop:
        raise ValueError(f"{variant}: no key-tile loop (a backward branch around a QGMMA) in the SASS")
    skipped = skipped_lines(loop)
    steps = collections.Counter(step_of(line) for i, line in enumerate(loop) if i not in skipped)
    ops = opcodes(loop)
    return LoopCount(variant, len(loop), len(skipped), {s: steps.get(s, 0) for s in STEPS}, dict(sorted(ops.items())),
                     regs, ops.get("QGMMA", 0))


def count_variants(names: list[str], engine: str = GLUON, out: str = "/tmp/fsbench-sass") -> list[LoopCount]:
    """Compile each variant (a kernel shared by two variants once), write its .cubin and .sass under `out`, count
    its loop."""
    unknown = sorted(set(names) - set(VARIANTS))
    if unknown:
        raise ValueError(f"unknown variant(s) {', '.join(unknown)}; known: {', '.join(VARIANTS)}")
    os.makedirs(out, exist_ok=True)
    compiled: dict[str, tuple[str, int]] = {}
    counts = []
    for name in names:
        variant = VARIANTS[name]
        if engine == TRITON and variant.skeleton:
            continue
        key = repr((sorted(variant.constexprs().items()), variant.skeleton))
        if key not in compiled:
            kernel = compile_variant(variant, engine)
            sass = sass_of(kernel.asm["cubin"], out, name)
            with open(os.path.join(out, f"{name}.sass"), "w") as f:
                f.write(sass)
            compiled[key] = (sass, registers(out, name)[0])
        sass, regs = compiled[key]
        counts.append(count_loop(sass, name, regs))
    return counts


def format_table(counts: list[LoopCount]) -> str:
    """Issued instructions per warp and key tile by step, the total, the skippable ones and the excess over the
    skeleton (where it was counted)."""
    base = next((c.issued for c in counts if c.variant == BASELINE), None)
    head = f"{'variant':<18}" + "".join(f"{s:>13}" for s in STEPS) + f"{'issued':>8}{'skippable':>11}{'over skel.':>12}"
    lines = [head]
    for c in counts:
        over = "-" if base is None else f"{c.issued - base:+d}"
        lines.append(f"{c.variant:<18}" + "".join(f"{c.steps[s]:>13}" for s in STEPS)
                     + f"{c.issued:>8}{c.skippable:>11}{over:>12}")
    return "\n".join(lines)


def as_json(counts: list[LoopCount], engine: str) -> dict[str, Any]:
    import triton

    return {"engine": engine, "triton_version": triton.__version__, "target": "sm_90", "baseline": BASELINE,
            "variants": [{"variant": c.variant, "issued": c.issued, "loop": c.loop, "skippable": c.skippable,
                          "steps": c.steps, "registers": c.registers, "qgmma": c.qgmma, "opcodes": c.opcodes}
                         for c in counts]}
