"""The Hopper attention kernels in Gluon, with FA3's ping-pong: one warpgroup's softmax under the other's GEMMs.

Same numerics, operands and policies as `kernels.triton_fused` (see its docstring; on the conventional
policy the outputs matched it bit for bit on the H200); what changes is the schedule, which plain Triton
3.6 does not produce. One program holds 128 query rows in two math warpgroups of 64 rows and a TMA
warpgroup that streams K and V through a ring of STAGES slots shared by both. Each math warpgroup runs,
per key tile j,

    softmax policy of tile j -> P_j, alpha_j          while PV_{j-1} and its row sum finish on the tensor cores
    wait for PV_{j-1}; free tile j-1's slot; O = O alpha_{j-1} + PV_{j-1} in float32; P_j to shared memory
    wait for its turn; issue S_{j+1} = Q K_{j+1}^T, then PV_j = P_j V_j and its row sum; hand the turn over
    wait for S_{j+1} only

and the turns alternate between the two through two named barriers, so that the tensor cores run one
warpgroup's GEMMs while the other computes its softmax. Without them, warpgroups (or the programs sharing
an SM) fall into lock step, GEMMs beside GEMMs and softmax beside softmax:
results/h200/kernels/profile/ncu_attention.md.
In the fused policy P goes to the PV GEMM through shared memory, not registers: PV_j then runs under the
warpgroup's own next policy (FA3's intra-warpgroup overlap) without two P operands in registers beside O, PV
and S, which the 240 registers a math warpgroup gets do not hold. The conventional policy, the baseline, keeps
P in registers and waits for PV_j in its turn, which measured faster for it (A/B in results/log/).
Tile 0 (it seeds the frozen maximum) and the last, masked tile are peeled out of the loop. K and V arrive in the
prepass's "thread" key order (`prepass.KEY_ORDERS`): each quad thread holds one MX block of P per row.

The interface is a handful of typed values (Gluon aggregates): `Config` (the compile-time switches), `Ring` (the K/V
slots and their barriers, with the slot and phase arithmetic), `Turn` (a math warpgroup's named barriers), `Tiles`
(the shared-memory operands and per-program pointers a key tile reads) and `State` (what one key tile hands the
next). With SKELETON the kernel is the measured limit of this schedule: the same tiles, both FP8 GEMMs, the O update
and the row-sum MMA, and no softmax (P = E4M3(S / 1024); the output is not attention).
(No `from __future__ import annotations`: an aggregate checks each field against its annotation.)
"""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.language.core import (
    _aggregate as aggregate,  # Triton 3.6 has no public name for it
    base_value,
)

from fsbench.kernels import constants

# the shared constants (`kernels.constants` says what each is), as the constexpr globals a jit function may read
MAGIC: gl.constexpr = gl.constexpr(constants.MAGIC)
MAGIC_BITS: gl.constexpr = gl.constexpr(constants.MAGIC_BITS)
TWO_M13: gl.constexpr = gl.constexpr(constants.TWO_M13)
TWO_M16: gl.constexpr = gl.constexpr(constants.TWO_M16)
P_BASE: gl.constexpr = gl.constexpr(constants.P_BASE)
P_SAT_FLOOR: gl.constexpr = gl.constexpr(constants.P_SAT_FLOOR)
P_SAT_BASE: gl.constexpr = gl.constexpr(constants.P_SAT_BASE)
SKELETON_P_SCALE: gl.constexpr = gl.constexpr(0.0009765625)  # 2^-10: the skeleton's P = E4M3(S / 1024)


@gluon.jit
def _pow2(e):
    """2^e for integer tensors from the exponent bits (exact); e < -126 gives 0."""
    return ((gl.minimum(gl.maximum(e, -127), 127) + 127) << 23).to(gl.float32, bitcast=True)


@gluon.jit
def _fma_sat(x, y, z):
    """fma(x, y, z) clamped to [0, 1] by the FFMA itself (.sat; -inf and NaN give 0)."""
    return gl.inline_asm_elementwise("fma.rn.sat.f32 $0, $1, $2, $3;", "=f,f,f,f", [x, y, z],
                                     dtype=gl.float32, is_pure=True, pack=1)


@gluon.jit
def _to_e4m3(x):
    """float32 -> E4M3 (round to nearest even, saturating), four values per 32-bit register: two packed
    converts and one move, where the compiler's own lowering splits each pair into bytes and rebuilds it."""
    return gl.inline_asm_elementwise(
        "{ .reg .b16 lo, hi; cvt.rn.satfinite.e4m3x2.f32 lo, $2, $1; cvt.rn.satfinite.e4m3x2.f32 hi, $4, $3; "
        "mov.b32 $0, {lo, hi}; }", "=r,r,r,r,r", [x], dtype=gl.float8e4nv, is_pure=True, pack=4)


@gluon.jit
def _rescale_blocks(p8, factor):
    """E4M3 P in its block's units -> P * factor (a power of two) in E4M3, four values per register: two packed
    converts to f16x2, a packed multiply each, two packed converts back (the bytes also skip the PRMT
    regrouping of Gluon's lowering). Exact where the product is an E4M3 value: the prepass docstring says when."""
    return gl.inline_asm_elementwise(
        "{ .reg .b16 lo, hi; .reg .b32 a, b; mov.b32 {lo, hi}, $1; "
        "cvt.rn.f16x2.e4m3x2 a, lo; cvt.rn.f16x2.e4m3x2 b, hi; mul.rn.f16x2 a, a, $2; mul.rn.f16x2 b, b, $3; "
        "cvt.rn.satfinite.e4m3x2.f16x2 lo, a; cvt.rn.satfinite.e4m3x2.f16x2 hi, b; mov.b32 $0, {lo, hi}; }",
        "=r,r,r,r", [p8, factor], dtype=gl.float8e4nv, is_pure=True, pack=4)


@gluon.jit
def _mark(ptr, need):
    """Store 1 at the scalar `ptr` from every row where `need` holds (a predicated st.global)."""
    addr = ptr.to(gl.int64, bitcast=True) + gl.zeros_like(need.to(gl.int64))
    gl.inline_asm_elementwise("{ .reg .pred p; setp.ne.s32 p, $1, 0; @p st.global.b8 [$2], $3; mov.b32 $0, 0; }",
                              "=r,r,l,r", [need.to(gl.int32), addr, gl.full_like(need, 1, dtype=gl.int32)],
                              dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _broadcast_to(x, shape: gl.constexpr):
    """x broadcast to `shape` in its own layout (Gluon has no broadcast_to; the int8 partner is dead code)."""
    return gl.broadcast(x, gl.full(shape, 0, gl.int8, x.type.layout))[0]


@gluon.jit
def _key_axes(s):
    """The (key-permuted, see `_pv_order`) scores [M, 128] as [M, s, h, t, e, j]: k = 32s + 16h + 4t + 2e + j, t
    the thread of the quad that holds the score."""
    return gl.reshape(s, [s.shape[0], s.shape[1] // 32, 2, 4, 2, 2])


@gluon.jit
def _thread_max(s):
    """Per row, the maximum of the 32 scores each thread of a quad holds: [M, 4], no shuffle, as a tree of
    independent FMNMX (not one serial chain). With the prepass's "thread" key order, thread t's keys
    are the tile's MX block t."""
    return gl.max(gl.max(gl.max(gl.max(_key_axes(s), 5), 4), 2), 1)


@gluon.jit
def _per_thread(x, like):
    """Per-(row, thread of the quad) values [M, 4] (in `_thread_max`'s layout) spread over the keys of `like`
    [M, 128]: the expansions undo `_thread_max`'s reductions, so each thread reads only its own registers."""
    x = _broadcast_to(gl.expand_dims(x, 1), [x.shape[0], like.shape[1] // 32, 4])
    x = _broadcast_to(gl.expand_dims(x, 2), [x.shape[0], like.shape[1] // 32, 2, 4])
    x = _broadcast_to(gl.expand_dims(x, 4), [x.shape[0], like.shape[1] // 32, 2, 4, 2])
    x = _broadcast_to(gl.expand_dims(x, 5), [x.shape[0], like.shape[1] // 32, 2, 4, 2, 2])
    return gl.convert_layout(gl.reshape(x, like.shape), like.type.layout, assert_trivial=True)


@gluon.jit
def _rows_as(x, like):
    """A per-row vector in the row layout of the 2-D tensor `like` (a register no-op for our layouts)."""
    return gl.convert_layout(x, gl.SliceLayout(1, like.type.layout))



@aggregate
class Config:
    """The kernel's compile-time switches (the launcher's constexprs): tile sizes, ring depth, Stage-A offset,
    softmax policy, gate, P's format and the skeleton."""

    BM: gl.constexpr
    BN: gl.constexpr
    D: gl.constexpr
    STAGES: gl.constexpr
    D_BIAS: gl.constexpr
    FUSED: gl.constexpr
    GATE: gl.constexpr
    P_EMAX: gl.constexpr
    P_SHIFT: gl.constexpr
    P_CLAMP: gl.constexpr
    P_BLOCKS: gl.constexpr
    SKELETON: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, BM, BN, D, STAGES, D_BIAS, FUSED, GATE, P_EMAX, P_SHIFT, P_CLAMP, P_BLOCKS, SKELETON):
        self.BM = gl.constexpr(BM)
        self.BN = gl.constexpr(BN)
        self.D = gl.constexpr(D)
        self.STAGES = gl.constexpr(STAGES)
        self.D_BIAS = gl.constexpr(D_BIAS)
        self.FUSED = gl.constexpr(FUSED)
        self.GATE = gl.constexpr(GATE)
        self.P_EMAX = gl.constexpr(P_EMAX)
        self.P_SHIFT = gl.constexpr(P_SHIFT)
        self.P_CLAMP = gl.constexpr(P_CLAMP)
        self.P_BLOCKS = gl.constexpr(P_BLOCKS)
        self.SKELETON = gl.constexpr(SKELETON)


@gluon.jit
def _fused_policy(s, a, m_i, c_i, flags, tile, gate_p, p_layout: gl.constexpr, cfg: Config, SEED: gl.constexpr):
    """Frozen max, gate and rollback, Stage-A and Stage-B of P (`triton_fused._fused_policy`, step by step).
    Returns (P as E4M3 in `p_layout`, per-row log2 scale of P, alpha = 2^-delta, m, c). P is narrowed to
    E4M3 in the operand layout, where the e4m3x2 converts pack it straight into its registers. Gate flags
    are predicated stores from the rows that fire (no block-wide reduction: see `_step`)."""
    tmax = _thread_max(s)  # with P_BLOCKS: the maximum of each MX block
    smax = _rows_as(gl.max(tmax, 1), s)
    a = _rows_as(a, s)
    m_i = _rows_as(m_i, s)
    c_i = _rows_as(c_i, s)
    a128 = a * 128.0
    D_FLOOR: gl.constexpr = int(cfg.D_BIAS)  # floor: D_BIAS > 0
    if SEED:
        m_i = smax * a
        c_i = cfg.D_BIAS - 128.0 * m_i
    pmax = (gl.fma(smax, a128, c_i) + MAGIC).to(gl.int32, bitcast=True) - MAGIC_BITS
    need = pmax > gate_p
    _mark(flags + tile, need)
    if cfg.GATE:
        delta = gl.where(need, (pmax + (127 - D_FLOOR)) >> 7, 0)  # ceil((pmax - D_BIAS) / 128), in integers
        m_i = m_i + delta.to(gl.float32)
        c_i = c_i - 128.0 * delta.to(gl.float32)
        pmax = pmax - 128 * delta
        alpha = _pow2(-delta)
    else:
        alpha = gl.full_like(c_i, 1.0)
    e_p = gl.maximum((pmax >> 7) - 127 - cfg.P_EMAX, -127) + cfg.P_SHIFT
    # Stage-A: the pattern of P / 2^e (e: P's scale) is the integer part of t, whose step is 1 from 192 (2^-16) or
    # from P_SAT_BASE (2^-13, where .sat clamps E2M3 P at its largest value)
    if cfg.P_BLOCKS:
        rows_b: gl.constexpr = gl.SliceLayout(1, tmax.type.layout)
        c_ib = gl.expand_dims(gl.convert_layout(c_i, rows_b, assert_trivial=True), 1)
        pb = gl.fma(tmax, gl.expand_dims(gl.convert_layout(a128, rows_b, assert_trivial=True), 1), c_ib)
        s_b = gl.maximum((((pb + MAGIC).to(gl.int32, bitcast=True) - MAGIC_BITS) >> 7) - 127 - cfg.P_EMAX, -127)
        c_p = _per_thread((c_ib - 128.0 * (s_b + 6).to(gl.float32) - P_SAT_FLOOR) * TWO_M13, s)
    elif cfg.P_CLAMP:
        c_p = _broadcast_to(gl.expand_dims((c_i - 128.0 * e_p.to(gl.float32) - P_SAT_FLOOR) * TWO_M13, 1), s.shape)
    else:
        c_p = _broadcast_to(gl.expand_dims((c_i - 128.0 * e_p.to(gl.float32)) * TWO_M16, 1), s.shape)
    if cfg.P_CLAMP:
        t = _fma_sat(s, _broadcast_to(gl.expand_dims(a128 * TWO_M13, 1), s.shape), c_p) + P_SAT_BASE
    else:
        t = _fma_sat(s, _broadcast_to(gl.expand_dims(a128 * TWO_M16, 1), s.shape), c_p) + P_BASE
    p = (t.to(gl.int32, bitcast=True) << 16).to(gl.float32, bitcast=True)
    p8 = _to_e4m3(gl.convert_layout(p, p_layout, assert_trivial=True))
    if cfg.P_BLOCKS:  # P in its block's units (2^s_b at 2^-6, where E4M3's subnormals round as E2M3's) -> 2^e units
        e_pb = gl.expand_dims(gl.convert_layout(e_p, rows_b, assert_trivial=True), 1)
        factor = _per_thread(_pow2(s_b + 6 - e_pb).to(gl.float16), p)
        p8 = _rescale_blocks(p8, gl.convert_layout(factor, p_layout, assert_trivial=True))
    return p8, e_p, alpha, m_i, c_i


@gluon.jit
def _conventional_policy(s, a, m_i, p_layout: gl.constexpr, P_EMAX: gl.constexpr):
    """Online max, MUFU exp2, P per-row FP8; returns (P, log2 scale of P, alpha, m, float32 row sum of P)."""
    a = _rows_as(a, s)
    tmax = gl.max(s, 1) * a
    m_i = _rows_as(m_i, s)
    m_new = gl.maximum(m_i, tmax)
    alpha = gl.exp2(m_i - m_new)
    e_p = gl.maximum(gl.floor(tmax - m_new).to(gl.int32) - P_EMAX, -127)
    p = gl.exp2(gl.fma(s, gl.expand_dims(a, 1), gl.expand_dims(-(m_new + e_p.to(gl.float32)), 1)))
    return _to_e4m3(gl.convert_layout(p, p_layout, assert_trivial=True)), e_p, alpha, m_new, gl.sum(p, 1)


@gluon.jit
def _skeleton_policy(s, m_i, c_i, p_layout: gl.constexpr):
    """No softmax: P = E4M3(S / 1024), scale 2^0, alpha 1, m and c unchanged (the skeleton's P, not attention)."""
    p8 = _to_e4m3(gl.convert_layout(s * SKELETON_P_SCALE, p_layout, assert_trivial=True))
    c_i = _rows_as(c_i, s)
    return p8, gl.zeros_like(c_i.to(gl.int32)), gl.full_like(c_i, 1.0), _rows_as(m_i, s), c_i


@gluon.jit
def _pv_order(s):
    """Keys reordered within each 32-key block, 16h + 8e + 2t + j -> 16h + 4t + 2e + j (V's keys are stored in
    the same order): thread t of a quad then holds the scores of the keys it feeds to the PV GEMM as the
    register A operand. The permutation moves no data; done on the float32 scores, before any per-element
    work, so that the e4m3x2 converts pack P straight into the operand's registers."""
    x = gl.reshape(s, [s.shape[0], s.shape[1] // 32, 2, 2, 4, 2])
    return gl.reshape(gl.permute(x, [0, 1, 2, 4, 3, 5]), s.shape)


@aggregate
class Tiles:
    """What a math warpgroup's key tiles read besides the ring: its Q and P in shared memory, the row-sum MMA's
    ones, its rows' Q scales, the K and V scale pointers of the (batch, head), the gate flags, the key count and
    the gate's Stage-A pattern."""

    q_smem: gl.shared_memory_descriptor
    p_smem: gl.shared_memory_descriptor
    ones_smem: gl.shared_memory_descriptor
    q_scale: gl.tensor
    k_scale_ptr: gl.tensor
    v_scale_ptr: gl.tensor
    flags: gl.tensor
    S_K: gl.tensor
    gate_p: gl.tensor

    @gluon.constexpr_function
    def __init__(self, q_smem, p_smem, ones_smem, q_scale, k_scale_ptr, v_scale_ptr, flags, S_K, gate_p):
        self.q_smem = q_smem
        self.p_smem = p_smem
        self.ones_smem = ones_smem
        self.q_scale = q_scale
        self.k_scale_ptr = k_scale_ptr
        self.v_scale_ptr = v_scale_ptr
        self.flags = flags
        self.S_K = S_K
        self.gate_p = gate_p

    @gluon.jit
    def next_scales(self, j, k_scale, v_scale, NEXT: gl.constexpr):
        """K and V scales of tile j + 1, loaded a tile ahead (no other program hides a global load's latency)."""
        if NEXT:
            k_scale = gl.load(self.k_scale_ptr + j + 1)
            v_scale = gl.load(self.v_scale_ptr + j + 1)
        return k_scale, v_scale


@gluon.jit
def _policy(s, tile, k_scale, m_i, c_i, tiles: Tiles, p_layout: gl.constexpr, cfg: Config, SEED: gl.constexpr,
            MASK: gl.constexpr):
    """Scores of one key tile (K's scale `k_scale`) -> (P operand, e_p, alpha, m, c, float32 row sum or 0)."""
    if MASK:  # score column c holds key 32t + 8s + 4h + 2e + j of the tile, c = 32s + 16h + 8e + 2t + j (prepass)
        c = gl.arange(0, cfg.BN, gl.SliceLayout(0, s.type.layout))
        key = (((c >> 1) & 3) << 5) | ((c >> 5) << 3) | (((c >> 4) & 1) << 2) | (((c >> 3) & 1) << 1) | (c & 1)
        s = gl.where(gl.expand_dims(tile * cfg.BN + key < tiles.S_K, 0), s, float("-inf"))
    s = _pv_order(s)
    a = tiles.q_scale * k_scale
    if cfg.SKELETON and not SEED:
        p8, e_p, alpha, m_i, c_i = _skeleton_policy(s, m_i, c_i, p_layout)
        row_sum = gl.zeros_like(c_i)
    elif cfg.FUSED:
        p8, e_p, alpha, m_i, c_i = _fused_policy(s, a, m_i, c_i, tiles.flags, tile, tiles.gate_p, p_layout, cfg,
                                                 SEED)
        row_sum = gl.zeros_like(c_i)
    else:
        p8, e_p, alpha, m_i, row_sum = _conventional_policy(s, a, m_i, p_layout, cfg.P_EMAX)
    rows: gl.constexpr = gl.SliceLayout(1, p_layout.parent)
    e_p = gl.convert_layout(e_p, rows, assert_trivial=True)
    alpha = gl.convert_layout(alpha, rows, assert_trivial=True)
    m_i = gl.convert_layout(m_i, rows, assert_trivial=True)
    c_i = gl.convert_layout(c_i, rows, assert_trivial=True)
    row_sum = gl.convert_layout(row_sum, rows, assert_trivial=True)
    return p8, e_p, alpha, m_i, c_i, row_sum


# registers per thread after reallocation (setmaxnreg, per warpgroup): the worker math warpgroup and the TMA one;
# the default partition (math warpgroup 0) gets what is left, also 240: (240 + 240 + 24) x 128 = 64,512
MATH_REGS: gl.constexpr = gl.constexpr(240)
PRODUCER_REGS: gl.constexpr = gl.constexpr(24)
# the two math warpgroups' named barriers (ids 0..7 are left to the compiler; 256 threads: both warpgroups meet)
TURN_BARRIER_0 = 8
TURN_BARRIER_1 = 9
TURN_THREADS = 256
SYNC_0: gl.constexpr = gl.constexpr(f"bar.sync {TURN_BARRIER_0}, {TURN_THREADS}; mov.b32 $0, 0;")
SYNC_1: gl.constexpr = gl.constexpr(f"bar.sync {TURN_BARRIER_1}, {TURN_THREADS}; mov.b32 $0, 0;")
ARRIVE_0: gl.constexpr = gl.constexpr(f"bar.arrive {TURN_BARRIER_0}, {TURN_THREADS}; mov.b32 $0, 0;")
ARRIVE_1: gl.constexpr = gl.constexpr(f"bar.arrive {TURN_BARRIER_1}, {TURN_THREADS}; mov.b32 $0, 0;")


@gluon.jit
def _named_barrier(asm: gl.constexpr, anchor):
    """One named-barrier instruction, issued once per thread (`anchor` is any scalar: inline asm needs an operand)."""
    gl.inline_asm_elementwise(asm, "=r,r", [anchor], dtype=gl.int32, is_pure=False, pack=1)


@aggregate
class Turn:
    """Math warpgroup WG's turns at the tensor cores: it waits at its own named barrier (TURN_BARRIER_0 + WG) and
    hands the turn over by arriving at the other's."""

    WG: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, WG):
        self.WG = gl.constexpr(WG)

    @gluon.jit
    def take(self, anchor):
        """Wait until the other warpgroup has handed the turn over."""
        if self.WG == 0:
            _named_barrier(SYNC_0, anchor)
        else:
            _named_barrier(SYNC_1, anchor)

    @gluon.jit
    def hand_over(self, anchor):
        """Arrive (without waiting) at the other warpgroup's barrier: its turn."""
        if self.WG == 0:
            _named_barrier(ARRIVE_1, anchor)
        else:
            _named_barrier(ARRIVE_0, anchor)


@aggregate
class Ring:
    """The K/V ring: STAGES slots of K and V, each with a `ready` barrier (its TMA landed) and an `empty` one (both
    math warpgroups are done with it). Key tile t uses slot t % STAGES in phase (t // STAGES) & 1."""

    k: gl.shared_memory_descriptor
    v: gl.shared_memory_descriptor
    ready: gl.shared_memory_descriptor
    empty: gl.shared_memory_descriptor
    STAGES: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, k, v, ready, empty, STAGES):
        self.k = k
        self.v = v
        self.ready = ready
        self.empty = empty
        self.STAGES = gl.constexpr(STAGES)

    @gluon.jit
    def slot(self, tile):
        return tile % self.STAGES

    @gluon.jit
    def phase(self, tile):
        return (tile // self.STAGES) & 1

    @gluon.jit
    def fill(self, desc_k, desc_v, kv_row, v_row, tile, BN: gl.constexpr):
        """The TMA warpgroup: K and V of `tile` into its slot, once both math warpgroups have released the slot's
        previous tile (the first STAGES tiles find it free)."""
        slot = self.slot(tile)
        mbarrier.wait(self.empty.index(slot), self.phase(tile) ^ 1, pred=tile >= self.STAGES)
        bar = self.ready.index(slot)
        mbarrier.expect(bar, desc_k.block_type.nbytes + desc_v.block_type.nbytes)
        tma.async_copy_global_to_shared(desc_k, [kv_row + tile * BN, 0], bar, self.k.index(slot))
        tma.async_copy_global_to_shared(desc_v, [v_row, tile * BN], bar, self.v.index(slot))

    @gluon.jit
    def wait_keys(self, tile):
        """Wait until K and V of `tile` have landed (before the turn: a late TMA never holds the turn)."""
        mbarrier.wait(self.ready.index(self.slot(tile)), self.phase(tile))

    @gluon.jit
    def release(self, tile):
        """This warpgroup is done with `tile`'s slot."""
        mbarrier.arrive(self.empty.index(self.slot(tile)), count=1)

    @gluon.jit
    def keys(self, tile):
        return self.k.index(self.slot(tile))

    @gluon.jit
    def values(self, tile):
        return self.v.index(self.slot(tile))


@aggregate
class State:
    """What key tile j hands tile j + 1: its scores, the K and V scales of tile j + 1, the PV and row-sum GEMMs of
    tile j (in flight in the fused policy), their per-row scales, alpha_j, O, l, m and c. Only float32 tensors
    cross the loop (an 8-bit P carried to the next iteration costs ~110 PRMT per tile in Gluon 3.6)."""

    s: gl.tensor
    k_scale: gl.tensor
    v_scale: gl.tensor
    pv: base_value  # in the fused policy a GEMM in flight (a wgmma accumulator), else a tensor
    sums: base_value
    o_scale: gl.tensor
    sum_scale: gl.tensor
    alpha_o: gl.tensor
    acc: gl.tensor
    l_i: gl.tensor
    m_i: gl.tensor
    c_i: gl.tensor

    @gluon.constexpr_function
    def __init__(self, s, k_scale, v_scale, pv, sums, o_scale, sum_scale, alpha_o, acc, l_i, m_i, c_i):
        self.s = s
        self.k_scale = k_scale
        self.v_scale = v_scale
        self.pv = pv
        self.sums = sums
        self.o_scale = o_scale
        self.sum_scale = sum_scale
        self.alpha_o = alpha_o
        self.acc = acc
        self.l_i = l_i
        self.m_i = m_i
        self.c_i = c_i


@gluon.jit
def _producer(desc_k, desc_v, ring: Ring, kv_row, v_row, N_KT, BN: gl.constexpr):
    """The TMA warpgroup: every key tile into the ring."""
    for tile in range(N_KT):
        ring.fill(desc_k, desc_v, kv_row, v_row, tile, BN)


@gluon.jit
def _issue_scores(q_smem, ring: Ring, tile, s_layout: gl.constexpr, HALF: gl.constexpr, BN: gl.constexpr):
    """Issue the QK GEMM of `tile` (fresh accumulator; its K has landed: `Ring.wait_keys`); returns the wgmma token."""
    zero = gl.zeros([HALF, BN], gl.float32, s_layout)
    return warpgroup_mma(q_smem, ring.keys(tile).permute((1, 0)), zero, use_acc=False, is_async=True)


# acc *= alpha for the 64 accumulator values a thread holds (tied in place), skipped by a uniform branch when no
# row of the warp has alpha != 1 (elements 0 and 2 carry the thread's two rows)
_RESCALE_N = 64
RESCALE_ASM: gl.constexpr = gl.constexpr(
    "{ .reg .pred p, q; setp.ne.f32 p, $128, 0f3F800000; setp.ne.f32 q, $130, 0f3F800000; or.pred p, p, q; "
    "vote.sync.any.pred p, p, -1; @!p bra.uni SKIP; "
    + " ".join(f"mul.f32 ${i}, ${i}, ${2 * _RESCALE_N + i};" for i in range(_RESCALE_N)) + " SKIP: }")
RESCALE_CONSTRAINTS: gl.constexpr = gl.constexpr(
    ",".join(["=f"] * _RESCALE_N + [str(i) for i in range(_RESCALE_N)] + ["f"] * _RESCALE_N))


@gluon.jit
def _rescale_rows(acc, alpha):
    """acc * alpha, skipped (one vote and a uniform branch) in every warp whose rows all have alpha = 1: a
    rollback is rare, and 64 predicated-off multiplies would still take their issue slots."""
    return gl.inline_asm_elementwise(RESCALE_ASM, RESCALE_CONSTRAINTS, [acc, alpha], dtype=gl.float32,
                                     is_pure=True, pack=64)


@gluon.jit
def _accumulate(acc, pv, pv_scale, alpha, RESCALE: gl.constexpr):
    """O = O alpha + PV pv_scale in float32. RESCALE is off only where alpha is always 1 (fused, no gate); with
    the gate, alpha is 1 in every row that did not roll back, and a warp skips the multiplies when all its
    rows are such (`_rescale_rows`; a block-wide "any row rolled back?" branch had measured slower than the
    64 FMUL, results/log/)."""
    if RESCALE:
        acc = _rescale_rows(acc, _broadcast_to(gl.expand_dims(alpha, 1), acc.shape))
    return gl.fma(pv, gl.expand_dims(pv_scale, 1), acc)


@gluon.jit
def _step(turn: Turn, j, state: State, tiles: Tiles, ring: Ring, cfg: Config, SEED: gl.constexpr, MASK: gl.constexpr,
          NEXT: gl.constexpr):
    """Key tile j: the fused policy with P through shared memory (`_step_smem`), the conventional one with P in
    registers (`_step_registers`), each policy's faster schedule. SEED: the first tile, MASK: the last (keys past
    the sequence masked), NEXT: a tile follows."""
    if cfg.FUSED:
        out = _step_smem(turn, j, state, tiles, ring, cfg, SEED, MASK, NEXT)
    else:
        out = _step_registers(turn, j, state, tiles, ring, cfg, SEED, MASK, NEXT)
    return out


@gluon.jit
def _step_registers(turn: Turn, j, state: State, tiles: Tiles, ring: Ring, cfg: Config, SEED: gl.constexpr,
                    MASK: gl.constexpr, NEXT: gl.constexpr):
    """Key tile j with P in registers: its policy beside tile j-1's O update, then one turn that issues PV_j
    and (when NEXT) tile j+1's scores, then waits for both. Same state as `_step_smem`, with PV_{j-1} done."""
    HALF: gl.constexpr = cfg.BM // 2
    s_layout: gl.constexpr = gl.NVMMADistributedLayout([3, 0], [gl.num_warps(), 1], [16, cfg.BN, 32])
    o_layout: gl.constexpr = state.acc.type.layout
    p_layout: gl.constexpr = gl.DotOperandLayout(0, o_layout, 4)
    k_scale_next, v_scale_next = tiles.next_scales(j, state.k_scale, state.v_scale, NEXT)
    p, e_p, alpha, m_i, c_i, row_sum = _policy(state.s, j, state.k_scale, state.m_i, state.c_i, tiles, p_layout, cfg,
                                               SEED, MASK)
    acc = _accumulate(state.acc, state.pv, state.o_scale, state.alpha_o, True)
    turn.take(j)
    pv_tok = warpgroup_mma(p, ring.values(j).permute((1, 0)), gl.zeros([HALF, cfg.D], gl.float32, o_layout),
                           use_acc=False, is_async=True)
    s = state.s
    if NEXT:
        ring.wait_keys(j + 1)
        s_tok = _issue_scores(tiles.q_smem, ring, j + 1, s_layout, HALF, cfg.BN)
    if turn.WG == 0 or NEXT:
        turn.hand_over(j)
    if NEXT:
        pv, s = warpgroup_mma_wait(num_outstanding=0, deps=(pv_tok, s_tok))
    else:
        pv = warpgroup_mma_wait(num_outstanding=0, deps=(pv_tok, ))
    ring.release(j)
    p_scale = _pow2(e_p)
    l_i = state.l_i * alpha + row_sum * p_scale
    return State(s, k_scale_next, v_scale_next, pv, state.sums, p_scale * state.v_scale, state.sum_scale, alpha, acc,
                 l_i, m_i, c_i)


@gluon.jit
def _step_smem(turn: Turn, j, state: State, tiles: Tiles, ring: Ring, cfg: Config, SEED: gl.constexpr,
               MASK: gl.constexpr, NEXT: gl.constexpr):
    """Key tile j, fused policy: its policy while tile j-1's PV and row-sum GEMMs finish; then O += PV_{j-1}, P_j
    to shared memory, and one turn that issues S_{j+1} (when NEXT), PV_j and its row sum; wait for S_{j+1} only."""
    HALF: gl.constexpr = cfg.BM // 2
    s_layout: gl.constexpr = gl.NVMMADistributedLayout([3, 0], [gl.num_warps(), 1], [16, cfg.BN, 32])
    o_layout: gl.constexpr = state.acc.type.layout
    SUM_N: gl.constexpr = tiles.ones_smem.shape[0]
    sum_layout: gl.constexpr = gl.NVMMADistributedLayout([3, 0], [gl.num_warps(), 1], [16, SUM_N, 32])
    p_layout: gl.constexpr = gl.DotOperandLayout(0, o_layout, 4)
    k_scale_next, v_scale_next = tiles.next_scales(j, state.k_scale, state.v_scale, NEXT)
    p, e_p, alpha, m_i, c_i, _ = _policy(state.s, j, state.k_scale, state.m_i, state.c_i, tiles, p_layout, cfg, SEED,
                                         MASK)
    p_scale = _pow2(e_p)
    acc = state.acc
    l_i = state.l_i
    if not SEED:
        acc, l_i = _retire(state, ring, j - 1, cfg.GATE)
    tiles.p_smem.store(p)
    fence_async_shared()
    if NEXT:
        ring.wait_keys(j + 1)
    turn.take(j)
    s = state.s
    if NEXT:
        s_tok = _issue_scores(tiles.q_smem, ring, j + 1, s_layout, HALF, cfg.BN)
    pv = warpgroup_mma(tiles.p_smem, ring.values(j).permute((1, 0)), gl.zeros([HALF, cfg.D], gl.float32, o_layout),
                       use_acc=False, is_async=True)
    sums = warpgroup_mma(tiles.p_smem, tiles.ones_smem.permute((1, 0)),
                         gl.zeros([HALF, SUM_N], gl.float32, sum_layout), use_acc=False, is_async=True)
    if turn.WG == 0 or NEXT:  # the second warpgroup's last hand-over would have no taker
        turn.hand_over(j)
    if NEXT:
        s = warpgroup_mma_wait(num_outstanding=2, deps=(s_tok, ))
    return State(s, k_scale_next, v_scale_next, pv, sums, p_scale * state.v_scale, p_scale, alpha, acc, l_i, m_i, c_i)


@gluon.jit
def _own_sum(sums):
    """The all-ones MMA's [M, 8] output, each column a row sum of P -> [M, 4], every thread of a quad its own copy:
    no shuffle and no add, where summing one column over the quad took 5 instructions per row and tile."""
    return gl.max(gl.reshape(sums, [sums.shape[0], sums.shape[1] // 2, 2]), 2)


@gluon.jit
def _retire(state: State, ring: Ring, tile, RESCALE: gl.constexpr):
    """Wait for tile `tile`'s PV and row-sum GEMMs (fused policy), free its ring slot, fold them into O and l;
    returns (O, l), l per (row, thread of the quad) as `_own_sum` gives it."""
    pv, sums = warpgroup_mma_wait(num_outstanding=0, deps=(state.pv, state.sums))
    ring.release(tile)
    acc = _accumulate(state.acc, pv, state.o_scale, state.alpha_o, RESCALE)
    row_sum = _own_sum(sums)  # l is kept per (row, thread of the quad) too, in its layout
    rows_q: gl.constexpr = gl.SliceLayout(1, state.l_i.type.layout)
    alpha_o = gl.expand_dims(gl.convert_layout(state.alpha_o, rows_q, assert_trivial=True), 1)
    sum_scale = gl.expand_dims(gl.convert_layout(state.sum_scale, rows_q, assert_trivial=True), 1)
    l_i = state.l_i * alpha_o + row_sum * sum_scale
    return acc, l_i


@gluon.jit
def _math(turn: Turn, q_smem, p_smem, ring: Ring, ones_smem, q_scale_ptr, k_scale_ptr, v_scale_ptr, out_ptr, flags,
          qt, bh, S_Q, S_K, S_QPAD, N_KT, gate_p, stride_os, cfg: Config):
    """Math warpgroup `turn.WG`: query rows [WG * BM/2, (WG + 1) * BM/2) of the program's tile, every key tile;
    `out_ptr` points at the program's (batch, head), whose rows are `stride_os` elements apart."""
    HALF: gl.constexpr = cfg.BM // 2
    o_layout: gl.constexpr = gl.NVMMADistributedLayout([3, 0], [gl.num_warps(), 1], [16, cfg.D, 32])
    SUM_N: gl.constexpr = ones_smem.shape[0]
    sum_layout: gl.constexpr = gl.NVMMADistributedLayout([3, 0], [gl.num_warps(), 1], [16, SUM_N, 32])
    row_layout: gl.constexpr = gl.SliceLayout(1, o_layout)
    rows = qt * cfg.BM + turn.WG * HALF + gl.arange(0, HALF, row_layout)
    q_scale = gl.load(q_scale_ptr + bh * S_QPAD + rows)
    tiles = Tiles(q_smem, p_smem, ones_smem, q_scale, k_scale_ptr, v_scale_ptr, flags, S_K, gate_p)
    s_layout: gl.constexpr = gl.NVMMADistributedLayout([3, 0], [gl.num_warps(), 1], [16, cfg.BN, 32])
    if turn.WG == 1:
        turn.hand_over(qt)  # the first turn is warpgroup 0's
    ring.wait_keys(0)
    turn.take(qt)
    s_tok = _issue_scores(q_smem, ring, 0, s_layout, HALF, cfg.BN)
    turn.hand_over(qt)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok, ))
    k_scale = gl.load(k_scale_ptr)
    v_scale = gl.load(v_scale_ptr)
    acc = gl.zeros([HALF, cfg.D], gl.float32, o_layout)
    pv = gl.zeros([HALF, cfg.D], gl.float32, o_layout)
    sums = gl.zeros([HALF, SUM_N], gl.float32, sum_layout)
    o_scale = gl.zeros([HALF], gl.float32, row_layout)
    sum_scale = gl.zeros([HALF], gl.float32, row_layout)
    alpha_o = gl.full([HALF], 1.0, gl.float32, row_layout)
    if cfg.FUSED:  # l per (row, thread of the quad), as `_retire` keeps it
        l_i = gl.zeros_like(_own_sum(sums))
    else:
        l_i = gl.zeros([HALF], gl.float32, row_layout)
    m_i = gl.full([HALF], float("-inf"), gl.float32, row_layout)
    c_i = gl.zeros([HALF], gl.float32, row_layout)
    # tile 0's state: `state` itself cannot hold it, a GEMM in flight is not a tensor
    first = State(s, k_scale, v_scale, pv, sums, o_scale, sum_scale, alpha_o, acc, l_i, m_i, c_i)
    if N_KT == 1:
        state = _step(turn, 0, first, tiles, ring, cfg, True, True, False)
    else:
        state = _step(turn, 0, first, tiles, ring, cfg, True, False, True)
        for j in range(1, N_KT - 1):
            state = _step(turn, j, state, tiles, ring, cfg, False, False, True)
        state = _step(turn, N_KT - 1, state, tiles, ring, cfg, False, True, False)
    if cfg.FUSED:
        acc, l_i = _retire(state, ring, N_KT - 1, cfg.GATE)
        l_i = _rows_as(gl.max(l_i, 1), acc)  # the quad's four copies are equal
    else:
        acc = _accumulate(state.acc, state.pv, state.o_scale, state.alpha_o, True)
        l_i = state.l_i
    out = acc * gl.expand_dims(1.0 / l_i, 1)
    cols = gl.arange(0, cfg.D, gl.SliceLayout(0, o_layout))
    ptrs = out_ptr + gl.expand_dims(rows * stride_os, 1) + gl.expand_dims(cols, 0)
    gl.store(ptrs, out.to(out_ptr.dtype.element_ty), mask=gl.expand_dims(rows < S_Q, 1))


@gluon.jit
def attention_kernel(desc_q, desc_k, desc_v, q_scale_ptr, k_scale_ptr, v_scale_ptr, out_ptr, flag_ptr,
                     S_Q, S_K, S_QPAD, S_KPAD, N_ST, N_KT, gate_p, HEADS, stride_ob, stride_oh, stride_os,
                     D: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr, STAT_M: gl.constexpr,
                     D_BIAS: gl.constexpr, FUSED: gl.constexpr, GATE: gl.constexpr, P_EMAX: gl.constexpr,
                     P_SHIFT: gl.constexpr, P_CLAMP: gl.constexpr, P_BLOCKS: gl.constexpr, STAGES: gl.constexpr,
                     SKELETON: gl.constexpr = False):
    """One program = one query tile of BM = 128 rows of one (batch, head): two math warpgroups (this
    partition and a worker) and a TMA warpgroup. desc_q's block is BM/2 rows. The output is written through its
    strides (batch, head, row), so a BSHD output needs no copy."""
    cfg = Config(BM, BN, D, STAGES, D_BIAS, FUSED, GATE, P_EMAX, P_SHIFT, P_CLAMP, P_BLOCKS, SKELETON)
    HALF: gl.constexpr = BM // 2
    qt, bh = gl.program_id(0), gl.program_id(1)
    kv_row, v_row = bh * S_KPAD, bh * D
    k_scale_ptr += bh * N_KT
    v_scale_ptr += bh * N_KT
    out_ptr += (bh // HEADS) * stride_ob + (bh % HEADS) * stride_oh
    flags = flag_ptr + (bh * N_ST + qt * BM // STAT_M) * N_KT

    q_smem = gl.allocate_shared_memory(gl.float8e4nv, [2, HALF, D], desc_q.layout)
    ring = Ring(gl.allocate_shared_memory(gl.float8e4nv, [STAGES, BN, D], desc_k.layout),
                gl.allocate_shared_memory(gl.float8e4nv, [STAGES, D, BN], desc_v.layout),
                gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout()),
                gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout()), STAGES)
    # each math warpgroup's P, the A operand of its PV and row-sum GEMMs
    p_smem = gl.allocate_shared_memory(gl.float8e4nv, [2, HALF, BN],
                                       gl.NVMMASharedLayout.get_default_for([HALF, BN], gl.float8e4nv))
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(ring.ready.index(i), count=1)
        mbarrier.init(ring.empty.index(i), count=2)
    ones_layout: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [gl.num_warps(), 1], [1, 0])
    # row-sum MMA columns: 8, wgmma's narrowest N, halves its tensor work (results/log/)
    SUM_N: gl.constexpr = 8
    # the row-sum MMA's B, all ones (E4M3 bit pattern 0x38 = 1.0): every column of its output is the row sum, so
    # each thread reads the sum from its own registers (`_own_sum`)
    ones = gl.full([SUM_N, BN], 0x38, gl.int8, ones_layout).to(gl.float8e4nv, bitcast=True)
    ones_smem = gl.allocate_shared_memory(gl.float8e4nv, [SUM_N, BN],
                                          gl.NVMMASharedLayout.get_default_for([SUM_N, BN], gl.float8e4nv), ones)
    fence_async_shared()
    mbarrier.expect(q_bar, 2 * desc_q.block_type.nbytes)
    for i in gl.static_range(2):
        tma.async_copy_global_to_shared(desc_q, [bh * S_QPAD + qt * BM + i * HALF, 0], q_bar, q_smem.index(i))
    mbarrier.wait(q_bar, 0)
    mbarrier.invalidate(q_bar)
    gl.warp_specialize(
        [(_math, (Turn(0), q_smem.index(0), p_smem.index(0), ring, ones_smem, q_scale_ptr, k_scale_ptr, v_scale_ptr,
                  out_ptr, flags, qt, bh, S_Q, S_K, S_QPAD, N_KT, gate_p, stride_os, cfg)),
         (_math, (Turn(1), q_smem.index(1), p_smem.index(1), ring, ones_smem, q_scale_ptr, k_scale_ptr, v_scale_ptr,
                  out_ptr, flags, qt, bh, S_Q, S_K, S_QPAD, N_KT, gate_p, stride_os, cfg)),
         (_producer, (desc_k, desc_v, ring, kv_row, v_row, N_KT, BN))],
        [4, 4], [MATH_REGS, PRODUCER_REGS])
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ring.ready.index(i))
        mbarrier.invalidate(ring.empty.index(i))
