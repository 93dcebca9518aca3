"""The Gluon kernel's key-tile steps, its math warpgroups and the kernel (see the package docstring for the
schedule)."""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from fsbench.kernels.hopper.gluon.pipeline import MATH_REGS, PRODUCER_REGS, Ring, Turn, issue_scores, producer
from fsbench.kernels.hopper.gluon.ptx import pow2, rescale_rows
from fsbench.kernels.hopper.gluon.softmax import policy
from fsbench.kernels.hopper.gluon.state import Config, Program, State, Tiles
from fsbench.kernels.hopper.gluon.views import broadcast_to, own_sum, rows_as


@gluon.jit
def accumulate(acc, pv, pv_scale, alpha, RESCALE: gl.constexpr):
    """O = O alpha + PV pv_scale in float32. RESCALE is off only where alpha is always 1 (fused, no gate); with
    the gate, alpha is 1 in every row that did not roll back, and a warp skips the multiplies when all its
    rows are such (`ptx.rescale_rows`; a block-wide "any row rolled back?" branch had measured slower than the
    64 FMUL, results/log/)."""
    if RESCALE:
        acc = rescale_rows(acc, broadcast_to(gl.expand_dims(alpha, 1), acc.shape))
    return gl.fma(pv, gl.expand_dims(pv_scale, 1), acc)


@gluon.jit
def step(turn: Turn, j, state: State, tiles: Tiles, ring: Ring, cfg: Config, SEED: gl.constexpr, MASK: gl.constexpr,
         NEXT: gl.constexpr):
    """Key tile j: its K and V scales a tile ahead and its softmax policy, then the fused policy's schedule with P
    through shared memory (`finish_smem`) or the conventional one's with P in registers (`finish_registers`), each
    policy's faster schedule. SEED: the first tile, MASK: the last (keys past the sequence masked), NEXT: a tile
    follows."""
    k_scale_next, v_scale_next = tiles.next_scales(j, state.k_scale, state.v_scale, NEXT)
    p, e_p, alpha, m_i, c_i, row_sum = policy(state.s, j, state.k_scale, state.m_i, state.c_i, tiles, cfg, SEED,
                                              MASK)
    nxt = State(state.s, k_scale_next, v_scale_next, state.pv, state.sums, state.o_scale, state.sum_scale, alpha,
                state.acc, state.l_i, m_i, c_i)
    if cfg.FUSED:
        out = finish_smem(turn, j, p, e_p, state, nxt, tiles, ring, cfg, SEED, NEXT)
    else:
        out = finish_registers(turn, j, p, e_p, row_sum, state, nxt, tiles, ring, cfg, NEXT)
    return out


@gluon.jit
def finish_registers(turn: Turn, j, p, e_p, row_sum, state: State, nxt: State, tiles: Tiles, ring: Ring, cfg: Config,
                     NEXT: gl.constexpr):
    """Key tile j with P in registers, after its policy: tile j-1's O update, then one turn that issues PV_j and
    (when NEXT) tile j+1's scores, then waits for both. `nxt` holds tile j's policy outputs and the next scales;
    returns the same state as `finish_smem`, with PV_{j-1} done."""
    acc = accumulate(state.acc, state.pv, state.o_scale, state.alpha_o, True)
    turn.take(j)
    pv_tok = warpgroup_mma(p, ring.values(j).permute((1, 0)), gl.zeros([cfg.HALF, cfg.D], gl.float32, cfg.o_layout),
                           use_acc=False, is_async=True)
    s = state.s
    if NEXT:
        ring.wait_keys(j + 1)
        s_tok = issue_scores(tiles.q_smem, ring, j + 1, cfg.s_layout, cfg.HALF, cfg.BN)
    if turn.WG == 0 or NEXT:
        turn.hand_over(j)
    if NEXT:
        pv, s = warpgroup_mma_wait(num_outstanding=0, deps=(pv_tok, s_tok))
    else:
        pv = warpgroup_mma_wait(num_outstanding=0, deps=(pv_tok, ))
    ring.release(j)
    p_scale = pow2(e_p, cfg.P_SHIFT < 0, not cfg.GATE)  # e_p >= -127 + P_SHIFT; below the gate, e_p <= 24
    l_i = state.l_i * nxt.alpha_o + row_sum * p_scale
    return State(s, nxt.k_scale, nxt.v_scale, pv, state.sums, p_scale * state.v_scale, state.sum_scale, nxt.alpha_o,
                 acc, l_i, nxt.m_i, nxt.c_i)


@gluon.jit
def finish_smem(turn: Turn, j, p, e_p, state: State, nxt: State, tiles: Tiles, ring: Ring, cfg: Config,
                SEED: gl.constexpr, NEXT: gl.constexpr):
    """Key tile j, fused policy, after its policy (which ran while tile j-1's PV and row-sum GEMMs finished): O +=
    PV_{j-1}, P_j to shared memory, and one turn that issues S_{j+1} (when NEXT), PV_j and its row sum; wait for
    S_{j+1} only."""
    p_scale = pow2(e_p, cfg.P_SHIFT < 0, not cfg.GATE)  # e_p >= -127 + P_SHIFT; below the gate, e_p <= 24
    acc = state.acc
    l_i = state.l_i
    if not SEED:
        acc, l_i = retire(state, ring, j - 1, cfg.GATE)
    tiles.p_smem.store(p)
    fence_async_shared()
    if NEXT:
        ring.wait_keys(j + 1)
    turn.take(j)
    s = state.s
    if NEXT:
        s_tok = issue_scores(tiles.q_smem, ring, j + 1, cfg.s_layout, cfg.HALF, cfg.BN)
    pv = warpgroup_mma(tiles.p_smem, ring.values(j).permute((1, 0)),
                       gl.zeros([cfg.HALF, cfg.D], gl.float32, cfg.o_layout), use_acc=False, is_async=True)
    sums = warpgroup_mma(tiles.p_smem, tiles.ones_smem.permute((1, 0)),
                         gl.zeros([cfg.HALF, cfg.SUM_N], gl.float32, cfg.sum_layout), use_acc=False, is_async=True)
    if turn.WG == 0 or NEXT:  # the second warpgroup's last hand-over would have no taker
        turn.hand_over(j)
    if NEXT:
        s = warpgroup_mma_wait(num_outstanding=2, deps=(s_tok, ))
    return State(s, nxt.k_scale, nxt.v_scale, pv, sums, p_scale * state.v_scale, p_scale, nxt.alpha_o, acc, l_i,
                 nxt.m_i, nxt.c_i)


@gluon.jit
def retire(state: State, ring: Ring, tile, RESCALE: gl.constexpr):
    """Wait for tile `tile`'s PV and row-sum GEMMs (fused policy), free its ring slot, fold them into O and l;
    returns (O, l), l per (row, thread of the quad) as `views.own_sum` gives it."""
    pv, sums = warpgroup_mma_wait(num_outstanding=0, deps=(state.pv, state.sums))
    ring.release(tile)
    acc = accumulate(state.acc, pv, state.o_scale, state.alpha_o, RESCALE)
    row_sum = own_sum(sums)  # l is kept per (row, thread of the quad) too, in its layout
    rows_q: gl.constexpr = gl.SliceLayout(1, state.l_i.type.layout)
    alpha_o = gl.expand_dims(gl.convert_layout(state.alpha_o, rows_q, assert_trivial=True), 1)
    sum_scale = gl.expand_dims(gl.convert_layout(state.sum_scale, rows_q, assert_trivial=True), 1)
    l_i = state.l_i * alpha_o + row_sum * sum_scale
    return acc, l_i


@gluon.jit
def math_warpgroup(turn: Turn, q_smem, p_smem, ones_smem, ring: Ring, prog: Program, cfg: Config):
    """Math warpgroup `turn.WG`: query rows [WG * BM/2, (WG + 1) * BM/2) of the program's tile, every key tile."""
    HALF: gl.constexpr = cfg.HALF
    rows = prog.qt * cfg.BM + turn.WG * HALF + gl.arange(0, HALF, cfg.rows)
    q_scale = gl.load(prog.q_scale_ptr + prog.bh * prog.S_QPAD + rows)
    tiles = Tiles(q_smem, p_smem, ones_smem, q_scale, prog.k_scale_ptr, prog.v_scale_ptr, prog.flags, prog.S_K,
                  prog.gate_p)
    if turn.WG == 1:
        turn.hand_over(prog.qt)  # the first turn is warpgroup 0's
    ring.wait_keys(0)
    turn.take(prog.qt)
    s_tok = issue_scores(q_smem, ring, 0, cfg.s_layout, HALF, cfg.BN)
    turn.hand_over(prog.qt)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok, ))
    k_scale = gl.load(prog.k_scale_ptr)
    v_scale = gl.load(prog.v_scale_ptr)
    acc = gl.zeros([HALF, cfg.D], gl.float32, cfg.o_layout)
    pv = gl.zeros([HALF, cfg.D], gl.float32, cfg.o_layout)
    sums = gl.zeros([HALF, cfg.SUM_N], gl.float32, cfg.sum_layout)
    o_scale = gl.zeros([HALF], gl.float32, cfg.rows)
    sum_scale = gl.zeros([HALF], gl.float32, cfg.rows)
    alpha_o = gl.full([HALF], 1.0, gl.float32, cfg.rows)
    if cfg.FUSED:  # l per (row, thread of the quad), as `retire` keeps it
        l_i = gl.zeros_like(own_sum(sums))
    else:
        l_i = gl.zeros([HALF], gl.float32, cfg.rows)
    m_i = gl.full([HALF], float("-inf"), gl.float32, cfg.rows)
    c_i = gl.zeros([HALF], gl.float32, cfg.rows)
    # tile 0's state: `state` itself cannot hold it, a GEMM in flight is not a tensor
    first = State(s, k_scale, v_scale, pv, sums, o_scale, sum_scale, alpha_o, acc, l_i, m_i, c_i)
    N_KT = prog.N_KT
    if N_KT == 1:
        state = step(turn, 0, first, tiles, ring, cfg, True, True, False)
    else:
        state = step(turn, 0, first, tiles, ring, cfg, True, False, True)
        for j in range(1, N_KT - 1):
            state = step(turn, j, state, tiles, ring, cfg, False, False, True)
        state = step(turn, N_KT - 1, state, tiles, ring, cfg, False, True, False)
    if cfg.FUSED:
        acc, l_i = retire(state, ring, N_KT - 1, cfg.GATE)
        l_i = rows_as(gl.max(l_i, 1), acc)  # the quad's four copies are equal
    else:
        acc = accumulate(state.acc, state.pv, state.o_scale, state.alpha_o, True)
        l_i = state.l_i
    out = acc * gl.expand_dims(1.0 / l_i, 1)
    cols = gl.arange(0, cfg.D, gl.SliceLayout(0, cfg.o_layout))
    ptrs = prog.out_ptr + gl.expand_dims(rows * prog.stride_os, 1) + gl.expand_dims(cols, 0)
    gl.store(ptrs, out.to(prog.out_ptr.dtype.element_ty), mask=gl.expand_dims(rows < prog.S_Q, 1))


@gluon.jit
def attention_kernel(desc_q, desc_k, desc_v, q_scale_ptr, k_scale_ptr, v_scale_ptr, out_ptr, flag_ptr,
                     S_Q, S_K, S_QPAD, S_KPAD, N_ST, N_KT, gate_p, HEADS, stride_ob, stride_oh, stride_os,
                     D: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr, STAT_M: gl.constexpr,
                     D_BIAS: gl.constexpr, FUSED: gl.constexpr, GATE: gl.constexpr, P_EMAX: gl.constexpr,
                     P_SHIFT: gl.constexpr, P_CLAMP: gl.constexpr, P_BLOCKS: gl.constexpr, STAGES: gl.constexpr,
                     SKELETON: gl.constexpr = False):
    """One program = one query tile of BM = 128 rows of one (batch, head): two math warpgroups (this partition and a
    worker) and a TMA warpgroup. desc_q's block is BM/2 rows. The output is written through its strides (batch,
    head, row), so a BSHD output needs no copy. The parameters are the launch's (`launch.Launch`, shared with the
    Triton kernel); everything past them travels as `Config` and `Program`."""
    cfg = Config(BM, BN, D, STAGES, D_BIAS, FUSED, GATE, P_EMAX, P_SHIFT, P_CLAMP, P_BLOCKS, SKELETON, gl.num_warps())
    HALF: gl.constexpr = cfg.HALF
    qt, bh = gl.program_id(0), gl.program_id(1)
    kv_row, v_row = bh * S_KPAD, bh * D
    k_scale_ptr += bh * N_KT
    v_scale_ptr += bh * N_KT
    out_ptr += (bh // HEADS) * stride_ob + (bh % HEADS) * stride_oh
    flags = flag_ptr + (bh * N_ST + qt * BM // STAT_M) * N_KT
    # the launcher specialises an integer argument equal to 1 (one key tile, one query row) to a constant; the
    # Program aggregate holds tensors
    S_Q, S_K, S_QPAD = gl.to_tensor(S_Q), gl.to_tensor(S_K), gl.to_tensor(S_QPAD)
    N_KT, gate_p, stride_os = gl.to_tensor(N_KT), gl.to_tensor(gate_p), gl.to_tensor(stride_os)
    prog = Program(q_scale_ptr, k_scale_ptr, v_scale_ptr, out_ptr, flags, qt, bh, S_Q, S_K, S_QPAD, N_KT, gate_p,
                   stride_os)

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
    # the row-sum MMA's B, all ones (E4M3 bit pattern 0x38 = 1.0): every column of its output is the row sum, so
    # each thread reads the sum from its own registers (`views.own_sum`)
    ones = gl.full([cfg.SUM_N, BN], 0x38, gl.int8, ones_layout).to(gl.float8e4nv, bitcast=True)
    ones_smem = gl.allocate_shared_memory(gl.float8e4nv, [cfg.SUM_N, BN],
                                          gl.NVMMASharedLayout.get_default_for([cfg.SUM_N, BN], gl.float8e4nv), ones)
    fence_async_shared()
    mbarrier.expect(q_bar, 2 * desc_q.block_type.nbytes)
    for i in gl.static_range(2):
        tma.async_copy_global_to_shared(desc_q, [bh * S_QPAD + qt * BM + i * HALF, 0], q_bar, q_smem.index(i))
    mbarrier.wait(q_bar, 0)
    mbarrier.invalidate(q_bar)
    gl.warp_specialize(
        [(math_warpgroup, (Turn(0), q_smem.index(0), p_smem.index(0), ones_smem, ring, prog, cfg)),
         (math_warpgroup, (Turn(1), q_smem.index(1), p_smem.index(1), ones_smem, ring, prog, cfg)),
         (producer, (desc_k, desc_v, ring, kv_row, v_row, N_KT, BN))],
        [4, 4], [MATH_REGS, PRODUCER_REGS])
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ring.ready.index(i))
        mbarrier.invalidate(ring.empty.index(i))
