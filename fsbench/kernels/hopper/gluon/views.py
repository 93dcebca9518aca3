"""Register-level views of a math warpgroup's tiles: reshapes, broadcasts and per-thread reductions that move no
data between threads (each checked trivial by `assert_trivial` where a layout changes)."""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl


@gluon.jit
def broadcast_to(x, shape: gl.constexpr):
    """x broadcast to `shape` in its own layout (Gluon has no broadcast_to; the int8 partner is dead code)."""
    return gl.broadcast(x, gl.full(shape, 0, gl.int8, x.type.layout))[0]


@gluon.jit
def key_axes(s):
    """The (key-permuted, see `pv_order`) scores [M, 128] as [M, s, h, t, e, j]: k = 32s + 16h + 4t + 2e + j, t
    the thread of the quad that holds the score."""
    return gl.reshape(s, [s.shape[0], s.shape[1] // 32, 2, 4, 2, 2])


@gluon.jit
def thread_max(s):
    """Per row, the maximum of the 32 scores each thread of a quad holds: [M, 4], no shuffle, as a tree of
    independent FMNMX (not one serial chain). With the prepass's "thread" key order, thread t's keys
    are the tile's MX block t."""
    return gl.max(gl.max(gl.max(gl.max(key_axes(s), 5), 4), 2), 1)


@gluon.jit
def per_thread(x, like):
    """Per-(row, thread of the quad) values [M, 4] (in `thread_max`'s layout) spread over the keys of `like`
    [M, 128]: the expansions undo `thread_max`'s reductions, so each thread reads only its own registers."""
    x = broadcast_to(gl.expand_dims(x, 1), [x.shape[0], like.shape[1] // 32, 4])
    x = broadcast_to(gl.expand_dims(x, 2), [x.shape[0], like.shape[1] // 32, 2, 4])
    x = broadcast_to(gl.expand_dims(x, 4), [x.shape[0], like.shape[1] // 32, 2, 4, 2])
    x = broadcast_to(gl.expand_dims(x, 5), [x.shape[0], like.shape[1] // 32, 2, 4, 2, 2])
    return gl.convert_layout(gl.reshape(x, like.shape), like.type.layout, assert_trivial=True)


@gluon.jit
def rows_as(x, like):
    """A per-row vector in the row layout of the 2-D tensor `like` (a register no-op for our layouts)."""
    return gl.convert_layout(x, gl.SliceLayout(1, like.type.layout))


@gluon.jit
def pv_order(s):
    """Keys reordered within each 32-key block, 16h + 8e + 2t + j -> 16h + 4t + 2e + j (V's keys are stored in
    the same order): thread t of a quad then holds the scores of the keys it feeds to the PV GEMM as the
    register A operand. The permutation moves no data; done on the float32 scores, before any per-element
    work, so that the e4m3x2 converts pack P straight into the operand's registers."""
    x = gl.reshape(s, [s.shape[0], s.shape[1] // 32, 2, 2, 4, 2])
    return gl.reshape(gl.permute(x, [0, 1, 2, 4, 3, 5]), s.shape)


@gluon.jit
def own_sum(sums):
    """The all-ones MMA's [M, 8] output, each column a row sum of P -> [M, 4], every thread of a quad its own copy:
    no shuffle and no add, where summing one column over the quad took 5 instructions per row and tile."""
    return gl.max(gl.reshape(sums, [sums.shape[0], sums.shape[1] // 2, 2]), 2)


@gluon.jit
def thread_any(flag):
    """Per-row int flags [M] (wgmma rows: a thread holds rows r and r + 8 of its warp's 16) -> the or of a thread's
    two rows, in each of them: no shuffle (the reshape's axis 1 is the row's bit 3, within the thread)."""
    x = gl.reshape(flag, [flag.shape[0] // 16, 2, 8])
    x = broadcast_to(gl.expand_dims(gl.max(x, 1), 1), [flag.shape[0] // 16, 2, 8])
    return gl.convert_layout(gl.reshape(x, flag.shape), flag.type.layout, assert_trivial=True)



@gluon.jit
def _min3(a, b, c):
    """min(a, b, c) of int32 tensors: two chained min.s32, which ptxas fuses into one VIMNMX3."""
    return gl.inline_asm_elementwise("{ .reg .s32 t; min.s32 t, $1, $2; min.s32 $0, t, $3; }", "=r,r,r,r",
                                     [a, b, c], dtype=gl.int32, is_pure=True, pack=1)


@gluon.jit
def thread_min3(x):
    """The minimum of the 32 int32 values each thread of a quad holds per row [M, 4], by three-input minima: 32 -> 8
    -> 4 -> 2 -> 1 in 16 instructions (8 + 4 + 2 + 1 VIMNMX3 and one VIMNMX), where pairs take 31. The axes split
    are the thread's own (key bits j, e, h and the two of s), so no value leaves its thread."""
    y = gl.reshape(key_axes(x), [x.shape[0], 2, 2, 2, 4, 2, 2])  # [M, s1, s0, h, t, e, j], s = 2 s1 + s0
    y = gl.permute(y, [0, 4, 1, 2, 3, 5, 6])  # [M, t, s1, s0, h, e, j]
    a, b = gl.split(y)
    a0, a1 = gl.split(a)
    b0, b1 = gl.split(b)
    d0, d1 = gl.split(_min3(a0, a1, b0))
    e0, e1 = gl.split(b1)
    f0, f1 = gl.split(_min3(d0, d1, e0))
    g0, g1 = gl.split(e1)
    h0, h1 = gl.split(_min3(f0, f1, g0))
    i0, i1 = gl.split(g1)
    return gl.minimum(_min3(h0, h1, i0), i1)
