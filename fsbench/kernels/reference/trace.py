"""The fused softmax of given base-2 scores, tile by tile, as the integers a kernel computes: the frozen reference's
pattern offset c, each tile's maximum pattern, gate and rollback shift delta, and P's E4M3 codes and scale
exponent E (mxfp8). The emulator's definition (`emulator._process_chunk`) written one row tile at a time, so a
kernel's per-tile values can be compared with it bit for bit, and crafted scores can reach every edge case.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from fsbench.kernels.reference.emulator import OPERANDS, EmulatorOptions
from fsbench.kernels.reference.formats import E4M3, E8M0_MAX, E8M0_MIN, floor_log2
from fsbench.kernels.reference.schraudolph import (
    gate_pattern,
    get_proxy,
    grid_offset,
    grid_pattern,
    read_pattern,
    rollback_shift,
)


@dataclass(frozen=True)
class Trace:
    """Per row and key tile (rows, T) unless noted; integers as int64."""

    offset: torch.Tensor     # c each tile's patterns are taken on (before that tile's rollback)
    top: torch.Tensor        # the tile's maximum pattern on that offset
    delta: torch.Tensor      # the rollback shift the tile applies (0 where the gate does not fire)
    patterns: torch.Tensor   # (rows, T, N) the patterns after the rollback, before wrapping to the proxy
    p: torch.Tensor          # (rows, T, N) P as the format quantizes it (float32)
    exponent: torch.Tensor   # P's per-row scale exponent E (mxfp8: floor(log2 max P~) - 7, clamped)
    codes: torch.Tensor      # (rows, T, N) P / 2^E as E4M3 codes (uint8; mxfp8 only, else empty)


def p_exponent(p_tilde: torch.Tensor) -> torch.Tensor:
    """mxfp8 P's scale exponent per row of `p_tilde` (last axis): `formats.quantize_p_fp8`'s."""
    amax = p_tilde.float().abs().amax(dim=-1)
    return (floor_log2(amax) - (E4M3.emax - 1)).clamp(E8M0_MIN, E8M0_MAX).to(torch.int64)


def trace(x: torch.Tensor, fmt: str = "mxfp8", **options) -> Trace:
    """Fused softmax (frozen reference, Schraudolph Stage-A) of float32 base-2 scores x (rows, T * N), masked
    keys at -inf, tile by tile."""
    opts = EmulatorOptions.from_kwargs(options)
    if not opts.frozen_max or not opts.schraudolph:
        raise ValueError("a trace follows the fused softmax: frozen_max and schraudolph must be on")
    px, n = get_proxy(opts.proxy), opts.tile_n
    tiles = x.float().unflatten(-1, (-1, n))
    tile_max = tiles.amax(-1)
    c = grid_offset(tile_max[:, 0], px, opts.epsilon)
    record: dict[str, list[torch.Tensor]] = {k: [] for k in ("offset", "top", "delta", "patterns", "p", "exponent")}
    for t in range(tiles.shape[1]):
        top = grid_pattern(tile_max[:, t], c, px)
        delta = torch.zeros_like(top)
        if opts.gate_doublings is not None:
            fire = top > gate_pattern(opts.gate_doublings, px, opts.epsilon)
            delta = torch.where(fire, rollback_shift(top, px, opts.epsilon), 0)
        record["offset"].append(c.to(torch.int64))
        record["top"].append(top)
        record["delta"].append(delta)
        c = c - float(1 << px.mbits) * delta.double()
        patterns = grid_pattern(tiles[:, t], c[:, None], px)
        p_tilde = read_pattern(patterns, px)
        record["patterns"].append(patterns)
        record["p"].append(OPERANDS[fmt].p(p_tilde))
        record["exponent"].append(p_exponent(p_tilde))
    out = {k: torch.stack(v, 1) for k, v in record.items()}
    codes = torch.empty(0, dtype=torch.uint8)
    if fmt == "mxfp8":
        scaled = out["p"] / torch.exp2(out["exponent"].double()).float()[..., None]
        codes = scaled.to(torch.float8_e4m3fn).view(torch.uint8)
    return Trace(codes=codes, **out)
