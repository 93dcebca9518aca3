"""The Gluon kernel's pipeline: the K/V ring the TMA warpgroup fills, the turns the two math warpgroups take at the
tensor cores, and the table of named barriers those turns use."""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma
from triton.language.core import _aggregate as aggregate  # Triton 3.6 has no public name for it

from fsbench.kernels.hopper.gluon.ptx import named_barrier

# registers per thread after reallocation (setmaxnreg, per warpgroup): the worker math warpgroup and the TMA one;
# the default partition (math warpgroup 0) gets what is left, also 240: (240 + 240 + 24) x 128 = 64,512
MATH_REGS: gl.constexpr = gl.constexpr(240)
PRODUCER_REGS: gl.constexpr = gl.constexpr(24)

# The kernel's named barriers, in id order after the ones the compiler reserves (ids 0..7): math warpgroup WG waits
# for its turn at "turn_<WG>". Both math warpgroups (256 threads) meet at each.
RESERVED_BARRIERS = 8
NAMED_BARRIERS = ("turn_0", "turn_1")
TURN_THREADS = 256


def barrier_id(name: str) -> int:
    """The hardware id of one of the kernel's named barriers."""
    return RESERVED_BARRIERS + NAMED_BARRIERS.index(name)


SYNC_0: gl.constexpr = gl.constexpr(f"bar.sync {barrier_id('turn_0')}, {TURN_THREADS}; mov.b32 $0, 0;")
SYNC_1: gl.constexpr = gl.constexpr(f"bar.sync {barrier_id('turn_1')}, {TURN_THREADS}; mov.b32 $0, 0;")
ARRIVE_0: gl.constexpr = gl.constexpr(f"bar.arrive {barrier_id('turn_0')}, {TURN_THREADS}; mov.b32 $0, 0;")
ARRIVE_1: gl.constexpr = gl.constexpr(f"bar.arrive {barrier_id('turn_1')}, {TURN_THREADS}; mov.b32 $0, 0;")


@aggregate
class Turn:
    """Math warpgroup WG's turns at the tensor cores: it waits at its own named barrier ("turn_<WG>") and hands the
    turn over by arriving at the other's."""

    WG: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, WG):
        self.WG = gl.constexpr(WG)

    @gluon.jit
    def take(self, anchor):
        """Wait until the other warpgroup has handed the turn over."""
        if self.WG == 0:
            named_barrier(SYNC_0, anchor)
        else:
            named_barrier(SYNC_1, anchor)

    @gluon.jit
    def hand_over(self, anchor):
        """Arrive (without waiting) at the other warpgroup's barrier: its turn."""
        if self.WG == 0:
            named_barrier(ARRIVE_1, anchor)
        else:
            named_barrier(ARRIVE_0, anchor)


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


@gluon.jit
def producer(desc_k, desc_v, ring: Ring, kv_row, v_row, N_KT, BN: gl.constexpr):
    """The TMA warpgroup: every key tile into the ring."""
    for tile in range(N_KT):
        ring.fill(desc_k, desc_v, kv_row, v_row, tile, BN)


@gluon.jit
def issue_scores(q_smem, ring: Ring, tile, s_layout: gl.constexpr, HALF: gl.constexpr, BN: gl.constexpr):
    """Issue the QK GEMM of `tile` (fresh accumulator; its K has landed: `Ring.wait_keys`); returns the wgmma token."""
    zero = gl.zeros([HALF, BN], gl.float32, s_layout)
    return warpgroup_mma(q_smem, ring.keys(tile).permute((1, 0)), zero, use_acc=False, is_async=True)
