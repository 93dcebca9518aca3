"""Tile and launch-shape choice for the Hopper attention kernels (FA3's `tile_size.h`, in Python).

The numerics fix two tile sizes: keys stream in tiles of 128 (P's scales and the gate are per key tile)
and the rollback statistics count query tiles of 128 rows. Only the warps and the pipelining depth are
free, so the autotuner sees a handful of configurations, pruned by `keep`.
"""
from __future__ import annotations

from dataclasses import dataclass

BLOCK_M = 128  # query rows per program: two warpgroups of 64 rows (wgmma m64)
BLOCK_N = 128  # keys per tile: the emulator's tile_n
PREPASS_ROWS = 128  # rows quantized per prepass program: one key tile, so K's tile scale is local
SMEM_LIMIT = 227 * 1024  # bytes of shared memory one H100/H200 block may use
HEAD_DIMS = (64, 128)


@dataclass(frozen=True)
class Tiling:
    """One launch shape of the attention kernel."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int

    def smem_bytes(self, head_dim: int) -> int:
        """FP8 Q tile plus `num_stages` K and V tiles (1 byte per element)."""
        return self.block_m * head_dim + self.num_stages * 2 * self.block_n * head_dim


def candidates() -> list[Tiling]:
    """Configurations the autotuner may try: 2 warpgroups (one per 64 rows), 2 or 3 K/V stages."""
    return [Tiling(BLOCK_M, BLOCK_N, num_warps=8, num_stages=s) for s in (2, 3)]


def keep(tiling: Tiling, head_dim: int) -> bool:
    """Drop shapes whose K/V ring does not fit in shared memory (with room for layout conversions)."""
    return tiling.smem_bytes(head_dim) * 2 <= SMEM_LIMIT


def choose(head_dim: int) -> list[Tiling]:
    """The pruned candidate list for `head_dim`; raises ValueError for head dims the kernel lacks."""
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"the Triton attention kernel supports head_dim {HEAD_DIMS}, got {head_dim}")
    return [t for t in candidates() if keep(t, head_dim)]
