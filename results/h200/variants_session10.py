"""Session 10's Gluon kernel variants (timing experiments, not kernels): each is kernels/gluon_fused.py at commit
8866c24 (the kernel of 4345d94) with one change, written to .carry/v10/NAME.py for scripts/ab_gluon.py.
Run from the repository root at that commit: `mkdir -p .carry/v10 && python3 results/h200/variants_session10.py`.
Results and what each measured: results/h200/kernels_bench.md, "Session 10".
"""
SRC = open("kernels/gluon_fused.py").read()


def sub(src, old, new):
    assert src.count(old) == 1, old
    return src.replace(old, new)


def lpart(src):
    """l kept per thread in the row-sum MMA's layout (no quad shuffles per tile); summed once at the end."""
    src = sub(src, '''    sum_layout: gl.constexpr = sums.type.layout
    is_col0 = gl.expand_dims(gl.arange(0, sums.shape[1], gl.SliceLayout(0, sum_layout)), 0) == 0
    row_sum = _rows_as(gl.sum(gl.where(is_col0, sums, 0.0), 1), acc)
    l_i = l_i * alpha_o + row_sum * sum_scale
''', '''    l_i = l_i * gl.expand_dims(_rows_as(alpha_o, sums), 1) + sums * gl.expand_dims(_rows_as(sum_scale, sums), 1)
''')
    src = sub(src, '''    l_i = gl.zeros([HALF], gl.float32, row_layout)
''', '''    if FUSED:
        l_i = gl.zeros([HALF, SUM_N], gl.float32, sum_layout)
    else:
        l_i = gl.zeros([HALF], gl.float32, row_layout)
''')
    src = sub(src, '''        acc, l_i = _retire(pv, sums, acc, l_i, o_scale, sum_scale, alpha_o, ring, N_KT - 1, STAGES, GATE)
''', '''        acc, l_i = _retire(pv, sums, acc, l_i, o_scale, sum_scale, alpha_o, ring, N_KT - 1, STAGES, GATE)
        l_i = _rows_as(gl.sum(l_i, 1), acc)
''')
    return src


def prea(src):
    """mxfp8 (gate, no clamp): Stage-A in the frozen max's units before the row max; the max over t; e_p and a
    rollback applied as an integer shift of the pattern (timing only: no slow path for a rollback above E_MAX)."""
    src = sub(src, '''    tmax = _thread_max(s)  # with P_BLOCKS: the maximum of each MX block
    smax = _rows_as(gl.max(tmax, 1), s)
    a = _rows_as(a, s)
    m_i = _rows_as(m_i, s)
    c_i = _rows_as(c_i, s)
    a128 = a * 128.0
    D_FLOOR: gl.constexpr = int(D_BIAS)  # floor: D_BIAS > 0
    if SEED:
        m_i = smax * a
        c_i = D_BIAS - 128.0 * m_i
    pmax = (gl.fma(smax, a128, c_i) + MAGIC).to(gl.int32, bitcast=True) - MAGIC_BITS
''', '''    a = _rows_as(a, s)
    m_i = _rows_as(m_i, s)
    c_i = _rows_as(c_i, s)
    a128 = a * 128.0
    D_FLOOR: gl.constexpr = int(D_BIAS)  # floor: D_BIAS > 0
    EARLY: gl.constexpr = GATE and not SEED and not P_CLAMP and not P_BLOCKS
    if EARLY:
        c_u = _broadcast_to(gl.expand_dims((c_i - 128.0 * E_MAX) * TWO_M16, 1), s.shape)
        s = _fma_sat(s, _broadcast_to(gl.expand_dims(a128 * TWO_M16, 1), s.shape), c_u) + 192.0
        umax = _rows_as(gl.max(_thread_max(s), 1), s).to(gl.int32, bitcast=True) - 0x43400000
        pmax = umax + 128 * E_MAX
    else:
        tmax = _thread_max(s)  # with P_BLOCKS: the maximum of each MX block
        smax = _rows_as(gl.max(tmax, 1), s)
        if SEED:
            m_i = smax * a
            c_i = D_BIAS - 128.0 * m_i
        pmax = (gl.fma(smax, a128, c_i) + MAGIC).to(gl.int32, bitcast=True) - MAGIC_BITS
''')
    src = sub(src, '''    e_p = gl.maximum((pmax >> 7) - 127 - P_EMAX, -127) + P_SHIFT
''', '''    e_p = gl.maximum((pmax >> 7) - 127 - P_EMAX, -127) + P_SHIFT
    if EARLY:
        e_p = gl.maximum(e_p, E_MAX - 117)
''')
    src = sub(src, '''    if P_CLAMP:
        t = _fma_sat(s, _broadcast_to(gl.expand_dims(a128 * TWO_M13, 1), s.shape), c_p) + P_SAT_BASE
    else:
        t = _fma_sat(s, _broadcast_to(gl.expand_dims(a128 * TWO_M16, 1), s.shape), c_p) + 192.0
    p = (t.to(gl.int32, bitcast=True) << 16).to(gl.float32, bitcast=True)
''', '''    if EARLY:
        k_u = _broadcast_to(gl.expand_dims((128 * (E_MAX - e_p - delta)) << 16, 1), s.shape)
        p = ((s.to(gl.int32, bitcast=True) << 16) + k_u).to(gl.float32, bitcast=True)
    else:
        if P_CLAMP:
            t = _fma_sat(s, _broadcast_to(gl.expand_dims(a128 * TWO_M13, 1), s.shape), c_p) + P_SAT_BASE
        else:
            t = _fma_sat(s, _broadcast_to(gl.expand_dims(a128 * TWO_M16, 1), s.shape), c_p) + 192.0
        p = (t.to(gl.int32, bitcast=True) << 16).to(gl.float32, bitcast=True)
''')
    src = sub(src, '''P_SAT_FLOOR: gl.constexpr''', '''E_MAX: gl.constexpr = gl.constexpr(25)
P_SAT_FLOOR: gl.constexpr''')
    return src


def bar_early(src):
    """An explicit warpgroup barrier after P's store and fence, before the turn: membar then inserts none between
    the S_{j+1} and PV_j issues."""
    return sub(src, '''    p_smem.store(p)
    fence_async_shared()
    slot = j % STAGES
    if NEXT:
        _wait_keys(ring, j + 1, STAGES)
    _take_turn(WG, j)''', '''    p_smem.store(p)
    fence_async_shared()
    gl.thread_barrier()
    slot = j % STAGES
    if NEXT:
        _wait_keys(ring, j + 1, STAGES)
    _take_turn(WG, j)''')


def rs_late(src):
    """The row-sum MMA issued after the hand-over (the other warpgroup may issue its GEMMs sooner)."""
    src = sub(src, '''    sums = warpgroup_mma(p_smem, ones_smem.permute((1, 0)), gl.zeros([HALF, SUM_N], gl.float32, sum_layout),
                         use_acc=False, is_async=True)
    if WG == 0 or NEXT:  # the second warpgroup's last hand-over would have no taker
        _hand_over(WG, j)
''', '''    if WG == 0 or NEXT:  # the second warpgroup's last hand-over would have no taker
        _hand_over(WG, j)
    sums = warpgroup_mma(p_smem, ones_smem.permute((1, 0)), gl.zeros([HALF, SUM_N], gl.float32, sum_layout),
                         use_acc=False, is_async=True)
''')
    return src


def handover_s(src):
    """Hand the turn over right after S_{j+1}'s issue (the other warpgroup's S may run before this one's PV)."""
    src = sub(src, '''    if NEXT:
        s_tok = _issue_scores(q_smem, ring, j + 1, s_layout, HALF, BN, STAGES)
    pv = warpgroup_mma(p_smem''', '''    if NEXT:
        s_tok = _issue_scores(q_smem, ring, j + 1, s_layout, HALF, BN, STAGES)
    if WG == 0 or NEXT:
        _hand_over(WG, j)
    pv = warpgroup_mma(p_smem''')
    src = sub(src, '''                         use_acc=False, is_async=True)
    if WG == 0 or NEXT:  # the second warpgroup's last hand-over would have no taker
        _hand_over(WG, j)
    if NEXT:
        s = warpgroup_mma_wait(num_outstanding=2''', '''                         use_acc=False, is_async=True)
    if NEXT:
        s = warpgroup_mma_wait(num_outstanding=2''')
    return src


def no_rs(src):
    """Timing only (other numerics: the row sum of Stage-A's float32 P, the emulator's rowsum_gemm=False): no
    row-sum MMA, l from FADDs."""
    src = sub(src, '''    return p8, e_p, alpha, m_i, c_i


@gluon.jit
def _conventional_policy''', '''    return p8, e_p, alpha, m_i, c_i, gl.sum(p, 1)


@gluon.jit
def _conventional_policy''')
    src = sub(src, '''        p8, e_p, alpha, m_i, c_i = _fused_policy(s, a, m_i, c_i, flags, tile, gate_p, p_layout, D_BIAS, SEED,
                                                 GATE, P_EMAX, P_SHIFT, P_CLAMP, P_BLOCKS)
        row_sum = gl.zeros_like(c_i)''', '''        p8, e_p, alpha, m_i, c_i, row_sum = _fused_policy(s, a, m_i, c_i, flags, tile, gate_p, p_layout, D_BIAS,
                                                          SEED, GATE, P_EMAX, P_SHIFT, P_CLAMP, P_BLOCKS)''')
    src = sub(src, '''    p, e_p, alpha, m_i, c_i, _ = _policy(s, j, q_scale, k_scale, m_i, c_i, flags, gate_p, S_K, p_layout, BN, D_BIAS,
                                         FUSED, SEED, MASK, GATE, P_EMAX, P_SHIFT, P_CLAMP, P_BLOCKS)''',
              '''    p, e_p, alpha, m_i, c_i, row_sum = _policy(s, j, q_scale, k_scale, m_i, c_i, flags, gate_p, S_K, p_layout, BN,
                                               D_BIAS, FUSED, SEED, MASK, GATE, P_EMAX, P_SHIFT, P_CLAMP, P_BLOCKS)''')
    src = sub(src, '''    sums = warpgroup_mma(p_smem, ones_smem.permute((1, 0)), gl.zeros([HALF, SUM_N], gl.float32, sum_layout),
                         use_acc=False, is_async=True)
''', '')
    src = sub(src, '''    return s, k_scale_next, v_scale_next, pv, sums, p_scale * v_scale, p_scale, alpha, acc, l_i, m_i, c_i


@gluon.jit
def _retire''', '''    return s, k_scale_next, v_scale_next, pv, sums, p_scale * v_scale, row_sum * p_scale, alpha, acc, l_i, m_i, c_i


@gluon.jit
def _retire''')
    src = sub(src, '''    pv, sums = warpgroup_mma_wait(num_outstanding=0, deps=(pv, sums))''',
              '''    pv = warpgroup_mma_wait(num_outstanding=0, deps=(pv, ))''')
    src = sub(src, '''    sum_layout: gl.constexpr = sums.type.layout
    is_col0 = gl.expand_dims(gl.arange(0, sums.shape[1], gl.SliceLayout(0, sum_layout)), 0) == 0
    row_sum = _rows_as(gl.sum(gl.where(is_col0, sums, 0.0), 1), acc)
    l_i = l_i * alpha_o + row_sum * sum_scale
''', '''    l_i = l_i * alpha_o + sum_scale
''')
    src = sub(src, "        s = warpgroup_mma_wait(num_outstanding=2, deps=(s_tok, ))",
              "        s = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok, ))")
    return src


def rs_reg(src):
    """The row-sum MMA reads P from registers (A operand), issued after S_{j+1} and waited with it."""
    src = sub(src, '''    pv = warpgroup_mma(p_smem, ring[1].index(slot).permute((1, 0)), gl.zeros([HALF, D], gl.float32, o_layout),
                       use_acc=False, is_async=True)
    sums = warpgroup_mma(p_smem, ones_smem.permute((1, 0)), gl.zeros([HALF, SUM_N], gl.float32, sum_layout),
                         use_acc=False, is_async=True)
    if WG == 0 or NEXT:  # the second warpgroup's last hand-over would have no taker
        _hand_over(WG, j)
    if NEXT:
        s = warpgroup_mma_wait(num_outstanding=2, deps=(s_tok, ))
''', '''    sums = warpgroup_mma(gl.convert_layout(p, gl.DotOperandLayout(0, sum_layout, 4)), ones_smem.permute((1, 0)),
                         gl.zeros([HALF, SUM_N], gl.float32, sum_layout), use_acc=False, is_async=True)
    pv = warpgroup_mma(p_smem, ring[1].index(slot).permute((1, 0)), gl.zeros([HALF, D], gl.float32, o_layout),
                       use_acc=False, is_async=True)
    if WG == 0 or NEXT:  # the second warpgroup's last hand-over would have no taker
        _hand_over(WG, j)
    if NEXT:
        s, sums = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok, sums))
    else:
        sums = warpgroup_mma_wait(num_outstanding=1, deps=(sums, ))
''')
    src = sub(src, '''    pv, sums = warpgroup_mma_wait(num_outstanding=0, deps=(pv, sums))''',
              '''    pv = warpgroup_mma_wait(num_outstanding=0, deps=(pv, ))''')
    return src


def fused_regs(src):
    """Fused policy on the register schedule (P in registers for PV and the row sum, both waited in the turn)."""
    src = sub(src, '''    pv_tok = warpgroup_mma(p, ring[1].index(slot).permute((1, 0)), gl.zeros([HALF, D], gl.float32, o_layout),
                           use_acc=False, is_async=True)
''', '''    pv_tok = warpgroup_mma(p, ring[1].index(slot).permute((1, 0)), gl.zeros([HALF, D], gl.float32, o_layout),
                           use_acc=False, is_async=True)
    if FUSED:
        SUM_N: gl.constexpr = ones_smem.shape[0]
        sum_layout: gl.constexpr = gl.NVMMADistributedLayout([3, 0], [gl.num_warps(), 1], [16, SUM_N, 32])
        sums = warpgroup_mma(gl.convert_layout(p, gl.DotOperandLayout(0, sum_layout, 4)), ones_smem.permute((1, 0)),
                             gl.zeros([HALF, SUM_N], gl.float32, sum_layout), use_acc=False, is_async=True)
''')
    src = sub(src, '''    if NEXT:
        pv, s = warpgroup_mma_wait(num_outstanding=0, deps=(pv_tok, s_tok))
    else:
        pv = warpgroup_mma_wait(num_outstanding=0, deps=(pv_tok, ))
    mbarrier.arrive(ring[3].index(slot), count=1)
    p_scale = _pow2(e_p)
''', '''    if FUSED:
        if NEXT:
            pv, sums, s = warpgroup_mma_wait(num_outstanding=0, deps=(pv_tok, sums, s_tok))
        else:
            pv, sums = warpgroup_mma_wait(num_outstanding=0, deps=(pv_tok, sums))
        is_col0 = gl.expand_dims(gl.arange(0, SUM_N, gl.SliceLayout(0, sum_layout)), 0) == 0
        row_sum = _rows_as(gl.sum(gl.where(is_col0, sums, 0.0), 1), acc)
    else:
        if NEXT:
            pv, s = warpgroup_mma_wait(num_outstanding=0, deps=(pv_tok, s_tok))
        else:
            pv = warpgroup_mma_wait(num_outstanding=0, deps=(pv_tok, ))
    mbarrier.arrive(ring[3].index(slot), count=1)
    p_scale = _pow2(e_p)
''')
    src = sub(src, '''    if FUSED:
        out = _step_smem(''', '''    if False:
        out = _step_smem(''')
    src = sub(src, '''    if FUSED:
        acc, l_i = _retire(pv, sums, acc, l_i, o_scale, sum_scale, alpha_o, ring, N_KT - 1, STAGES, GATE)
    else:
        acc = _accumulate(acc, pv, o_scale, alpha_o, True)''', '''    acc = _accumulate(acc, pv, o_scale, alpha_o, True)''')
    return src


def gemm_only(src):
    """Roofline probe (wrong output): P = E4M3(s / 1024), no row max, gate or Stage-A; GEMMs, O update and
    row-sum MMA as committed."""
    return sub(src, '''    if FUSED:
        p8, e_p, alpha, m_i, c_i = _fused_policy(''', '''    if FUSED and not SEED:
        p8 = _to_e4m3(gl.convert_layout(s * 0.0009765625, p_layout, assert_trivial=True))
        e_p = gl.zeros_like(_rows_as(c_i, s).to(gl.int32))
        alpha = gl.full_like(_rows_as(c_i, s), 1.0)
        m_i = _rows_as(m_i, s)
        c_i = _rows_as(c_i, s)
        row_sum = gl.zeros_like(c_i)
    elif FUSED:
        p8, e_p, alpha, m_i, c_i = _fused_policy(''')


def f16p(src):
    """Timing probe (other numerics: Schraudolph in FP16 patterns, M = 10): Stage-A writes an FP16 pattern, two
    values are packed by one PRMT and narrowed by one f16x2 -> e4m3x2 convert (no shifts)."""
    src = sub(src, '''    else:
        c_p = _broadcast_to(gl.expand_dims((c_i - 128.0 * e_p.to(gl.float32)) * TWO_M16, 1), s.shape)
    if P_CLAMP:
        t = _fma_sat(s, _broadcast_to(gl.expand_dims(a128 * TWO_M13, 1), s.shape), c_p) + P_SAT_BASE
    else:
        t = _fma_sat(s, _broadcast_to(gl.expand_dims(a128 * TWO_M16, 1), s.shape), c_p) + 192.0
    p = (t.to(gl.int32, bitcast=True) << 16).to(gl.float32, bitcast=True)
    p8 = _to_e4m3(gl.convert_layout(p, p_layout, assert_trivial=True))
''', '''    else:
        c_p = _broadcast_to(gl.expand_dims((8.0 * (c_i - 128.0 * e_p.to(gl.float32)) - 114688.0) * TWO_M16, 1),
                            s.shape)
    if P_CLAMP:
        t = _fma_sat(s, _broadcast_to(gl.expand_dims(a128 * TWO_M13, 1), s.shape), c_p) + P_SAT_BASE
        p = (t.to(gl.int32, bitcast=True) << 16).to(gl.float32, bitcast=True)
        p8 = _to_e4m3(gl.convert_layout(p, p_layout, assert_trivial=True))
    else:
        t = _fma_sat(s, _broadcast_to(gl.expand_dims(a128 * (8.0 * TWO_M16), 1), s.shape), c_p) + 192.0
        p = t
        p8 = _f16_patterns_to_e4m3(gl.convert_layout(t, p_layout, assert_trivial=True))
''')
    src = sub(src, '''@gluon.jit
def _rescale_blocks(p8, factor):''', '''@gluon.jit
def _f16_patterns_to_e4m3(t):
    """The FP16 patterns in the low halves of four float32 registers -> E4M3: two PRMT and two f16x2 converts."""
    return gl.inline_asm_elementwise(
        "{ .reg .b16 lo, hi; .reg .b32 a, b; prmt.b32 a, $1, $2, 0x5410; prmt.b32 b, $3, $4, 0x5410; "
        "cvt.rn.satfinite.e4m3x2.f16x2 lo, a; cvt.rn.satfinite.e4m3x2.f16x2 hi, b; mov.b32 $0, {lo, hi}; }",
        "=r,r,r,r,r", [t], dtype=gl.float8e4nv, is_pure=True, pack=4)


@gluon.jit
def _rescale_blocks(p8, factor):''')
    return src


def q_rs(src):
    """Q from registers for the S GEMM (RS wgmma): loaded once per warpgroup, 8 KB less shared-memory traffic per
    warpgroup and key tile (one spilled register in the loop)."""
    return sub(src, '''    s_layout: gl.constexpr = gl.NVMMADistributedLayout([3, 0], [gl.num_warps(), 1], [16, BN, 32])
    if WG == 1:
        _hand_over(WG, qt)  # the first turn is warpgroup 0's''', '''    s_layout: gl.constexpr = gl.NVMMADistributedLayout([3, 0], [gl.num_warps(), 1], [16, BN, 32])
    q_smem = q_smem.load(gl.DotOperandLayout(0, s_layout, 4))
    if WG == 1:
        _hand_over(WG, qt)  # the first turn is warpgroup 0's''')


VARIANTS = {"prea": prea, "lpart": lpart, "both": lambda s: prea(lpart(s)), "bar_early": bar_early,
            "rs_late": rs_late, "handover_s": handover_s, "bar_early_rs_late": lambda s: rs_late(bar_early(s)),
            "no_rs": no_rs, "rs_reg": rs_reg, "fused_regs": fused_regs, "gemm_only": gemm_only, "f16p": f16p,
            "q_rs": q_rs}

for name, make in VARIANTS.items():
    with open(f".carry/v10/{name}.py", "w") as out:
        out.write(make(SRC))
