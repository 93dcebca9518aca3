"""Tile and launch-shape choice for the Hopper attention kernels (FA3's `tile_size.h`, in Python).

The numerics fix the key tile: keys stream in tiles of 128 (P's scales and the gate are per key tile),
and the rollback statistics count query tiles of 128 rows (STAT_M) whatever the launch's query tile.
The query rows per program, warps, pipelining depth and register cap are free: one program of 128 rows
has two warpgroups that run in lock step (the pipeline's block barriers), while programs of 64 rows that
share an SM (two, or three at 168 registers) drift apart, so one's softmax runs under another's GEMMs.
The autotuner sees a handful, pruned by `keep`.
"""
from __future__ import annotations

from dataclasses import dataclass

STAT_M = 128  # query rows per statistics tile (rollbacks are counted per STAT_M x BLOCK_N tile)
BLOCK_N = 128  # keys per tile: the emulator's tile_n
PREPASS_ROWS = 128  # rows quantized per prepass step: one key tile, so K's tile scale is local
PREPASS_TILES = 4  # steps per Q/K prepass program (two loads in flight): the Hadamard matrix loaded once per four tiles
SMEM_LIMIT = 227 * 1024  # bytes of shared memory one H100/H200 block may use
HEAD_DIMS = (64, 128)


@dataclass(frozen=True)
class Tiling:
    """One launch shape of the attention kernel (max_registers caps registers per thread so that more
    programs share an SM; None leaves the choice to the compiler)."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    max_registers: int | None = None

    def smem_bytes(self, head_dim: int) -> int:
        """FP8 Q tile plus `num_stages` K and V tiles (1 byte per element)."""
        return self.block_m * head_dim + self.num_stages * 2 * self.block_n * head_dim


# the Gluon kernel: 128 rows in two math warpgroups and a TMA one, one program per SM (num_warps counts
# the first math warpgroup only: the other two are warp_specialize workers); 4 stages, a power of two, make
# the ring's slot and phase arithmetic in each turn a mask and a shift
GLUON = Tiling(128, BLOCK_N, num_warps=4, num_stages=4)
GLUON_HEAD_DIM = 128


def candidates() -> list[Tiling]:
    """Configurations the autotuner may try: one warpgroup (wgmma m64) per 64 query rows. 128 rows per
    program (one per SM), or 64 rows with 2 or 3 K/V stages (two per SM), or capped at 168 registers
    (three per SM: 3 x 128 x 168 registers fit the SM's 64 Ki)."""
    return [Tiling(128, BLOCK_N, num_warps=8, num_stages=2), Tiling(64, BLOCK_N, num_warps=4, num_stages=2),
            Tiling(64, BLOCK_N, num_warps=4, num_stages=3),
            Tiling(64, BLOCK_N, num_warps=4, num_stages=2, max_registers=168)]


def keep(tiling: Tiling, head_dim: int) -> bool:
    """Drop shapes whose K/V ring does not fit in shared memory (with room for layout conversions)."""
    return tiling.smem_bytes(head_dim) * 2 <= SMEM_LIMIT


def choose(head_dim: int) -> list[Tiling]:
    """The pruned candidate list for `head_dim`; raises ValueError for head dims the kernel lacks."""
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"the Triton attention kernel supports head_dim {HEAD_DIMS}, got {head_dim}")
    return [t for t in candidates() if keep(t, head_dim)]
