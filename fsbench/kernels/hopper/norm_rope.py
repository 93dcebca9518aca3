"""Wan's prologue (`kernels.prologue`: RMSNorm of q and k over all heads, then interleaved RoPE) in Triton.

Rounding, as torch computes `rms_norm` for a 16-bit x and weight (`torch._decomp`'s `_fused_rms_norm` and the
CPU composite, pinned in tests/test_kernels_prologue.py; CUDA's fused kernel also rounds once): x upcast to
float32, rstd = rsqrt(mean(x^2) + eps) in float32, (x * rstd) * w in float32, one rounding to x's type. Then
`prologue.rope`: the rounded pairs times the float32 tables, the products and their sum kept apart, one more
rounding. `inv_rms_rows` computes rstd (division and square root correctly rounded, as torch's CPU `rsqrt`;
CUDA's uses rsqrtf and its own reduction order, so the two may differ in the last float32 bit, and a rare
output by one ulp); `norm_rope_rows` does the rest. Launches that use them pass `enable_fp_fusion=False`: no
product and sum fuse into an FMA.

`norm_rope_kernel` writes q and k (B, S, H, D) contiguous from a few whole tokens per program: one read of the
projections (the second pass over a program's rows hits the cache) and one write. The Hopper prepass then
quantizes them. A prepass variant that applied the prologue to each (tile, head) itself, reading the per-token RMS
from a pass of its own, was slower than torch.compile's RMSNorm + RoPE and the plain prepass, which this kernel
beats (results/log/): the plain prepass follows this kernel.
"""
from __future__ import annotations

import triton
import triton.language as tl

TOKENS = 4  # tokens per norm_rope program: q and k of four 5120-wide tokens, 80 KB re-read from cache
CHUNK = 1024  # channels per load (fewer for narrow rows: the next power of two of H*D)
WARPS = 8


@triton.jit
def inv_rms_rows(x_ptr, row, ok, eps, HD: tl.constexpr, CHUNK: tl.constexpr):
    """1 / sqrt(mean(x^2) + eps) over the HD channels of the tokens whose rows start at x_ptr + row (float32;
    tokens not `ok` read zeros)."""
    cols = tl.arange(0, CHUNK)
    acc = tl.zeros(row.shape, tl.float32)
    for c0 in tl.static_range(0, HD, CHUNK):
        c = c0 + cols
        x = tl.load(x_ptr + row[:, None] + c[None, :], mask=ok[:, None] & (c < HD)[None, :], other=0.0)
        x = x.to(tl.float32)
        acc += tl.sum(x * x, axis=1)
    mean = tl.math.div_rn(acc, tl.full(acc.shape, HD, tl.float32))
    return tl.math.div_rn(tl.full(acc.shape, 1.0, tl.float32), tl.math.sqrt_rn(mean + eps))


@triton.jit
def norm_rope_rows(x, inv_rms, w, cos, sin, ROWS: tl.constexpr, COLS: tl.constexpr, ROPE: tl.constexpr):
    """x [ROWS, COLS] (16 bits) times its rows' inverse RMS and the weight w [COLS], rounded to x's type; with
    ROPE, pairs (2i, 2i+1) rotated by cos, sin [ROWS, COLS // 2] (float32: cos of the even channel, sin of the
    odd one) and rounded again."""
    y = ((x.to(tl.float32) * inv_rms[:, None]) * w.to(tl.float32)[None, :]).to(x.dtype)
    if ROPE:
        even, odd = tl.split(tl.reshape(y, [ROWS, COLS // 2, 2]))
        even, odd = even.to(tl.float32), odd.to(tl.float32)
        y = tl.reshape(tl.join(even * cos - odd * sin, even * sin + odd * cos), [ROWS, COLS]).to(x.dtype)
    return y


@triton.jit
def rope_tables(cos_ptr, sin_ptr, s, ok, d, stride_cs, stride_cd, stride_ss, stride_sd):
    """cos of the even channels d and sin of the odd ones d + 1 at positions s, [tokens, pairs] (zeros where not
    `ok`)."""
    cos = tl.load(cos_ptr + s[:, None] * stride_cs + d[None, :] * stride_cd, mask=ok[:, None], other=0.0)
    sin = tl.load(sin_ptr + s[:, None] * stride_ss + (d + 1)[None, :] * stride_sd, mask=ok[:, None], other=0.0)
    return cos, sin


@triton.jit
def norm_rope_kernel(xq_ptr, xk_ptr, wq_ptr, wk_ptr, cos_ptr, sin_ptr, q_ptr, k_ptr,
                     stride_qb, stride_qs, stride_kb, stride_ks, stride_cs, stride_cd, stride_ss, stride_sd,
                     S, N_TOKENS, eps, HD: tl.constexpr, D: tl.constexpr, TOKENS: tl.constexpr,
                     CHUNK: tl.constexpr, ROPE: tl.constexpr):
    """TOKENS tokens of q and k (rows of HD channels, contiguous) normed and rotated into q and k [N_TOKENS, HD]
    (the rows are read once from memory: the second pass hits the cache)."""
    t = tl.program_id(0) * TOKENS + tl.arange(0, TOKENS)
    ok = t < N_TOKENS
    s = t % S
    row_q = (t // S) * stride_qb + s * stride_qs
    row_k = (t // S) * stride_kb + s * stride_ks
    rq = inv_rms_rows(xq_ptr, row_q, ok, eps, HD, CHUNK)
    rk = inv_rms_rows(xk_ptr, row_k, ok, eps, HD, CHUNK)
    cols = tl.arange(0, CHUNK)
    pairs = tl.arange(0, CHUNK // 2) * 2
    for c0 in tl.static_range(0, HD, CHUNK):
        c = c0 + cols
        mask = ok[:, None] & (c < HD)[None, :]
        cos, sin = rq[:, None], rq[:, None]
        if ROPE:
            cos, sin = rope_tables(cos_ptr, sin_ptr, s, ok, (c0 + pairs) % D, stride_cs, stride_cd,
                                   stride_ss, stride_sd)
        xq = tl.load(xq_ptr + row_q[:, None] + c[None, :], mask=mask, other=0.0)
        xk = tl.load(xk_ptr + row_k[:, None] + c[None, :], mask=mask, other=0.0)
        wq = tl.load(wq_ptr + c, mask=c < HD, other=0.0)
        wk = tl.load(wk_ptr + c, mask=c < HD, other=0.0)
        out = t[:, None] * HD + c[None, :]
        tl.store(q_ptr + out, norm_rope_rows(xq, rq, wq, cos, sin, TOKENS, CHUNK, ROPE), mask=mask)
        tl.store(k_ptr + out, norm_rope_rows(xk, rk, wk, cos, sin, TOKENS, CHUNK, ROPE), mask=mask)


def chunk(hd: int) -> int:
    """Channels per load for rows of hd channels."""
    return min(CHUNK, triton.next_power_of_2(hd))
