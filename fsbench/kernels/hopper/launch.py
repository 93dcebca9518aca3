"""Host side of the Hopper Fused-Softmax kernels: validate, quantize (prepass), launch, collect stats.

`triton_attention(q, k, v, fmt, **options)` takes BHSD tensors (views are fine) and returns the BHSD
output in q's dtype with `AttentionStats`. The kernel implements the complete Fused-Softmax pipeline
(options at their defaults) and the conventional FP8 baseline (`softmax="conventional"`, or the
emulator's rowsum_gemm=frozen_max=schraudolph=False); other ablation mixes raise ValueError. For
mxfp6/mxfp4, `mx_p_scale="block"` (default: P's E8M0 per 32 keys, the emulator's definition) or "row"
(one per row and key tile: fewer instructions, coarser P for blocks below the row's maximum).
Float32 inputs are rounded to bfloat16 before the prepass. `kernel=GLUON_KERNEL` launches the same
computation written in Gluon (`kernels.hopper.gluon`): two math warpgroups per program take turns at the
tensor cores (FA3's ping-pong), which plain Triton cannot express (results/log/). The
kernels are typed values (`HopperKernel`); `kernels.registry` names them.
"""
from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from fsbench.kernels.constants import D_BIAS, E4M3_MAX, LOG2E, MX_FORMATS, TRIP_DOUBLINGS
from fsbench.kernels.hopper import tiling
from fsbench.kernels.prologue import Prologue, check_prologue
from fsbench.kernels.reference.schraudolph import PROXIES, gate_pattern
from fsbench.kernels.stats import AttentionStats

FORMATS = MX_FORMATS
SOFTMAX = ("fused", "conventional")
MX_P_SCALES = ("block", "row")
_OPTIONS = {"softmax", "rowsum_gemm", "frozen_max", "schraudolph", "proxy", "gate_doublings", "hadamard",
            "sm_scale", "mx_p_scale"}


@dataclass(frozen=True)
class KernelOptions:
    """What one launch computes, resolved from `kernels.attention` options."""

    fmt: str
    fused: bool
    gate_doublings: float | None
    hadamard: bool
    sm_scale: float | None
    mx_p_scale: str = "block"
    skeleton: bool = False  # the Gluon kernel's tiles and GEMMs without the softmax (`skeleton`): not attention

    @property
    def gate_pattern(self) -> int:
        """Largest Stage-A pattern below the gate (or the trip cap): pattern > this fires."""
        doublings = TRIP_DOUBLINGS if self.gate_doublings is None else self.gate_doublings
        return gate_pattern(doublings, PROXIES["u16"])

    @property
    def p_format(self) -> tuple[int, int, bool, bool]:
        """(P_EMAX, P_SHIFT, P_CLAMP, P_BLOCKS) of the kernel. mxfp8's P scale is
        2^(floor(log2 rowmax) - 7) per row and key tile (row max in [128, 256), never saturated). MX P is
        E2M3 with E8M0 = floor(log2 amax) - 2, clamped at 7.5: per 32 keys as the emulator defines it
        ("block", stored in units 2^(E_row - 5)), or one per row and key tile ("row", stored in units
        2^(E_row + 6): faster, coarser for blocks below the row's top block)."""
        if self.fmt == "mxfp8":
            return 7, 0, False, False
        return (2, -5, True, True) if self.mx_p_scale == "block" else (2, 6, True, False)


def parse_options(fmt: str, options: dict[str, Any]) -> KernelOptions:
    """Resolve the emulator-style switches to the two softmax policies the kernel has."""
    if fmt not in FORMATS:
        raise ValueError(f"the Triton kernel computes {', '.join(FORMATS)}, not {fmt!r} (bf16: impl='sdpa')")
    unknown = set(options) - _OPTIONS
    if unknown:
        raise ValueError(f"unknown attention option(s) {sorted(unknown)}; known: {sorted(_OPTIONS)}")
    softmax = options.get("softmax", "fused")
    if softmax not in SOFTMAX:
        raise ValueError(f"softmax must be one of {SOFTMAX}, got {softmax!r}")
    switches = tuple(bool(options.get(name, softmax == "fused"))
                     for name in ("rowsum_gemm", "frozen_max", "schraudolph"))
    if switches == (False, False, False):
        softmax = "conventional"
    elif switches != (True, True, True) or softmax == "conventional":
        raise ValueError("the Triton kernel implements the complete Fused-Softmax pipeline and the conventional "
                         "baseline (rowsum_gemm=frozen_max=schraudolph=False); use impl='emulate' for other "
                         f"ablations, got rowsum_gemm, frozen_max, schraudolph = {switches}")
    if options.get("proxy", "u16") != "u16":
        raise ValueError(f"the Triton kernel uses the u16 (BF16) Schraudolph proxy, got {options['proxy']!r}")
    if softmax == "conventional" and fmt != "mxfp8":
        raise ValueError(f"the conventional FP8 baseline quantizes P per row (mxfp8's rule), not for {fmt}")
    mx_p_scale = options.get("mx_p_scale", "block")
    if mx_p_scale not in MX_P_SCALES:
        raise ValueError(f"mx_p_scale must be one of {MX_P_SCALES}, got {mx_p_scale!r}")
    gate = options.get("gate_doublings", 32)
    if gate is not None and not gate > 0:
        raise ValueError(f"gate_doublings must be positive or None, got {gate}")
    return KernelOptions(fmt=fmt, fused=softmax == "fused", gate_doublings=gate,
                         hadamard=bool(options.get("hadamard", True)), sm_scale=options.get("sm_scale"),
                         mx_p_scale=mx_p_scale)


def skeleton(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The measured limit of the Gluon kernel's schedule under the power cap: the mxfp8 prepass, then the same
    tiles, ring, turns, both FP8 GEMMs, O update and row-sum MMA as the fused kernel, with P = E4M3(S / 1024)
    instead of the softmax. The output is not attention."""
    check_tensors(q, k, v)
    if q.shape[-1] not in GLUON_KERNEL.head_dims:
        raise ValueError(f"the skeleton is the Gluon kernel's: head_dim {GLUON_KERNEL.head_dims}, got {q.shape[-1]}")
    opts = KernelOptions(fmt="mxfp8", fused=True, gate_doublings=32, hadamard=True, sm_scale=None, skeleton=True)
    return forward(q, k, v, opts, GLUON_KERNEL)[0]


def check_tensors(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Shapes and device the kernel handles: BHSD, same batch/heads/head_dim, k and v alike, sm_90."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError("q, k and v must be 4-D BHSD tensors")
    if k.shape != v.shape or q.shape[:2] != k.shape[:2] or q.shape[3] != k.shape[3]:
        raise ValueError(f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} disagree (BHSD)")
    tiling.choose(q.shape[3])
    if q.device.type != "cuda":
        raise ValueError(f"impl='triton' runs on a CUDA sm_90 GPU, not {q.device}; use impl='emulate'")
    if torch.cuda.get_device_capability(q.device) != (9, 0):
        raise ValueError("impl='triton' needs a Hopper GPU (sm_90: FP8 wgmma); use impl='emulate'")


def triton_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, fmt: str, *, stats: bool = True,
                     kernel: HopperKernel | None = None, **options: Any) -> tuple[torch.Tensor, AttentionStats | None]:
    """Fused-Softmax (or conventional) FP8 attention of BHSD tensors on Hopper with `kernel` (default
    TRITON_KERNEL); returns (out, stats).

    With stats=False nothing waits for the GPU (the statistics need two host syncs and a pass over the
    output), and the second item is None."""
    kernel = TRITON_KERNEL if kernel is None else kernel
    if not isinstance(kernel, HopperKernel):
        raise ValueError(f"kernel must be a HopperKernel (TRITON_KERNEL or GLUON_KERNEL), got {kernel!r}")
    opts = parse_options(fmt, options)
    if q.shape[-1] not in kernel.head_dims:
        raise ValueError(f"the {kernel.label} kernel supports head_dim {kernel.head_dims}, got {q.shape[-1]}; "
                         "use the Triton kernel")
    check_tensors(q, k, v)
    out, flags, tiles = forward(q, k, v, opts, kernel)
    if not stats:
        return out, None
    b, h, sq = q.shape[:3]
    query_tiles = -(-sq // tiling.STAT_M)
    fired = int(flags.sum()) if opts.fused else 0
    return out, AttentionStats(key_tiles=tiles, workgroup_tiles=b * h * query_tiles * tiles,
                               rollbacks=fired if opts.gate_doublings is not None else 0,
                               gate_trips=fired if opts.gate_doublings is None else 0,
                               overflowed=not bool(torch.isfinite(out).all()))


def is_bshd(x: torch.Tensor) -> bool:
    """Whether the BHSD-indexed `x` is a BSHD tensor underneath (heads closer together than rows)."""
    return x.shape[1] > 1 and x.stride(1) < x.stride(2)


@functools.lru_cache(maxsize=8)
def _hadamard_pm1(d: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """The unnormalized (+-1) Hadamard matrix on `device` in `dtype` (exact in 16 bits), made once rather than
    copied there every call."""
    from fsbench.kernels.reference.hadamard import hadamard_matrix

    return (hadamard_matrix(d, device) * d ** 0.5).round().to(dtype).contiguous()


def _channel_rows(x: torch.Tensor) -> torch.Tensor:
    """x (B, S, H, D) with each token's H*D channels contiguous (a view of the projection is), else a copy."""
    d = x.shape[3]
    return x if x.stride(3) == 1 and (x.shape[2] == 1 or x.stride(2) == d) else x.contiguous()


def _prologue_tensors(xq: torch.Tensor, xk: torch.Tensor, prologue: Prologue) -> tuple[torch.Tensor, ...]:
    """xq, xk (B, S, H, D) with contiguous channel rows, checked for the kernels: 16-bit projections of one shape,
    float32 RoPE tables."""
    check_prologue(xq, xk, prologue)
    if xq.dtype not in (torch.bfloat16, torch.float16) or xk.dtype != xq.dtype:
        raise ValueError(f"the prologue kernels take 16-bit projections of one dtype, got {xq.dtype}, {xk.dtype}")
    if xq.shape != xk.shape:
        raise ValueError(f"the prologue kernels take q and k of one shape, got {tuple(xq.shape)}, {tuple(xk.shape)}")
    if prologue.tables is not None and {t.dtype for t in prologue.tables} != {torch.float32}:
        raise ValueError("the prologue kernels rotate by float32 cos and sin tables")
    return _channel_rows(xq), _channel_rows(xk)


def _rope_args(prologue: Prologue, filler: torch.Tensor) -> tuple[tuple[torch.Tensor, ...], tuple[int, ...]]:
    """The kernels' RoPE arguments: (cos, sin) and their (position, channel) strides; `filler` and zeros where
    the prologue has no RoPE."""
    tables = prologue.tables
    if tables is None:
        return (filler, filler), (0,) * 4
    return tables, tuple(x for t in tables for x in (t.stride(1), t.stride(3)))


def norm_rope(xq: torch.Tensor, xk: torch.Tensor, prologue: Prologue) -> tuple[torch.Tensor, torch.Tensor]:
    """`kernels.prologue.apply` on the GPU in one pass (`kernels.hopper.norm_rope`): q and k (B, S, H, D)
    contiguous in the projections' dtype from xq, xk (B, S, H, D)."""
    from fsbench.kernels.hopper import norm_rope as nr

    xq, xk = _prologue_tensors(xq, xk, prologue)
    b, s, h, d = xq.shape
    q, k = (torch.empty(xq.shape, dtype=xq.dtype, device=xq.device) for _ in range(2))
    tables, strides = _rope_args(prologue, xq)
    nr.norm_rope_kernel[(-(-b * s // nr.TOKENS),)](
        xq, xk, prologue.wq, prologue.wk, *tables, q, k, xq.stride(0), xq.stride(1), xk.stride(0), xk.stride(1),
        *strides, s, b * s, prologue.eps, HD=h * d, D=d, TOKENS=nr.TOKENS, CHUNK=nr.chunk(h * d),
        ROPE=prologue.rope, num_warps=nr.WARPS, enable_fp_fusion=False)
    return q, k


def quantize(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, opts: KernelOptions,
             kernel: HopperKernel | None = None) -> dict[str, torch.Tensor]:
    """The prepass: E4M3 operands with their group scales, keys in `kernel`'s order (`kernels.hopper.prepass`)."""
    from fsbench.kernels.hopper import prepass as pre

    b, h, sq, d = q.shape
    sk = k.shape[2]
    rows, tiles = tiling.PREPASS_ROWS, tiling.PREPASS_TILES
    nq, nk = -(-sq // rows), -(-sk // rows)
    elem = pre.ELEMENT[opts.fmt]
    emax, mbits, maxn, shift = pre.ELEMENT_PARAMS[elem]
    dev = q.device
    q, k = (x if x.dtype in (torch.bfloat16, torch.float16) else x.to(torch.bfloat16) for x in (q, k))
    sm_scale = opts.sm_scale if opts.sm_scale is not None else d ** -0.5
    fp8 = torch.float8_e4m3fn
    t = {"q": torch.empty(b * h, nq * rows, d, dtype=fp8, device=dev),
         "q_scale": torch.empty(b * h, nq * rows, device=dev),
         "k": torch.empty(b * h, nk * rows, d, dtype=fp8, device=dev),
         "k_scale": torch.empty(b * h, nk, device=dev),
         "v": torch.empty(b * h, d, nk * rows, dtype=fp8, device=dev),
         "v_scale": torch.empty(b * h, nk, device=dev)}
    order = pre.KEY_ORDERS[(TRITON_KERNEL if kernel is None else kernel).key_order]
    consts = dict(D=d, ROWS=rows, ELEM=elem, EMAX=emax, MBITS=mbits, MAXN=maxn, SHIFT=shift, ORDER=order, num_warps=8)
    norm = d ** -0.5 if opts.hadamard else 1.0
    for name, x, scale, n, premul, per_row in (("q", q, "q_scale", nq, sm_scale * LOG2E * norm, True),
                                                 ("k", k, "k_scale", nk, norm, False)):
        pre.quantize_qk_kernel[(-(-n // tiles), b * h)](x, t[name], t[scale], _hadamard_pm1(d, dev, x.dtype),
                                                        *x.stride(), h, x.shape[2], n * rows, n, premul, TILES=tiles,
                                                        ROTATE=opts.hadamard, PER_ROW=per_row, num_stages=2, **consts)
    if opts.fmt == "mxfp8":
        amax = torch.linalg.vector_norm(v, float("inf")).float()  # max |v| in one pass (abs().amax() makes two)
        tensor_scale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax)).reshape(1)
    else:
        tensor_scale = t["v_scale"]
    pre.quantize_v_kernel[(nk, b * h)](v, t["v"], t["v_scale"], tensor_scale, *v.stride(), h, sk, nk * rows, nk,
                                       PER_TENSOR=opts.fmt == "mxfp8", **consts)
    return t


@dataclass(frozen=True)
class Sizes:
    """The kernel's runtime sizes, in its argument order: sequence lengths, padded lengths, statistics tiles,
    key tiles and the gate's Stage-A pattern."""

    s_q: int
    s_k: int
    s_qpad: int
    s_kpad: int
    n_st: int
    n_kt: int
    gate_p: int

    def args(self) -> tuple[int, ...]:
        return (self.s_q, self.s_k, self.s_qpad, self.s_kpad, self.n_st, self.n_kt, self.gate_p)


@dataclass(frozen=True)
class Launch:
    """One attention launch: the prepass's operands (Q, K as [rows, D], V as [D * heads, keys], their scales),
    the output (indexed BHSD, any strides with unit stride along D) and gate flags, the sizes, the (batch x head)
    count and the kernel's constexprs."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    q_scale: torch.Tensor
    k_scale: torch.Tensor
    v_scale: torch.Tensor
    out: torch.Tensor
    flags: torch.Tensor
    sizes: Sizes
    heads: int
    consts: dict[str, Any]

    def tensors(self) -> tuple[torch.Tensor, ...]:
        """The kernel's pointer arguments after the three descriptors, in its order."""
        return (self.q_scale, self.k_scale, self.v_scale, self.out, self.flags)

    def scalars(self) -> tuple[int, ...]:
        """The kernel's integer arguments: the sizes, then the output's heads and its batch, head and row strides."""
        b_stride, h_stride, s_stride, _ = self.out.stride()
        return (*self.sizes.args(), self.out.shape[1], b_stride, h_stride, s_stride)


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, opts: KernelOptions,
            kernel: HopperKernel | None = None) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Prepass and attention kernel; returns (BHSD output, per-workgroup-tile gate flags, key tiles). The output
    is laid out as q is: a BSHD view's output is BSHD underneath, so the caller's transpose back to BSHD is a view
    and needs no copy."""
    b, h, sq, d = q.shape
    sk = k.shape[2]
    bn, stat_m = tiling.BLOCK_N, tiling.STAT_M
    kernel = TRITON_KERNEL if kernel is None else kernel
    ops = quantize(q, k, v, opts, kernel)
    sqp, skp = ops["q"].shape[1], ops["k"].shape[1]  # multiples of PREPASS_ROWS, hence of every query tile
    nst, nk = sqp // stat_m, skp // bn
    out = (torch.empty(b, sq, h, d, dtype=q.dtype, device=q.device).transpose(1, 2) if is_bshd(q) else
           torch.empty(b, h, sq, d, dtype=q.dtype, device=q.device))
    flags = torch.zeros(b * h * nst * nk if opts.fused else 1, dtype=torch.int8, device=q.device)
    p_emax, p_shift, p_clamp, p_blocks = opts.p_format
    sizes = Sizes(sq, sk, sqp, skp, nst, nk, opts.gate_pattern)
    consts = dict(D=d, BN=bn, STAT_M=stat_m, D_BIAS=D_BIAS, FUSED=opts.fused, GATE=opts.gate_doublings is not None,
                  P_EMAX=p_emax, P_SHIFT=p_shift, P_CLAMP=p_clamp, P_BLOCKS=p_blocks)
    if opts.skeleton:  # only then: the kernels without the switch take the same launch
        consts["SKELETON"] = True
    kernel.launch(Launch(ops["q"].view(-1, d), ops["k"].view(-1, d), ops["v"].view(-1, skp), ops["q_scale"],
                         ops["k_scale"], ops["v_scale"], out, flags, sizes, b * h, consts))
    return out, flags, nk


def _launch_triton(run: Launch) -> None:
    """The autotuned Triton kernel (the launch grid follows the configuration's query tile)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    from fsbench.kernels.hopper.triton_fused import attention_kernel

    d, bn, sqp = run.consts["D"], run.consts["BN"], run.sizes.s_qpad
    desc_q = TensorDescriptor.from_tensor(run.q, [tiling.STAT_M, d])  # block set per configuration
    desc_k = TensorDescriptor.from_tensor(run.k, [bn, d])
    desc_v = TensorDescriptor.from_tensor(run.v, [d, bn])
    attention_kernel[lambda meta: (sqp // meta["BM"], run.heads)](desc_q, desc_k, desc_v, *run.tensors(),
                                                                  *run.scalars(), **run.consts)


def _launch_gluon(run: Launch) -> None:
    """The Gluon kernel at its one launch shape (`tiling.GLUON`): each math warpgroup loads half of the
    program's query tile."""
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from fsbench.kernels.hopper.gluon.kernel import attention_kernel

    def descriptor(t: torch.Tensor, block: list[int]) -> TensorDescriptor:
        return TensorDescriptor.from_tensor(t, block, gl.NVMMASharedLayout.get_default_for(block, gl.float8e4nv))

    t, d, bn = tiling.GLUON, run.consts["D"], run.consts["BN"]
    attention_kernel[(run.sizes.s_qpad // t.block_m, run.heads)](
        descriptor(run.q, [t.block_m // 2, d]), descriptor(run.k, [bn, d]), descriptor(run.v, [d, bn]),
        *run.tensors(), *run.scalars(), BM=t.block_m, STAGES=t.num_stages, num_warps=t.num_warps, **run.consts)


GLUON_TRITON = (3, 6)  # the Triton release the Gluon kernel was tested on (results/, setup.cfg's gpu extra)


@functools.cache
def gluon_missing() -> str | None:
    """None where this Triton has the Gluon kernel's language, else what is missing and how to get it."""
    import triton

    need = ".".join(map(str, GLUON_TRITON))
    found = tuple(int(part) for part in re.findall(r"\d+", triton.__version__)[:2])
    if found < GLUON_TRITON:
        return f"triton {triton.__version__} is older than {need}, the Gluon kernel's: pip install 'triton>={need}'"
    try:
        import triton.experimental.gluon.language.nvidia.hopper  # noqa: F401
    except ImportError as exc:
        return f"triton {triton.__version__} has no Gluon for Hopper ({exc}): pip install 'triton>={need}'"
    return None


@dataclass(frozen=True)
class HopperKernel:
    """One kernel the launcher runs: its name in messages, the prepass's key order for it (`prepass.KEY_ORDERS`),
    the head dims it has and its launch function."""

    label: str
    key_order: str
    head_dims: tuple[int, ...]
    launch: Callable[[Launch], None]


TRITON_KERNEL = HopperKernel("Triton", "pv", tiling.HEAD_DIMS, _launch_triton)
GLUON_KERNEL = HopperKernel("Gluon", "thread", (tiling.GLUON_HEAD_DIM,), _launch_gluon)
