"""The Fused-Softmax FP8 attention kernel for Hopper (sm_90) and its conventional-softmax twin.

One body, two softmax policies chosen by the constexpr FUSED:
- fused (paper Algorithm 1): the row's reference is frozen at tile 0 on the pattern grid (the integer offset
  c = round(D - 128 m0), `reference.schraudolph.grid_offset`); Stage-A Schraudolph builds the BF16 pattern
  round(128 X + c) with one FFMA whose single rounding is the pattern's (`_grid_patterns`: no F2I, no MUFU);
  the integer pattern minus the row's offset is shifted into a float32 that the packed e4m3x2 convert
  narrows (Stage-B, the per-row scale folded into the offset); the tile's maximum pattern feeds both
  the gate and P's scale; a row that passes the gate rolls back exactly (c -= 128 delta, O and l scaled by
  2^-delta, all powers of two); the row sum is an FP8 MMA of P against a ones column.
- conventional: online softmax with MUFU exp2, P per-row FP8 with the same power-of-two scale rule,
  row sum of the float32 P (the apples-to-apples FP8 baseline on identical operands).

Both GEMMs are FP8 wgmma (QGMMA); each key tile's PV goes into a fresh accumulator and is added to O
in float32 (the FP8 wgmma accumulator keeps only about 22 bits; the QK scores carry the same ~2^-13
relative error, so some Stage-A patterns differ from the emulator's by one LSB: the pattern-level rate is
not measured yet, the output-level difference is, in results/log/).

P of mxfp6/mxfp4 (MXFP6 E2M3) comes in two policies (constexpr P_BLOCKS). Per block (the emulator's
definition): the block maxima (which also feed the gate) give each 32-key block its E8M0 scale, the
Stage-A FFMA writes each block in its own units 2^(s_b + 6), where the e4m3 convert rounds exactly as
E2M3 (clamped at 7.5), and an FP16 power-of-two multiply between two more packed converts rebases the
blocks onto the row's scale (exact while a block sits at most 11 doublings below the row's top block).
Per row (faster): one E8M0 per row and key tile (floor(log2 rowmax) - 2): exact for the block that holds
the row maximum, coarser for lower blocks; what the per-row policy adds to the relative error against the
emulator is in results/log/.
"""
from __future__ import annotations

import math

import triton
import triton.language as tl

from fsbench.kernels import constants
from fsbench.kernels.hopper import tiling

# the shared constants (`kernels.constants` says what each is), as the constexpr globals a jit function may read
MAGIC = tl.constexpr(constants.MAGIC)
GRID_STEP = tl.constexpr(constants.GRID_STEP)
ONE_BITS = tl.constexpr(constants.ONE_BITS)
P_SAT_MAX = tl.constexpr(constants.P_SAT_MAX)
D_FLOOR = tl.constexpr(math.floor(constants.D_BIAS))


@triton.jit
def _pow2(e):
    """2^e for integer tensors from the exponent bits (exact); e < -126 gives 0."""
    return ((tl.minimum(tl.maximum(e, -127), 127) + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _scores(q, desc_k, kv_row, tile, S_K, BN: tl.constexpr, MASK: tl.constexpr):
    """Mainloop, first GEMM: raw FP8 scores of one key tile, keys past the sequence set to -inf."""
    k = desc_k.load([kv_row + tile * BN, 0])
    s = tl.dot(q, k.T)
    if MASK:
        s = tl.where((tile * BN + tl.arange(0, BN) < S_K)[None, :], s, float("-inf"))
    return s


@triton.jit
def _mark(ptr, need):
    """Store 1 at the scalar `ptr` from every row where `need` holds: a predicated st.global in the rows'
    own layout (tl.store would gather the mask through shared memory and two block barriers per tile)."""
    addr = (ptr.to(tl.int64, bitcast=True) + tl.zeros_like(need.to(tl.int64)))
    tl.inline_asm_elementwise("{ .reg .pred p; setp.ne.s32 p, $1, 0; @p st.global.b8 [$2], $3; mov.b32 $0, 0; }",
                              "=r,r,l,r", [need.to(tl.int32), addr, tl.full(need.shape, 1, tl.int32)],
                              dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _grid_patterns(s, slope, c):
    """The BF16 patterns round(slope s + c) of scores s (slope = 128 q_scale k_scale and the integer offset c per
    row), clamped at 0, as int32: t = min(fma(s, -slope GRID_STEP, 1 - c GRID_STEP), 1) lies in [0.5, 1], where the
    float32 step is GRID_STEP, so the FMA's one rounding is the pattern's (ties to even: the mantissa's last bit is
    the pattern's), ONE_BITS - bits(t) is the pattern, and the min is the clamp (-inf scores give 0; the Gluon
    kernel's FFMA clamps with .sat). The offset is as `schraudolph.held_offset` holds it; exact for patterns up to
    2^23."""
    t = tl.fma(s, (-slope * GRID_STEP)[:, None], (1.0 - c * GRID_STEP)[:, None])
    return ONE_BITS - tl.minimum(t, 1.0).to(tl.int32, bitcast=True)


@triton.jit
def _pattern_floats(p, e):
    """BF16 patterns p (int32, >= 0) divided by 2^e (per row or block, broadcast to p) as float32: the exponent
    field moves down by e (clamped at 0, where E4M3 rounds everything to 0), and the BF16 subnormals (p < 128,
    kept only by a tile some 117 doublings below its reference) are scaled as floats."""
    moved = (tl.maximum(p - 128 * e, 0) << 16).to(tl.float32, bitcast=True)
    return tl.where(p < 128, p.to(tl.float32) * _pow2(-e - 133), moved)


@triton.jit
def _fused_policy(s, a, m_i, c_i, flags, tile, gate_p, D_BIAS: tl.constexpr, SEED: tl.constexpr,
                  GATE: tl.constexpr, P_EMAX: tl.constexpr, P_SHIFT: tl.constexpr, P_CLAMP: tl.constexpr,
                  P_BLOCKS: tl.constexpr):
    """Softmax policy, fused: frozen reference on the pattern grid, gate and rollback, Stage-A and Stage-B of P
    (`reference.emulator`'s definition, integer for integer).

    The patterns come first (`_grid_patterns`, one FFMA and a min per score, on the offset c as it stands); their
    maximum feeds the gate, whose rollback is the integer shift c -= 128 delta, and P's scale; each pattern then
    moves to P's scale inside the float32 the e4m3x2 convert reads (`_pattern_floats`). Returns (P as E4M3,
    per-row log2 scale of P, alpha = 2^-delta, m, c, fired) where m is the frozen first-tile maximum plus the
    rollbacks, c the integer offset and fired > 0 when a row of the program rolled back on this tile."""
    a128 = a * 128.0
    if SEED:
        m_i = tl.max(s, 1) * a
        c_i = ((D_BIAS - 128.0 * m_i) + MAGIC) - MAGIC  # rounded to an integer, ties to even
        c_i = tl.where(m_i > float("-inf"), c_i, 0.0)  # a row without keys in its first tile: offset 0
    p = _grid_patterns(s, a128, c_i)
    if P_BLOCKS:
        bmax = tl.max(tl.reshape(p, [s.shape[0], s.shape[1] // 32, 32]), 2)  # the gate's and P's maxima
        pmax = tl.max(bmax, 1)
    else:
        pmax = tl.max(p, 1)
    need = pmax > gate_p
    if GATE:
        fired = tl.max(need.to(tl.int32), 0)  # any row of the program: the rare, uniform rollback branch
        if fired > 0:
            tl.store(flags + tile, 1)
        delta = tl.where(need, (pmax + (127 - D_FLOOR)) >> 7, 0)  # ceil((pmax - D) / 128), in integers
        m_i = m_i + delta.to(tl.float32)
        c_i = c_i - 128.0 * delta.to(tl.float32)
        pmax = pmax - 128 * delta
        p = tl.maximum(p - 128 * delta[:, None], 0)
        alpha = _pow2(-delta)
    else:
        _mark(flags + tile, need)
        fired = 0
        alpha = tl.full(pmax.shape, 1.0, tl.float32)
    e_p = tl.maximum((pmax >> 7) - 127 - P_EMAX, -127) + P_SHIFT
    if P_BLOCKS:
        # each 32-key block in its own units 2^(s_b + 6): the convert then rounds exactly as E2M3
        if GATE:
            bmax = tl.maximum(bmax - 128 * delta[:, None], 0)
        s_b = tl.maximum((bmax >> 7) - 127 - P_EMAX, -127)
        e_b = tl.reshape(tl.broadcast_to((s_b + 6)[:, :, None], [s.shape[0], s.shape[1] // 32, 32]), s.shape)
        pf = _pattern_floats(p, e_b)
    else:
        pf = _pattern_floats(p, e_p[:, None])
    if P_CLAMP:
        pf = tl.minimum(pf, P_SAT_MAX)  # E2M3's largest value, 7.5, in the units 2^(E + 6)
    p8 = pf.to(tl.float8e4nv)
    if P_BLOCKS:
        p8 = _rebase_blocks(p8, s_b, e_p)
    return p8, e_p, alpha, m_i, c_i, fired


@triton.jit
def _rebase_blocks(p8, s_b, e_p):
    """Re-encode E2M3 values held as E4M3 in per-block units 2^(s_b + 6) into the row's units 2^e_p
    (e_p = max s_b - 5): a power-of-two multiply in FP16 between two packed converts, exact while a
    block sits at most 11 doublings below the row's top block."""
    factor = _pow2(s_b + 6 - e_p[:, None]).to(tl.float16)  # per (row, block): 2^(11 - delta), exact
    factor = tl.reshape(tl.broadcast_to(factor[:, :, None], [p8.shape[0], p8.shape[1] // 32, 32]), p8.shape)
    return (p8.to(tl.float16) * factor).to(tl.float8e4nv)


@triton.jit
def _pv_order(p, BN: tl.constexpr):
    """Keys reordered within each 32-key block, 16h + 8e + 2t + j -> 16h + 4t + 2e + j: thread t of a quad
    holds P in the wgmma accumulator in the order the FP8 A operand of the PV GEMM wants it, so P needs
    no shuffles between threads (the prepass stores V's keys in the same order)."""
    p = tl.reshape(p, [p.shape[0], BN // 32, 2, 2, 4, 2])
    return tl.reshape(tl.permute(p, [0, 1, 2, 4, 3, 5]), [p.shape[0], BN])


@triton.jit
def _conventional_policy(s, a, m_i, P_EMAX: tl.constexpr):
    """Softmax policy, conventional: online max, MUFU exp2, P per-row FP8 (scale 2^(floor(log2 max P)-7)).

    Returns (P as E4M3, log2 scale of P, alpha, m, float32 row sum of P in units of the scale)."""
    tmax = tl.max(s, 1) * a
    m_new = tl.maximum(m_i, tmax)
    alpha = tl.math.exp2(m_i - m_new)
    e_p = tl.maximum(tl.floor(tmax - m_new).to(tl.int32) - P_EMAX, -127)
    p = tl.math.exp2(tl.fma(s, a[:, None], -(m_new + e_p.to(tl.float32))[:, None]))
    return p.to(tl.float8e4nv), e_p, alpha, m_new, tl.sum(p, 1)


@triton.jit
def _attend_tile(acc, l_i, m_i, c_i, q, q_scale, ones, desc_k, desc_v, k_scale_ptr, v_scale_ptr, flags,
                 kv_row, v_row, tile, S_K, gate_p,
                 BN: tl.constexpr, D_BIAS: tl.constexpr, FUSED: tl.constexpr, SEED: tl.constexpr,
                 MASK: tl.constexpr, GATE: tl.constexpr, P_EMAX: tl.constexpr, P_SHIFT: tl.constexpr,
                 P_CLAMP: tl.constexpr, P_BLOCKS: tl.constexpr):
    """One key tile: scores, softmax policy, PV into a fresh accumulator, float32 update of O and l."""
    s = _scores(q, desc_k, kv_row, tile, S_K, BN, MASK)
    a = q_scale * tl.load(k_scale_ptr + tile)
    if FUSED:
        p8, e_p, alpha, m_i, c_i, fired = _fused_policy(s, a, m_i, c_i, flags, tile, gate_p, D_BIAS, SEED, GATE,
                                                        P_EMAX, P_SHIFT, P_CLAMP, P_BLOCKS)
        p8 = _pv_order(p8, BN)
        row_sum = tl.sum(tl.dot(p8, ones), 1)
    else:
        p8, e_p, alpha, m_i, row_sum = _conventional_policy(s, a, m_i, P_EMAX)
        p8 = _pv_order(p8, BN)
    v = desc_v.load([v_row, tile * BN]).T
    pv = tl.dot(p8, v)
    scale = _pow2(e_p) * tl.load(v_scale_ptr + tile)
    if FUSED:
        if fired > 0:  # O is rescaled only on a rollback (alpha is 1 in every other row and tile)
            acc = acc * alpha[:, None]
        acc = tl.fma(pv, scale[:, None], acc)
    else:
        acc = tl.fma(pv, scale[:, None], acc * alpha[:, None])
    l_i = l_i * alpha + row_sum * _pow2(e_p)
    return acc, l_i, m_i, c_i


@triton.jit
def _epilogue(acc, l_i, out_ptr, rows, S_Q, stride_os, D: tl.constexpr):
    """O / l in the output dtype at `out_ptr`, the program's (batch, head), rows `stride_os` apart; query rows past
    the sequence are not written."""
    out = acc * (1.0 / l_i)[:, None]
    cols = tl.arange(0, D)
    ptrs = out_ptr + rows[:, None] * stride_os + cols[None, :]
    tl.store(ptrs, out.to(out_ptr.dtype.element_ty), mask=(rows < S_Q)[:, None])


def _set_q_block(nargs: dict) -> None:
    """The Q descriptor's block follows the configuration's query tile."""
    nargs["desc_q"].block_shape = [nargs["BM"], nargs["D"]]


def _configs() -> list[triton.Config]:
    return [triton.Config({"BM": t.block_m}, num_warps=t.num_warps, num_stages=t.num_stages,
                          maxnreg=t.max_registers, pre_hook=_set_q_block) for t in tiling.candidates()]


def _prune(configs: list[triton.Config], named_args: dict, **kwargs) -> list[triton.Config]:
    head_dim: int = named_args["D"] if "D" in named_args else kwargs["D"]
    return [c for c in configs
            if tiling.keep(tiling.Tiling(c.kwargs["BM"], tiling.BLOCK_N, c.num_warps, c.num_stages), head_dim)]


@triton.autotune(configs=_configs(), key=["D", "FUSED", "GATE", "P_EMAX", "P_CLAMP", "P_BLOCKS"],
                 prune_configs_by={"early_config_prune": _prune})
@triton.jit
def attention_kernel(desc_q, desc_k, desc_v, q_scale_ptr, k_scale_ptr, v_scale_ptr, out_ptr, flag_ptr,
                     S_Q, S_K, S_QPAD, S_KPAD, N_ST, N_KT, gate_p, HEADS, stride_ob, stride_oh, stride_os,
                     D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, STAT_M: tl.constexpr,
                     D_BIAS: tl.constexpr, FUSED: tl.constexpr, GATE: tl.constexpr, P_EMAX: tl.constexpr,
                     P_SHIFT: tl.constexpr, P_CLAMP: tl.constexpr, P_BLOCKS: tl.constexpr):
    """One program = one query tile of one (batch, head); streams all key tiles (tile 0 and the last,
    partial one peeled). Gate flags go to the program's STAT_M-row statistics tile. The output is written through
    its strides (batch, head, row), so a BSHD output needs no copy."""
    qt, bh = tl.program_id(0), tl.program_id(1)
    rows = qt * BM + tl.arange(0, BM)
    q = desc_q.load([bh * S_QPAD + qt * BM, 0])
    q_scale = tl.load(q_scale_ptr + bh * S_QPAD + rows)
    kv_row, v_row = bh * S_KPAD, bh * D
    k_scale_ptr += bh * N_KT
    v_scale_ptr += bh * N_KT
    flags = flag_ptr + (bh * N_ST + qt * BM // STAT_M) * N_KT
    ones = tl.where((tl.arange(0, 16)[None, :] == 0) & (tl.arange(0, BN)[:, None] >= 0), 1.0, 0.0)
    ones = ones.to(tl.float8e4nv)  # [BN, 16]: column 0 ones, so the MMA's row sum is column 0
    acc = tl.zeros([BM, D], tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    m_i = tl.full([BM], float("-inf"), tl.float32)
    c_i = tl.zeros([BM], tl.float32)
    acc, l_i, m_i, c_i = _attend_tile(acc, l_i, m_i, c_i, q, q_scale, ones, desc_k, desc_v, k_scale_ptr,
                                      v_scale_ptr, flags, kv_row, v_row, 0, S_K, gate_p, BN, D_BIAS, FUSED,
                                      True, True, GATE, P_EMAX, P_SHIFT, P_CLAMP, P_BLOCKS)
    for tile in tl.range(1, N_KT - 1):
        acc, l_i, m_i, c_i = _attend_tile(acc, l_i, m_i, c_i, q, q_scale, ones, desc_k, desc_v, k_scale_ptr,
                                          v_scale_ptr, flags, kv_row, v_row, tile, S_K, gate_p, BN, D_BIAS,
                                          FUSED, False, False, GATE, P_EMAX, P_SHIFT, P_CLAMP, P_BLOCKS)
    if N_KT > 1:
        acc, l_i, m_i, c_i = _attend_tile(acc, l_i, m_i, c_i, q, q_scale, ones, desc_k, desc_v, k_scale_ptr,
                                          v_scale_ptr, flags, kv_row, v_row, N_KT - 1, S_K, gate_p, BN, D_BIAS,
                                          FUSED, False, True, GATE, P_EMAX, P_SHIFT, P_CLAMP, P_BLOCKS)
    _epilogue(acc, l_i, out_ptr + (bh // HEADS) * stride_ob + (bh % HEADS) * stride_oh, rows, S_Q, stride_os, D)
