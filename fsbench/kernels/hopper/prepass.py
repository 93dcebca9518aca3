"""Prepass: rotate Q and K by the normalized Walsh-Hadamard matrix and quantize Q, K and V into the FP8
E4M3 operands the Hopper wgmma consumes, one pass over each tensor.

Hopper's tensor cores take only E4M3 (no MX block scales), so every format is re-encoded:
the element is first rounded exactly as the emulator rounds it (MX block of 32, E8M0 scale
floor(log2 amax) - emax, RNE, saturation), then the dequantized value is stored as E4M3 under one
power-of-two scale per group (a Q row; a 128-key tile of K or V). For E2M3 and E2M1 the re-encoding is
value-exact while the block scales of a group span at most 11 (E2M3) or 14 (E2M1) doublings, which
leaves their smallest subnormal above E4M3's 2^-9; MXFP8 elements are E4M3 already, so a block whose
scale sits delta doublings below its group's loses the low bits of elements under 2^(delta-6) of its
scale (at most 2^-14 of the block maximum per doubling of spread). V of mxfp8 is per-tensor FP8, exact.

Q and K arrive in 16 bits (the wrapper rounds float32 inputs to bfloat16): the rotation is a 16-bit
MMA against the unnormalized +-1 Hadamard matrix with float32 accumulation, and the normalization
1/sqrt(d) rides on Q's premultiplier (sm_scale * log2 e) -- the same values as the emulator's float32
rotation up to float32 rounding.

Outputs: Q and K as [B*H, S_pad, D] E4M3 with per-row (Q) or per-key-tile (K) float32 scales; V
transposed to [B*H, D, S_pad] (K-major, as the FP8 PV wgmma needs) with a per-key-tile scale. Keys are stored
permuted within each 128-key tile, in the order the attention kernel consumes them (`KEY_ORDERS`): the sums
over keys do not care, and the order decides which keys' scores each thread holds.
"""
from __future__ import annotations

import triton
import triton.language as tl

from fsbench.kernels.constants import E4M3_MAX

# element codes shared with the host wrapper
E4M3, E2M3, E2M1 = 0, 1, 2
ELEMENT = {"mxfp8": E4M3, "mxfp6": E2M3, "mxfp4": E2M1}
# (emax of the MX scale rule, mantissa bits, max normal, shift that puts the format's max under 448)
ELEMENT_PARAMS = {E4M3: (8, 3, E4M3_MAX, 0), E2M3: (2, 3, 7.5, 5), E2M1: (2, 1, 6.0, 6)}
# Key orders within a 128-key tile, key r = 32t + 8s + 4h + 2e + j (t: quad thread, s: 32-key slice, h, e, j bits).
# "pv" (the Triton kernel): K in order, V's keys permuted within each 32-key block so that the PV GEMM's register
# A operand equals the score accumulator's registers (`triton_fused._pv_order`). "thread" (the Gluon kernel): K's
# key r goes to row 32s + 16h + 8e + 2t + j and V's to 32s + 16h + 4t + 2e + j, so that thread t of each quad
# holds, per row, the scores of keys 32t..32t+31: one MX block of P, whose maximum and scale then need no shuffle.
KEY_ORDERS = {"pv": 0, "thread": 1}


@triton.jit
def _pow2(e):
    """2^e for integer tensors e, built from the exponent bits (exact, no MUFU); e < -126 gives 0."""
    return ((tl.minimum(tl.maximum(e, -127), 127) + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _floor_log2(x):
    """floor(log2|x|) of normal float32 values from the exponent bits (zero gives -127)."""
    return ((x.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127


@triton.jit
def _k_order(x, ROWS: tl.constexpr, D: tl.constexpr, ORDER: tl.constexpr):
    """K's rows [ROWS, D] in their stored order (see KEY_ORDERS; 128-key tiles): a permutation of the tensor's
    axes, so that the store writes whole consecutive rows."""
    if ORDER == 0:
        return x
    # key r = 32c + 8a + 4b + 2d + e is stored at row 32a + 16b + 8d + 2c + e
    x = tl.reshape(x, [ROWS // 128, 4, 4, 2, 2, 2, D])  # [g, c, a, b, d, e, :]
    return tl.reshape(tl.permute(x, [0, 2, 3, 4, 1, 5, 6]), [ROWS, D])


@triton.jit
def _v_order(xt, ROWS: tl.constexpr, D: tl.constexpr, ORDER: tl.constexpr):
    """V^T [D, ROWS] with its keys in their stored order, the PV GEMM's k order (see KEY_ORDERS)."""
    if ORDER == 0:  # key r = 16g + 8a + 2b + e (b: 2 bits) at 16g + 4b + 2a + e
        x = tl.reshape(xt, [D, ROWS // 16, 2, 4, 2])
        return tl.reshape(tl.permute(x, [0, 1, 3, 2, 4]), [D, ROWS])
    # key r = 32c + 8a + 4b + 2d + e at 32a + 16b + 4c + 2d + e
    x = tl.reshape(xt, [D, ROWS // 128, 4, 4, 2, 2, 2])  # [:, g, c, a, b, d, e]
    return tl.reshape(tl.permute(x, [0, 1, 3, 4, 2, 5, 6]), [D, ROWS])


@triton.jit
def _round_elements(y, ELEM: tl.constexpr, MBITS: tl.constexpr, MAXN: tl.constexpr):
    """Round y (already divided by its block scale) to the element format, RNE, saturating."""
    if ELEM == 0:
        return y.to(tl.float8e4nv).to(tl.float32)
    y = tl.minimum(tl.maximum(y, -MAXN), MAXN)
    e = tl.maximum(_floor_log2(y), 0)  # E2M3/E2M1 smallest normal exponent is 0
    magic = 12582912.0  # 1.5 * 2^23: (x + magic) - magic rounds x to an integer, ties to even
    return ((y * _pow2(MBITS - e) + magic) - magic) * _pow2(e - MBITS)


@triton.jit
def _mx_blocks(x, ROWS: tl.constexpr, D: tl.constexpr, ELEM: tl.constexpr, EMAX: tl.constexpr,
               MBITS: tl.constexpr, MAXN: tl.constexpr):
    """MX-quantize x [ROWS, D] in blocks of 32 along D; returns (dequantized values / 2^scale, scale exp)."""
    x3 = tl.reshape(x, [ROWS, D // 32, 32])
    amax = tl.max(tl.abs(x3), axis=2)
    e = tl.minimum(tl.maximum(_floor_log2(amax) - EMAX, -126), 126)
    v = _round_elements(x3 * _pow2(-e)[:, :, None], ELEM, MBITS, MAXN)
    return v, e


@triton.jit
def quantize_qk_kernel(x_ptr, out_ptr, scale_ptr, had_ptr,
                       stride_b, stride_h, stride_s, stride_d, H, S, S_PAD, N_TILES, premul,
                       D: tl.constexpr, ROWS: tl.constexpr, TILES: tl.constexpr, ROTATE: tl.constexpr,
                       PER_ROW: tl.constexpr, ELEM: tl.constexpr, EMAX: tl.constexpr, MBITS: tl.constexpr,
                       MAXN: tl.constexpr, SHIFT: tl.constexpr, ORDER: tl.constexpr):
    """TILES consecutive tiles of ROWS rows of Q (PER_ROW scales) or K (one scale per tile, keys stored in ORDER):
    premultiply, rotate, MX-quantize, re-encode as E4M3 under the group scale. The Hadamard matrix is loaded once
    per program and the loop's loads are pipelined: with one tile per program, loading the matrix (then in float32)
    read twice the tile's bytes."""
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    cols = tl.arange(0, D)
    if ROTATE:
        had = tl.load(had_ptr + cols[:, None] * D + cols[None, :])  # +-1 entries in 16 bits: exact
    for i in tl.range(0, TILES):
        tile = tl.program_id(0) * TILES + i
        rows = tile * ROWS + tl.arange(0, ROWS)
        ptrs = x_ptr + b * stride_b + h * stride_h + rows[:, None] * stride_s + cols[None, :] * stride_d
        x = tl.load(ptrs, mask=(rows < S)[:, None], other=0.0)
        if ROTATE:
            x = tl.dot(x, had) * premul  # exact products, float32 accumulation
        else:
            x = x.to(tl.float32) * premul
        v, e = _mx_blocks(x, ROWS, D, ELEM, EMAX, MBITS, MAXN)
        in_tiles = tile < N_TILES
        if PER_ROW:
            group = tl.max(e, axis=1)
            stored = v * _pow2(e - group[:, None] + SHIFT)[:, :, None]
            tl.store(scale_ptr + bh * S_PAD + rows, _pow2(group - SHIFT), mask=rows < S_PAD)
            q8 = tl.reshape(stored, [ROWS, D]).to(tl.float8e4nv)
        else:
            group = tl.max(tl.max(e, axis=1), axis=0)
            stored = v * _pow2(e - group + SHIFT)[:, :, None]
            tl.store(scale_ptr + bh * N_TILES + tile, _pow2(group - SHIFT), mask=in_tiles)
            q8 = _k_order(tl.reshape(stored, [ROWS, D]), ROWS, D, ORDER).to(tl.float8e4nv)
        tl.store(out_ptr + (bh * S_PAD + rows[:, None]) * D + cols[None, :], q8, mask=in_tiles)


@triton.jit
def quantize_v_kernel(x_ptr, out_ptr, scale_ptr, tensor_scale_ptr,
                      stride_b, stride_h, stride_s, stride_d, H, S, S_PAD, N_TILES,
                      D: tl.constexpr, ROWS: tl.constexpr, PER_TENSOR: tl.constexpr,
                      ELEM: tl.constexpr, EMAX: tl.constexpr, MBITS: tl.constexpr, MAXN: tl.constexpr,
                      SHIFT: tl.constexpr, ORDER: tl.constexpr):
    """One 128-key tile of V: per-tensor FP8 (mxfp8) or MX blocks of 32 keys per column, stored
    transposed [D, keys] with one scale per tile, keys in the attention kernel's PV order (KEY_ORDERS).
    V is loaded transposed ([D, keys]) and the keys permuted within the tile, so the stores write whole rows of
    V^T, not single bytes."""
    tile, bh = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    rows = tile * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, D)
    ptrs = x_ptr + b * stride_b + h * stride_h + rows[None, :] * stride_s + cols[:, None] * stride_d
    xt = tl.load(ptrs, mask=(rows < S)[None, :], other=0.0).to(tl.float32)  # [D, keys]
    if PER_TENSOR:
        scale = tl.load(tensor_scale_ptr)
        stored = tl.math.div_rn(xt, tl.zeros_like(xt) + scale)
        tl.store(scale_ptr + bh * N_TILES + tile, scale)
    else:
        v, e = _mx_blocks(xt, D, ROWS, ELEM, EMAX, MBITS, MAXN)  # blocks of 32 along the keys
        group = tl.max(tl.max(e, axis=1), axis=0)
        stored = tl.reshape(v * _pow2(e - group + SHIFT)[:, :, None], [D, ROWS])
        tl.store(scale_ptr + bh * N_TILES + tile, _pow2(group - SHIFT))
    q8 = _v_order(stored, ROWS, D, ORDER).to(tl.float8e4nv)
    tl.store(out_ptr + (bh * D + cols[:, None]) * S_PAD + rows[None, :], q8)
