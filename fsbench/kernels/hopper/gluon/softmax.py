"""The softmax policies of one key tile's scores: fused (frozen max, gate and rollback, Schraudolph Stage-A, P
narrowed to E4M3), conventional (online max, MUFU exp2) and the skeleton's stand-in P
(`triton_fused._fused_policy` has the same numerics, step by step)."""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from fsbench.kernels import constants
from fsbench.kernels.hopper.gluon import ptx
from fsbench.kernels.hopper.gluon.ptx import fma_sat, mark, narrow_patterns, pow2, rescale_blocks, to_e4m3
from fsbench.kernels.hopper.gluon.state import Config, Tiles
from fsbench.kernels.hopper.gluon.views import (
    broadcast_to,
    per_thread,
    pv_order,
    rows_as,
    thread_any,
    thread_max,
    thread_min3,
)

# the shared constants (`kernels.constants` says what each is), as the constexpr globals a jit function may read
TWO_M16: gl.constexpr = gl.constexpr(constants.TWO_M16)
TWO_M9: gl.constexpr = gl.constexpr(constants.TWO_M9)
P_BASE: gl.constexpr = gl.constexpr(constants.P_BASE)
P_BASE_BITS: gl.constexpr = gl.constexpr(constants.P_BASE_BITS)
P_SAT_FLOOR16: gl.constexpr = gl.constexpr(constants.P_SAT_FLOOR * constants.TWO_M16)
P_SAT_BASE: gl.constexpr = gl.constexpr(constants.P_SAT_BASE)
MAGIC: gl.constexpr = gl.constexpr(constants.MAGIC)
GRID_STEP: gl.constexpr = gl.constexpr(constants.GRID_STEP)
NEG_GRID_SLOPE: gl.constexpr = gl.constexpr(-128.0 * constants.GRID_STEP)  # the FFMA's slope per unit of a
ONE_BITS: gl.constexpr = gl.constexpr(constants.ONE_BITS)
FAR_BELOW: gl.constexpr = gl.constexpr(ptx.FAR_BELOW)
SKELETON_P_SCALE: gl.constexpr = gl.constexpr(0.0009765625)  # 2^-10: the skeleton's P = E4M3(S / 1024)


@gluon.jit
def fused_policy(s, k_scale, m_i, c_i, tile, tiles: Tiles, cfg: Config, SEED: gl.constexpr):
    """Frozen max, gate and rollback, Stage-A and Stage-B of P (`triton_fused._fused_policy`, step by step).
    Returns (P as E4M3 in the PV operand's layout, per-row log2 scale of P, alpha = 2^-delta, m, c). P is narrowed
    to E4M3 in the operand layout, where the e4m3x2 converts pack it straight into its registers. Gate flags are
    predicated stores from the rows that fire (no block-wide reduction: see `kernel.step`).

    c is kept in units of 2^-16 patterns (the Triton kernel's c times 2^-16) and the slope of Stage-A is
    (q_scale 2^-9) k_scale, whose first factor is loop-invariant: every product and sum is the Triton kernel's
    times a power of two, so each rounds to the same pattern, and the per-row work of a key tile loses the
    multiplies that moved c and the slope between units."""
    tmax = thread_max(s)  # with P_BLOCKS: the maximum of each MX block
    smax = rows_as(gl.max(tmax, 1), s)
    m_i = rows_as(m_i, s)
    c_i = rows_as(c_i, s)
    slope16 = rows_as(tiles.q_scale * TWO_M9, s) * k_scale  # 128 q_scale k_scale in units of 2^-16 patterns
    D_FLOOR: gl.constexpr = int(cfg.D_BIAS)  # floor: D_BIAS > 0
    if SEED:
        m_i = smax * rows_as(tiles.q_scale * k_scale, s)
        c_i = (((cfg.D_BIAS - 128.0 * m_i) + MAGIC) - MAGIC) * TWO_M16  # on the pattern grid
    pmax = (gl.fma(smax, slope16, c_i) + P_BASE).to(gl.int32, bitcast=True) - P_BASE_BITS
    need = pmax > tiles.gate_p
    mark(tiles.flags + tile, need)
    if cfg.GATE:
        delta = gl.where(need, (pmax + (127 - D_FLOOR)) >> 7, 0)  # ceil((pmax - D_BIAS) / 128), in integers
        m_i = m_i + delta.to(gl.float32)
        c_i = c_i - TWO_M9 * delta.to(gl.float32)
        pmax = pmax - 128 * delta
        alpha = pow2(-delta, True, False)  # delta >= 0
    else:
        alpha = gl.full_like(c_i, 1.0)
    e_p = gl.maximum((pmax >> 7) - 127 - cfg.P_EMAX, -127) + cfg.P_SHIFT
    # Stage-A: the pattern of P / 2^e (e: P's scale) is the integer part of t, whose step is 1 from 192 (2^-16) or
    # from P_SAT_BASE (2^-13, where .sat clamps E2M3 P at its largest value)
    if cfg.P_BLOCKS:
        rows_b: gl.constexpr = gl.SliceLayout(1, tmax.type.layout)
        c_ib = gl.expand_dims(gl.convert_layout(c_i, rows_b, assert_trivial=True), 1)
        slope_b = gl.expand_dims(gl.convert_layout(slope16, rows_b, assert_trivial=True), 1)
        pb = gl.fma(tmax, slope_b, c_ib)
        s_b = gl.maximum((((pb + P_BASE).to(gl.int32, bitcast=True) - P_BASE_BITS) >> 7) - 127 - cfg.P_EMAX, -127)
        c_p = per_thread((c_ib - TWO_M9 * (s_b + 6).to(gl.float32) - P_SAT_FLOOR16) * 8.0, s)
    elif cfg.P_CLAMP:
        c_p = broadcast_to(gl.expand_dims((c_i - TWO_M9 * e_p.to(gl.float32) - P_SAT_FLOOR16) * 8.0, 1), s.shape)
    else:
        c_p = broadcast_to(gl.expand_dims(c_i - TWO_M9 * e_p.to(gl.float32), 1), s.shape)
    if cfg.P_CLAMP:
        t = fma_sat(s, broadcast_to(gl.expand_dims(slope16 * 8.0, 1), s.shape), c_p) + P_SAT_BASE
    else:
        t = fma_sat(s, broadcast_to(gl.expand_dims(slope16, 1), s.shape), c_p) + P_BASE
    p = (t.to(gl.int32, bitcast=True) << 16).to(gl.float32, bitcast=True)
    p8 = to_e4m3(gl.convert_layout(p, cfg.p_layout, assert_trivial=True))
    if cfg.P_BLOCKS:  # P in its block's units (2^s_b at 2^-6, where E4M3's subnormals round as E2M3's) -> 2^e units
        e_pb = gl.expand_dims(gl.convert_layout(e_p, rows_b, assert_trivial=True), 1)
        factor = per_thread(pow2(s_b + 6 - e_pb).to(gl.float16), p)
        p8 = rescale_blocks(p8, gl.convert_layout(factor, cfg.p_layout, assert_trivial=True))
    return p8, e_p, alpha, m_i, c_i


@gluon.jit
def fused_policy_grid(s, k_scale, m_i, c_i, tile, tiles: Tiles, cfg: Config, SEED: gl.constexpr):
    """`fused_policy` for mxfp8, Stage-A first, on the pattern grid (`reference.schraudolph.grid_offset`): the row's
    integer offset c is kept as k = 1 - c 2^-24 (`c_i`; as `schraudolph.held_offset` holds c), so one FFMA.SAT per
    score, t = sat(k - 128 a s 2^-24), rounds to the pattern once and leaves it in the low bits (bits(t) = ONE_BITS -
    pattern; .sat at 1 is the clamp at pattern 0). The tile's maximum pattern is the minimum of those bits (two per
    VIMNMX3); the gate and the rollback shift are read off it in integers, a rollback moves k by 128 delta 2^-24
    (one rounding, as computing k from the shifted c), and each pattern moves to P's scale inside the IMAD that
    makes it a float (`ptx.narrow_patterns`). Patterns, gate, delta, P's codes and scale are the emulator's, bit for
    bit, for patterns up to 2^23 (a maximum some 65000 doublings above the reference). m is the first tile's
    maximum, not moved by rollbacks (nothing reads it)."""
    m_i = rows_as(m_i, s)
    k = rows_as(c_i, s)
    slope = rows_as(tiles.q_scale * NEG_GRID_SLOPE, s) * k_scale  # the first product is loop-invariant
    D_FLOOR: gl.constexpr = int(cfg.D_BIAS)
    if SEED:
        m_i = rows_as(gl.max(thread_max(s), 1), s) * (rows_as(tiles.q_scale, s) * k_scale)
        c = ((cfg.D_BIAS - 128.0 * m_i) + MAGIC) - MAGIC  # round(D - 128 m0), ties to even
        c = gl.where(m_i > float("-inf"), c, 0.0)  # a row without keys in its first tile: offset 0
        k = 1.0 - c * GRID_STEP  # c 2^-24 is exact: one rounding
    t = fma_sat(s, broadcast_to(gl.expand_dims(slope, 1), s.shape), broadcast_to(gl.expand_dims(k, 1), s.shape))
    t_bits = t.to(gl.int32, bitcast=True)
    pmax = ONE_BITS - rows_as(gl.min(thread_min3(t_bits), 1), s)
    need = pmax > tiles.gate_p
    mark(tiles.flags + tile, need)
    if cfg.GATE:
        delta = gl.where(need, (pmax + (127 - D_FLOOR)) >> 7, 0)  # ceil((pmax - D) / 128), in integers
        k = k + delta.to(gl.float32) * (128.0 * GRID_STEP)
        pmax = pmax - 128 * delta
        alpha = pow2(-delta, True, False)  # delta >= 0
    else:
        delta = gl.zeros_like(pmax)
        alpha = gl.full_like(k, 1.0)
    e_p = gl.maximum((pmax >> 7) - 127 - cfg.P_EMAX, -127) + cfg.P_SHIFT
    e = e_p + delta  # the patterns' shift to P's scale: they were taken before the rollback
    k16 = broadcast_to(gl.expand_dims((0 - 128 * e) << 16, 1), s.shape)
    far = e <= FAR_BELOW
    # 2^-e needs no clamp where it is used: -117 >= e >= -127
    floor_or_factor = gl.where(far, pow2(0 - e, False, False).to(gl.int32, bitcast=True), ONE_BITS - 128 * e)
    factor = broadcast_to(gl.expand_dims(floor_or_factor, 1), s.shape)
    slow = broadcast_to(gl.expand_dims(thread_any((e > 0).to(gl.int32) | (far.to(gl.int32) << 1)), 1), s.shape)
    p8 = narrow_patterns(gl.convert_layout(t_bits, cfg.p_layout, assert_trivial=True),
                         gl.convert_layout(k16, cfg.p_layout, assert_trivial=True),
                         gl.convert_layout(factor, cfg.p_layout, assert_trivial=True),
                         gl.convert_layout(slow, cfg.p_layout, assert_trivial=True))
    return p8, e_p, alpha, m_i, k


@gluon.jit
def conventional_policy(s, a, m_i, cfg: Config):
    """Online max, MUFU exp2, P per-row FP8; returns (P, log2 scale of P, alpha, m, float32 row sum of P)."""
    a = rows_as(a, s)
    tmax = gl.max(s, 1) * a
    m_i = rows_as(m_i, s)
    m_new = gl.maximum(m_i, tmax)
    alpha = gl.exp2(m_i - m_new)
    e_p = gl.maximum(gl.floor(tmax - m_new).to(gl.int32) - cfg.P_EMAX, -127)
    p = gl.exp2(gl.fma(s, gl.expand_dims(a, 1), gl.expand_dims(-(m_new + e_p.to(gl.float32)), 1)))
    return to_e4m3(gl.convert_layout(p, cfg.p_layout, assert_trivial=True)), e_p, alpha, m_new, gl.sum(p, 1)


@gluon.jit
def skeleton_policy(s, m_i, c_i, cfg: Config):
    """No softmax: P = E4M3(S / 1024), scale 2^0, alpha 1, m and c unchanged (the skeleton's P, not attention)."""
    p8 = to_e4m3(gl.convert_layout(s * SKELETON_P_SCALE, cfg.p_layout, assert_trivial=True))
    c_i = rows_as(c_i, s)
    return p8, gl.zeros_like(c_i.to(gl.int32)), gl.full_like(c_i, 1.0), rows_as(m_i, s), c_i


@gluon.jit
def policy(s, tile, k_scale, m_i, c_i, tiles: Tiles, cfg: Config, SEED: gl.constexpr, MASK: gl.constexpr):
    """Scores of one key tile (K's scale `k_scale`) -> (P operand, e_p, alpha, m, c, float32 row sum or 0), each
    per-row value in the PV operand's row layout."""
    if MASK:  # score column c holds key 32t + 8s + 4h + 2e + j of the tile, c = 32s + 16h + 8e + 2t + j (prepass)
        c = gl.arange(0, cfg.BN, gl.SliceLayout(0, s.type.layout))
        key = (((c >> 1) & 3) << 5) | ((c >> 5) << 3) | (((c >> 4) & 1) << 2) | (((c >> 3) & 1) << 1) | (c & 1)
        s = gl.where(gl.expand_dims(tile * cfg.BN + key < tiles.S_K, 0), s, float("-inf"))
    s = pv_order(s)
    if cfg.SKELETON and not SEED:
        p8, e_p, alpha, m_i, c_i = skeleton_policy(s, m_i, c_i, cfg)
        row_sum = gl.zeros_like(c_i)
    elif cfg.FUSED and not cfg.P_CLAMP:
        p8, e_p, alpha, m_i, c_i = fused_policy_grid(s, k_scale, m_i, c_i, tile, tiles, cfg, SEED)
        row_sum = gl.zeros_like(c_i)
    elif cfg.FUSED:
        p8, e_p, alpha, m_i, c_i = fused_policy(s, k_scale, m_i, c_i, tile, tiles, cfg, SEED)
        row_sum = gl.zeros_like(c_i)
    else:
        p8, e_p, alpha, m_i, row_sum = conventional_policy(s, tiles.q_scale * k_scale, m_i, cfg)
    rows: gl.constexpr = gl.SliceLayout(1, cfg.p_layout.parent)
    e_p = gl.convert_layout(e_p, rows, assert_trivial=True)
    alpha = gl.convert_layout(alpha, rows, assert_trivial=True)
    m_i = gl.convert_layout(m_i, rows, assert_trivial=True)
    c_i = gl.convert_layout(c_i, rows, assert_trivial=True)
    row_sum = gl.convert_layout(row_sum, rows, assert_trivial=True)
    return p8, e_p, alpha, m_i, c_i, row_sum
