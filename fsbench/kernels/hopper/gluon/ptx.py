"""The Gluon kernel's inline PTX and bit-level helpers: each is a packed or predicated instruction sequence that Gluon's
own lowering does not produce (or splits into more instructions), written once here."""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl


@gluon.jit
def pow2(e, LOW: gl.constexpr = True, HIGH: gl.constexpr = True):
    """2^e for integer tensors from the exponent bits (exact); e < -126 gives 0. LOW and HIGH clamp e to -127 and
    127: a caller whose e is known to be within a bound drops its clamp (one instruction per value)."""
    if LOW:
        e = gl.maximum(e, -127)
    if HIGH:
        e = gl.minimum(e, 127)
    return ((e + 127) << 23).to(gl.float32, bitcast=True)


@gluon.jit
def fma_sat(x, y, z):
    """fma(x, y, z) clamped to [0, 1] by the FFMA itself (.sat; -inf and NaN give 0)."""
    return gl.inline_asm_elementwise("fma.rn.sat.f32 $0, $1, $2, $3;", "=f,f,f,f", [x, y, z],
                                     dtype=gl.float32, is_pure=True, pack=1)


@gluon.jit
def to_e4m3(x):
    """float32 -> E4M3 (round to nearest even, saturating), four values per 32-bit register: two packed
    converts and one move, where the compiler's own lowering splits each pair into bytes and rebuilds it."""
    return gl.inline_asm_elementwise(
        "{ .reg .b16 lo, hi; cvt.rn.satfinite.e4m3x2.f32 lo, $2, $1; cvt.rn.satfinite.e4m3x2.f32 hi, $4, $3; "
        "mov.b32 $0, {lo, hi}; }", "=r,r,r,r,r", [x], dtype=gl.float8e4nv, is_pure=True, pack=4)


# P's E4M3 from the Stage-A results t of one thread's 64 scores (`softmax.fused_policy_grid`, mxfp8): t = 1 - pattern
# 2^-24 in [0.5, 1], so bits(t) = ONE_BITS - pattern, and -bits(t) 2^16 is the BF16 P of that pattern in a float32's
# high half (ONE_BITS 2^16 vanishes mod 2^32). One IMAD per score, bits(t) (-2^16) + k16 with k16 = -(off 2^16),
# moves each pattern to P's scale (off = 128 e, e = e_p + delta) and makes it a float; the e4m3x2 converts pack the
# pairs. That holds where the moved pattern stays a normal BF16. Two rarer cases each take a warp vote and a uniform
# branch the other warps skip. Where off > 0 (a tile some 8 doublings above the frozen reference, or any tile that
# rolled back) the patterns below off would wrap: the warp first floors every pattern at its row's off (bits(t) at
# most `floor_or_factor` = ONE_BITS - off, a no-op in rows with off <= 0), so P is 0 there, as in E4M3 any P below
# 2^-126 is. Where e <= -117 (a tile so far below its reference that its BF16 subnormals and zeros would reach E4M3;
# such a tile never rolled back) P is redone in float arithmetic, the BF16 of the pattern (the IMAD's result less
# k16) times 2^-e: in those rows `floor_or_factor` holds the bits of 2^-e instead, at least FAR_FACTOR_BITS (above
# every floor, so the floor leaves them alone), which also selects them. `slow` (bit 0: off > 0, bit 1: e <= -117)
# is the same in all of a thread's elements (its rows' flags or-ed), so element 0 stands for the thread. The float
# route ends in its own copy of the converts: after a join ptxas no longer merges a register's two halves in the
# converts and adds a PRMT per register.
NARROW_N = 64  # the scores of a thread
FAR_BELOW = -117  # P's shift e at and below which BF16 subnormals and zeros reach E4M3
FAR_FACTOR_BITS = (127 - FAR_BELOW) << 23  # the bits of 2^117
NARROW_PACK: gl.constexpr = gl.constexpr(NARROW_N)
_T, _K, _F, _SLOW = (NARROW_N // 4 + i * NARROW_N for i in range(4))
_CONVERTS = " ".join(f"cvt.rn.satfinite.e4m3x2.f32 lo, x{4 * i + 1}, x{4 * i}; "
                     f"cvt.rn.satfinite.e4m3x2.f32 hi, x{4 * i + 3}, x{4 * i + 2}; mov.b32 ${i}, {{lo, hi}};"
                     for i in range(NARROW_N // 4))
NARROW_ASM: gl.constexpr = gl.constexpr(
    "{ .reg .pred p, q; .reg .b32 x<64>, y, w; .reg .b16 lo, hi; "
    + f"and.b32 w, ${_SLOW}, 1; setp.ne.s32 p, w, 0; vote.sync.any.pred p, p, -1; "
    + f"and.b32 w, ${_SLOW}, 2; setp.ne.s32 q, w, 0; vote.sync.any.pred q, q, -1; "
    + " ".join(f"mov.b32 x{i}, ${_T + i};" for i in range(NARROW_N))
    + " @!p bra.uni NOFLOOR; "
    + " ".join(f"min.s32 x{i}, x{i}, ${_F + i};" for i in range(NARROW_N))
    + " NOFLOOR: "
    + " ".join(f"mad.lo.s32 x{i}, x{i}, -65536, ${_K + i};" for i in range(NARROW_N))
    + " @!q bra.uni NOFAR; "
    + " ".join(f"sub.s32 y, x{i}, ${_K + i}; mul.f32 y, y, ${_F + i}; "
               f"setp.ge.s32 p, ${_F + i}, {FAR_FACTOR_BITS}; selp.b32 x{i}, y, x{i}, p;" for i in range(NARROW_N))
    + " " + _CONVERTS + " bra.uni DONE; NOFAR: " + _CONVERTS + " DONE: }")
NARROW_CONSTRAINTS: gl.constexpr = gl.constexpr(",".join(["=r"] * (NARROW_N // 4) + ["r"] * (4 * NARROW_N)))


@gluon.jit
def narrow_patterns(t_bits, k16, floor_or_factor, slow):
    """P in E4M3 from the Stage-A results' bits, each moved to P's scale by its row's k16 (see NARROW_ASM)."""
    return gl.inline_asm_elementwise(NARROW_ASM, NARROW_CONSTRAINTS, [t_bits, k16, floor_or_factor, slow],
                                     dtype=gl.float8e4nv, is_pure=True, pack=NARROW_PACK)


@gluon.jit
def rescale_blocks(p8, factor):
    """E4M3 P in its block's units -> P * factor (a power of two) in E4M3, four values per register: two packed
    converts to f16x2, a packed multiply each, two packed converts back (the bytes also skip the PRMT
    regrouping of Gluon's lowering). Exact where the product is an E4M3 value: the prepass docstring says when."""
    return gl.inline_asm_elementwise(
        "{ .reg .b16 lo, hi; .reg .b32 a, b; mov.b32 {lo, hi}, $1; "
        "cvt.rn.f16x2.e4m3x2 a, lo; cvt.rn.f16x2.e4m3x2 b, hi; mul.rn.f16x2 a, a, $2; mul.rn.f16x2 b, b, $3; "
        "cvt.rn.satfinite.e4m3x2.f16x2 lo, a; cvt.rn.satfinite.e4m3x2.f16x2 hi, b; mov.b32 $0, {lo, hi}; }",
        "=r,r,r,r", [p8, factor], dtype=gl.float8e4nv, is_pure=True, pack=4)


@gluon.jit
def mark(ptr, need):
    """Store 1 at the scalar `ptr` where `need` holds in any of a thread's two rows: one predicated st.global per
    thread, its value the rows' own flag (no constant to materialise). The two rows of a thread belong to the same
    statistics tile, so one store stands for both."""
    addr = ptr.to(gl.int64, bitcast=True) + gl.zeros_like(need.to(gl.int64))
    gl.inline_asm_elementwise("{ .reg .pred p; .reg .b32 v; or.b32 v, $2, $3; setp.ne.s32 p, v, 0; "
                              "@p st.global.b8 [$4], v; mov.b32 $0, 0; mov.b32 $1, 0; }",
                              "=r,=r,r,r,l,l", [need.to(gl.int32), addr], dtype=gl.int32, is_pure=False, pack=2)


# acc *= alpha for the 64 accumulator values a thread holds (tied in place), skipped by a uniform branch when no
# row of the warp has alpha != 1 (elements 0 and 2 carry the thread's two rows)
RESCALE_N = 64
RESCALE_ASM: gl.constexpr = gl.constexpr(
    "{ .reg .pred p, q; setp.ne.f32 p, $128, 0f3F800000; setp.ne.f32 q, $130, 0f3F800000; or.pred p, p, q; "
    "vote.sync.any.pred p, p, -1; @!p bra.uni SKIP; "
    + " ".join(f"mul.f32 ${i}, ${i}, ${2 * RESCALE_N + i};" for i in range(RESCALE_N)) + " SKIP: }")
RESCALE_CONSTRAINTS: gl.constexpr = gl.constexpr(
    ",".join(["=f"] * RESCALE_N + [str(i) for i in range(RESCALE_N)] + ["f"] * RESCALE_N))


@gluon.jit
def rescale_rows(acc, alpha):
    """acc * alpha, skipped (one vote and a uniform branch) in every warp whose rows all have alpha = 1: a
    rollback is rare, and 64 predicated-off multiplies would still take their issue slots."""
    return gl.inline_asm_elementwise(RESCALE_ASM, RESCALE_CONSTRAINTS, [acc, alpha], dtype=gl.float32,
                                     is_pure=True, pack=64)


@gluon.jit
def named_barrier(asm: gl.constexpr, anchor):
    """One named-barrier instruction, issued once per thread (`anchor` is any scalar: inline asm needs an operand)."""
    gl.inline_asm_elementwise(asm, "=r,r", [anchor], dtype=gl.int32, is_pure=False, pack=1)
