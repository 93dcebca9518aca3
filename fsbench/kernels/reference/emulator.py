"""The PyTorch emulator of Fused-Softmax attention: the numerical definition every fast kernel is
checked against (paper Algorithm 1 and Table 3).

For each query row the keys are streamed in tiles of N=128. The emulator processes a few tiles at a
time; every quantization decision (block scales, Stage-A patterns, gate, rollback) is made per tile
exactly as Algorithm 1 makes it, and only the float32 accumulation order differs from a one-tile loop.
Memory stays O(rows x chunk) per head group, so (1,40,75600,128) runs on one H200.

The frozen reference lies on the proxy's pattern grid (paper Section 4.1: a reference above the true maximum
"only scales subsequent probabilities"): each row keeps the integer offset c = round(D - 2^M m0) of its first
tile's maximum m0, every pattern is round(2^M x + c), the gate and the rollback shift are read off the tile's
maximum pattern in integers, and a rollback is the exact shift c -= 2^M delta (`schraudolph.grid_offset`).
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, fields

import torch

from fsbench.kernels.constants import LOG2E, TRIP_DOUBLINGS
from fsbench.kernels.reference.formats import (
    E2M1,
    E2M3,
    E4M3,
    quantize_mx,
    quantize_p_fp8,
    quantize_per_tensor_fp8,
)
from fsbench.kernels.reference.hadamard import rotate
from fsbench.kernels.reference.schraudolph import (
    EPSILON,
    gate_pattern,
    get_proxy,
    grid_offset,
    grid_pattern,
    grid_reference,
    held_offset,
    read_pattern,
    rollback_shift,
    stage_a,
)
from fsbench.kernels.stats import AttentionStats


@dataclass(frozen=True)
class EmulatorOptions:
    """The ablation switches of the paper's Table 4 (all on = the complete Fused-Softmax pipeline)."""

    rowsum_gemm: bool = True        # row sum from the quantized P (a GEMM with ones) instead of fp32 P
    frozen_max: bool = True         # max seeded from tile 0 and frozen; off = online softmax
    schraudolph: bool = True        # Stage-A Schraudolph exponential; off = exact exp2
    proxy: str = "u16"              # Schraudolph proxy: u32, u16 (read as BF16), u16fp16, u8 (read as E4M3)
    gate_doublings: float | None = 32   # overflow gate 2^gate on the frozen max; None disables it
    hadamard: bool = True           # rotate Q and K (quantized formats only)
    sm_scale: float | None = None   # softmax scale, default 1/sqrt(head_dim)
    epsilon: float = EPSILON        # Schraudolph offset
    tile_n: int = 128               # key tile
    block_m: int = 128              # query tile of one workgroup (for rollback statistics)
    chunk_elements: int = 1 << 26   # score elements materialised at once

    @classmethod
    def from_kwargs(cls, options: dict) -> EmulatorOptions:
        known = {f.name for f in fields(cls)}
        unknown = set(options) - known
        if unknown:
            raise ValueError(f"unknown attention option(s) {sorted(unknown)}; known: {sorted(known)}")
        opts = cls(**options)
        get_proxy(opts.proxy)
        if opts.gate_doublings is not None and not opts.gate_doublings > 0:
            raise ValueError(f"gate_doublings must be positive or None, got {opts.gate_doublings}")
        if opts.tile_n % 32 or opts.tile_n <= 0:
            raise ValueError(f"tile_n must be a positive multiple of 32, got {opts.tile_n}")
        return opts


def _bf16(x: torch.Tensor) -> torch.Tensor:
    """Round float32 to bfloat16 (nearest, ties to even) with integer ops on the bits: the same result as
    a cast, but one that torch.compile cannot drop as a no-op round trip, as it does with casts."""
    bits = x.float().view(torch.int32)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & -0x10000
    return bits.view(torch.float32)


@dataclass(frozen=True)
class OperandConfig:
    """How one format quantizes Q and K (along head_dim), V (along the sequence) and P (per key tile)."""

    qk: Callable[[torch.Tensor], torch.Tensor]
    v: Callable[[torch.Tensor], torch.Tensor]
    p: Callable[[torch.Tensor], torch.Tensor]
    rotates: bool


OPERANDS = {
    "bf16": OperandConfig(qk=_bf16, v=_bf16, p=_bf16, rotates=False),
    "mxfp8": OperandConfig(qk=lambda x: quantize_mx(x, E4M3, -1), v=quantize_per_tensor_fp8,
                           p=quantize_p_fp8, rotates=True),
    "mxfp6": OperandConfig(qk=lambda x: quantize_mx(x, E2M3, -1), v=lambda x: quantize_mx(x, E2M3, -2),
                           p=lambda p: quantize_mx(p, E2M3, -1), rotates=True),
    "mxfp4": OperandConfig(qk=lambda x: quantize_mx(x, E2M1, -1), v=lambda x: quantize_mx(x, E2M1, -2),
                           p=lambda p: quantize_mx(p, E2M3, -1), rotates=True),
}


def quantize_operands(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, fmt: str,
                      opts: EmulatorOptions) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pre-scale Q by sm_scale*log2(e), rotate Q and K, quantize all three (BHSD, float32 out)."""
    cfg = OPERANDS[fmt]
    sm_scale = opts.sm_scale if opts.sm_scale is not None else q.shape[-1] ** -0.5
    qs, ks = q.float() * (sm_scale * LOG2E), k.float()
    if cfg.rotates and opts.hadamard:
        qs, ks = rotate(qs), rotate(ks)
    return cfg.qk(qs), cfg.qk(ks), cfg.v(v)


class _RowState:
    """Running max m, row sum l and output accumulator o of a group of rows (float32)."""

    def __init__(self, rows: int, sq: int, d: int, device: torch.device):
        self.m = torch.full((rows, sq), -math.inf, device=device)
        self.c = torch.zeros(rows, sq, dtype=torch.float64, device=device)  # the frozen reference's offset
        self.l = torch.zeros(rows, sq, device=device)
        self.o = torch.zeros(rows, sq, d, device=device)

    def rescale(self, m_new: torch.Tensor) -> None:
        factor = torch.exp2(self.m - m_new).nan_to_num(0.0)
        self.o *= factor[..., None]
        self.l *= factor
        self.m = m_new

    def shift(self, delta: torch.Tensor) -> None:
        """A rollback by delta whole doublings: c moves down 2^M delta patterns, O and l scale by 2^-delta."""
        self.o *= torch.exp2(-delta.float())[..., None]
        self.l *= torch.exp2(-delta.float())


class _Tally:
    def __init__(self, block_m: int):
        self.block_m, self.rollbacks, self.gate_trips = block_m, 0, 0

    def workgroups(self, rows_hit: torch.Tensor) -> int:
        """Number of (head, query tile) workgroups with any row set in `rows_hit` (rows, sq)."""
        pad = (-rows_hit.shape[1]) % self.block_m
        hit = torch.nn.functional.pad(rows_hit, (0, pad)).unflatten(1, (-1, self.block_m))
        return int(hit.any(-1).sum())


def _tile_probabilities(x: torch.Tensor, ref: torch.Tensor, fmt: str, schraudolph: bool, proxy: str,
                        epsilon: float, grid: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Stage-A and Stage-B of a chunk of key tiles: returns (P_hat, rowsum(P_hat), rowsum(P_tilde)).

    x: (rows, sq, G, N) base-2 scores with masked keys at -inf; ref: (rows, sq, G) with `grid` the frozen
    reference's integer pattern offset c of each tile (float64), otherwise the max each tile is shifted by."""
    px = get_proxy(proxy)
    if grid and schraudolph:
        p_tilde = read_pattern(grid_pattern(x, ref[..., None], px), px)
    elif grid:
        p_tilde = torch.exp2(x.double() - grid_reference(ref, px, epsilon)[..., None]).float()
    else:
        shifted = x - ref[..., None]
        p_tilde = stage_a(shifted, px, epsilon) if schraudolph else torch.exp2(shifted)
    p_hat = OPERANDS[fmt].p(p_tilde)
    return p_hat, p_hat.sum(-1), p_tilde.sum(-1)


@functools.cache
def fused_tile_probabilities():
    """`_tile_probabilities` fused by torch.compile."""
    return torch.compile(_tile_probabilities, dynamic=False)


def _tile_probabilities_for(device: torch.device, opts: EmulatorOptions):
    """On CUDA the elementwise pipeline is fused (it is some 30 passes over every score otherwise); the
    U32 proxy, whose pattern needs float64, stays eager."""
    if device.type != "cuda" or (opts.schraudolph and opts.proxy == "u32"):
        return _tile_probabilities
    return fused_tile_probabilities()


def _accumulate_frozen(state: _RowState, x: torch.Tensor, v: torch.Tensor, fmt: str, opts: EmulatorOptions) -> None:
    """Fold key tiles into the state at the frozen reference's offset c. x: (rows, sq, G, N); v: (rows, G*N, d)."""
    tile_probabilities = _tile_probabilities_for(x.device, opts)
    c = held_offset(state.c)[..., None].expand(x.shape[:-1])  # held here: torch.compile may drop a cast round trip
    p_hat, sum_hat, sum_tilde = tile_probabilities(x, c, fmt, opts.schraudolph, opts.proxy, opts.epsilon, True)
    state.l += (sum_hat if opts.rowsum_gemm else sum_tilde).sum(-1)
    state.o += torch.bmm(p_hat.flatten(2), v)


def _accumulate(state: _RowState, x: torch.Tensor, mt: torch.Tensor, v: torch.Tensor, fmt: str,
                opts: EmulatorOptions) -> None:
    """Fold key tiles into the state, online. x: (rows, sq, G, N); mt: (rows, sq, G); v: (rows, G*N, d)."""
    tile_probabilities = _tile_probabilities_for(x.device, opts)
    p_hat, sum_hat, sum_tilde = tile_probabilities(x, mt, fmt, opts.schraudolph, opts.proxy, opts.epsilon, False)
    m_new = mt[..., -1]
    weight = torch.exp2(mt - m_new[..., None])  # 1 for a frozen max; the online rescale otherwise
    state.rescale(m_new)
    state.l += ((sum_hat if opts.rowsum_gemm else sum_tilde) * weight).sum(-1)
    state.o += torch.bmm((p_hat * weight[..., None]).flatten(2), v)


def _process_chunk(state: _RowState, x: torch.Tensor, v: torch.Tensor, fmt: str, opts: EmulatorOptions,
                   tally: _Tally, first: bool) -> None:
    tile_max = x.amax(-1)  # (rows, sq, G)
    if not opts.frozen_max:
        mt = torch.cummax(torch.maximum(tile_max, state.m[..., None]), dim=-1).values
        _accumulate(state, x, mt, v, fmt, opts)
        return
    px = get_proxy(opts.proxy)
    if first:  # Algorithm 1 line 2: the frozen reference, seeded from tile 0 and placed on the pattern grid
        state.c = grid_offset(tile_max[..., 0], px, opts.epsilon)
    top = grid_pattern(tile_max, state.c[..., None], px)  # each tile's maximum pattern
    gate = opts.gate_doublings
    if gate is None:
        trip = gate_pattern(TRIP_DOUBLINGS, px, opts.epsilon)
        tally.gate_trips += sum(tally.workgroups(top[..., g] > trip) for g in range(x.shape[2]))
    if gate is None or not bool((top > gate_pattern(gate, px, opts.epsilon)).any()):
        _accumulate_frozen(state, x, v, fmt, opts)
        return
    n = x.shape[-1]
    for g in range(x.shape[2]):  # the rare rollback path, one tile at a time
        top_g = grid_pattern(tile_max[..., g], state.c, px)
        fire = top_g > gate_pattern(gate, px, opts.epsilon)
        if bool(fire.any()):
            tally.rollbacks += tally.workgroups(fire)
            delta = torch.where(fire, rollback_shift(top_g, px, opts.epsilon), 0)
            state.c -= float(1 << px.mbits) * delta.double()  # exact: an integer shift of the offset
            state.shift(delta)
        _accumulate_frozen(state, x[:, :, g:g + 1], v[:, g * n:(g + 1) * n], fmt, opts)


def emulate(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, fmt: str = "mxfp8",
            **options) -> tuple[torch.Tensor, AttentionStats]:
    """Fused-Softmax attention of BHSD tensors in `fmt`, emulated; returns (output in q's dtype, stats)."""
    if fmt not in OPERANDS:
        raise ValueError(f"unknown attention format {fmt!r}; expected one of {', '.join(OPERANDS)}")
    opts = EmulatorOptions.from_kwargs(options)
    b, h, sq, d = q.shape
    sk, n = k.shape[2], opts.tile_n
    qh, kh, vh = quantize_operands(q, k, v, fmt, opts)
    qh, kh, vh = (t.flatten(0, 1) for t in (qh, kh, vh))
    pad = (-sk) % n
    kh = torch.nn.functional.pad(kh, (0, 0, 0, pad))
    vh = torch.nn.functional.pad(vh, (0, 0, 0, pad))
    tiles = (sk + pad) // n
    rows_per_group = max(1, min(b * h, opts.chunk_elements // (sq * n)))
    tiles_per_chunk = max(1, min(tiles, opts.chunk_elements // (rows_per_group * sq * n)))
    tally = _Tally(opts.block_m)
    out = torch.empty(b * h, sq, d, device=q.device)
    key_valid = torch.arange(tiles * n, device=q.device) < sk
    for r0 in range(0, b * h, rows_per_group):
        rows = slice(r0, r0 + rows_per_group)
        state = _RowState(qh[rows].shape[0], sq, d, q.device)
        for t0 in range(0, tiles, tiles_per_chunk):
            keys = slice(t0 * n, min(tiles, t0 + tiles_per_chunk) * n)
            x = torch.bmm(qh[rows], kh[rows, keys].transpose(1, 2))
            x = x.masked_fill(~key_valid[keys], -math.inf).unflatten(-1, (-1, n))
            _process_chunk(state, x, vh[rows, keys], fmt, opts, tally, first=t0 == 0)
        out[rows] = state.o / state.l[..., None]
    out = out.unflatten(0, (b, h))
    stats = AttentionStats(key_tiles=tiles, workgroup_tiles=b * h * -(-sq // opts.block_m) * tiles,
                           rollbacks=tally.rollbacks, gate_trips=tally.gate_trips,
                           overflowed=not bool(torch.isfinite(out).all()))
    return out.to(q.dtype), stats
