"""What a math warpgroup carries, as Gluon aggregates: `Config` (the compile-time switches and the layouts they give),
`Program` (the program's pointers and sizes), `Tiles` (what every key tile reads besides the ring) and `State`
(what one key tile hands the next). (No `from __future__ import annotations`: an aggregate checks each field
against its annotation.)"""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.language.core import (
    _aggregate as aggregate,  # Triton 3.6 has no public name for it
    base_value,
)


@aggregate
class Config:
    """The kernel's compile-time switches (the launcher's constexprs): tile sizes, ring depth, Stage-A offset, softmax
    policy, gate, P's format and the skeleton; and the register layouts they give a math warpgroup of NUM_WARPS
    warps, worked out once: scores (s), O and PV (o), P as the PV GEMM's register operand (p), the row-sum MMA's
    output (sums) and one value per row of O (rows)."""

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
    HALF: gl.constexpr
    SUM_N: gl.constexpr
    s_layout: gl.constexpr
    o_layout: gl.constexpr
    p_layout: gl.constexpr
    sum_layout: gl.constexpr
    rows: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, BM, BN, D, STAGES, D_BIAS, FUSED, GATE, P_EMAX, P_SHIFT, P_CLAMP, P_BLOCKS, SKELETON,
                 NUM_WARPS):
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
        self.HALF = gl.constexpr(BM // 2)  # query rows of one math warpgroup
        # row-sum MMA columns: 8, wgmma's narrowest N, halves its tensor work (results/log/)
        self.SUM_N = gl.constexpr(8)
        o_layout = gl.NVMMADistributedLayout([3, 0], [NUM_WARPS, 1], [16, D, 32])
        self.s_layout = gl.constexpr(gl.NVMMADistributedLayout([3, 0], [NUM_WARPS, 1], [16, BN, 32]))
        self.o_layout = gl.constexpr(o_layout)
        self.p_layout = gl.constexpr(gl.DotOperandLayout(0, o_layout, 4))
        self.sum_layout = gl.constexpr(gl.NVMMADistributedLayout([3, 0], [NUM_WARPS, 1], [16, 8, 32]))
        self.rows = gl.constexpr(gl.SliceLayout(1, o_layout))


@aggregate
class Program:
    """One program's (batch, head, query tile): its scale pointers (K's and V's already at the (batch, head)), the
    output at the (batch, head) with rows `stride_os` elements apart, the gate flags, and the sizes."""

    q_scale_ptr: gl.tensor
    k_scale_ptr: gl.tensor
    v_scale_ptr: gl.tensor
    out_ptr: gl.tensor
    flags: gl.tensor
    qt: gl.tensor
    bh: gl.tensor
    S_Q: gl.tensor
    S_K: gl.tensor
    S_QPAD: gl.tensor
    N_KT: gl.tensor
    gate_p: gl.tensor
    stride_os: gl.tensor

    @gluon.constexpr_function
    def __init__(self, q_scale_ptr, k_scale_ptr, v_scale_ptr, out_ptr, flags, qt, bh, S_Q, S_K, S_QPAD, N_KT, gate_p,
                 stride_os):
        self.q_scale_ptr = q_scale_ptr
        self.k_scale_ptr = k_scale_ptr
        self.v_scale_ptr = v_scale_ptr
        self.out_ptr = out_ptr
        self.flags = flags
        self.qt = qt
        self.bh = bh
        self.S_Q = S_Q
        self.S_K = S_K
        self.S_QPAD = S_QPAD
        self.N_KT = N_KT
        self.gate_p = gate_p
        self.stride_os = stride_os


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
