"""mxfp8's Gluon policy on the pattern grid (`hopper.gluon.softmax.fused_policy_grid`, `ptx.NARROW_ASM`), instruction
by instruction in numpy on the CPU: the FFMA.SAT that rounds each pattern once into the low bits of 1 - p 2^-24, the
integer minimum of those bits for the tile's maximum pattern, the gate and the integer rollback, the IMAD that moves
each pattern to P's scale and makes it a float (or the warp's float route), and the e4m3x2 convert. Its offsets,
maxima, deltas, P's scale exponents and codes must be the emulator's (`reference.trace`) bit for bit, on random
scores and on every edge case by name."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fsbench.kernels import constants
from fsbench.kernels.hopper.gluon import ptx
from fsbench.kernels.reference.schraudolph import PROXIES, gate_pattern, held_offset
from fsbench.kernels.reference.trace import trace

N = 128
D32 = float(np.float32(constants.D_BIAS))
GATE_P = gate_pattern(32, PROXIES["u16"])
ONE_BITS = constants.ONE_BITS


def f32(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64).astype(np.float32)


def pow2(e: np.ndarray) -> np.ndarray:
    """`ptx.pow2`: 2^e from the exponent bits, e clamped to [-127, 127] (2^-127 reads as 0)."""
    return ((np.clip(e, -127, 127) + 127) << 23).astype(np.uint32).view(np.float32)


def kernel_tiles(s: np.ndarray, a: float, slow_everywhere: bool = False) -> dict[str, np.ndarray]:
    """The Gluon mxfp8 policy on raw scores s (rows, T * N) with the row scale a (a power of two), one tile at a
    time, each instruction in float32 or int32 as the SASS computes it. The warp's float route is taken where a row
    needs it, or everywhere with `slow_everywhere` (a warp takes it for all its rows when one needs it)."""
    rows = s.shape[0]
    tiles = s.astype(np.float32).reshape(rows, -1, N)
    m = f32(tiles[:, 0].max(-1) * np.float32(a))  # SEED: m0 = max(s) a
    with np.errstate(invalid="ignore"):
        c = f32(f32(f32(np.float32(D32) - f32(128.0 * m)) + np.float32(constants.MAGIC)) - np.float32(constants.MAGIC))
    c = np.where(m > -np.inf, c, np.float32(0.0))  # a row without keys in its first tile: offset 0
    k = f32(1.0 - c.astype(np.float64) * constants.GRID_STEP)  # the row's state: k = 1 - c 2^-24, one rounding
    slope = f32(np.float32(-128.0 * constants.GRID_STEP) * np.float32(a))
    out: dict[str, list] = {k: [] for k in ("offset", "top", "delta", "exponent", "codes")}
    d_floor = math.floor(constants.D_BIAS)
    for j in range(tiles.shape[1]):
        with np.errstate(invalid="ignore"):
            exact = tiles[:, j].astype(np.float64) * float(slope) + k[:, None].astype(np.float64)
        t = np.clip(f32(np.nan_to_num(exact, posinf=2.0, neginf=-1.0)), 0.0, 1.0)  # FFMA.SAT (one rounding)
        bits = t.view(np.int32).astype(np.int64)
        pmax = ONE_BITS - bits.min(-1)  # VIMNMX3
        out["offset"].append(((1.0 - k.astype(np.float64)) / constants.GRID_STEP).astype(np.int64))
        out["top"].append(pmax)
        need = pmax > GATE_P
        delta = np.where(need, (pmax + (127 - d_floor)) >> 7, 0)
        k = f32(k.astype(np.float64) + delta * 128.0 * constants.GRID_STEP)  # one FFMA: a rollback
        pmax = pmax - 128 * delta
        e_p = np.maximum((pmax >> 7) - 127 - 7, -127)
        e = e_p + delta
        k16 = (((-128 * e) << 16)[:, None] + (1 << 31)) % (1 << 32) - (1 << 31)  # an int32: wraps
        floor_or_factor = np.where(e <= ptx.FAR_BELOW, pow2(-e).view(np.int32), ONE_BITS - 128 * e)[:, None]
        floor, far = (e > 0)[:, None] | slow_everywhere, (e <= ptx.FAR_BELOW)[:, None] | slow_everywhere
        bits = np.where(floor, np.minimum(bits, floor_or_factor), bits)  # VIMNMX
        moved = ((bits * -65536 + k16) & 0xFFFFFFFF).astype(np.uint32)  # IMAD
        bf16 = ((moved.astype(np.int64) - k16) & 0xFFFFFFFF).astype(np.uint32).view(np.float32)  # IADD3
        factor = floor_or_factor.astype(np.int32).view(np.float32)
        with np.errstate(invalid="ignore", over="ignore"):
            scaled = f32(bf16.astype(np.float64) * factor.astype(np.float64))  # FMUL
        p = np.where(far & (floor_or_factor >= ptx.FAR_FACTOR_BITS), scaled, moved.view(np.float32))  # ISETP, SEL
        out["codes"].append(torch.from_numpy(p.copy()).to(torch.float8_e4m3fn).view(torch.uint8).numpy())
        out["delta"].append(delta)
        out["exponent"].append(e_p)
    return {k: np.stack(v, 1) for k, v in out.items()}


def assert_matches_the_emulator(s: np.ndarray, a: float = 1.0) -> None:
    ref = trace(torch.from_numpy(f32(s.astype(np.float64) * a)))
    for slow_everywhere in (False, True):
        got = kernel_tiles(s, a, slow_everywhere)
        np.testing.assert_array_equal(got["offset"], held_offset(ref.offset).numpy(), err_msg="offset")
        for key in ("top", "delta", "exponent"):
            np.testing.assert_array_equal(got[key], getattr(ref, key).numpy(), err_msg=key)
        mismatch = got["codes"] != ref.codes.numpy()
        assert not mismatch.any(), f"{mismatch.sum()} codes differ (float route everywhere: {slow_everywhere})"


def row(*tiles: list[float]) -> np.ndarray:
    out = []
    for t in tiles:
        out += list(t) + [-math.inf] * (N - len(t))
    return np.array([out], dtype=np.float32)


def test_random_scores_with_masked_tails_and_rollbacks():
    rng = np.random.default_rng(0)
    s = f32(rng.standard_normal((64, 6 * N)) * 4)
    s[:, 5 * N + 40:] = -np.inf  # the masked tail of the last tile
    s[:8, 3 * N + 5] = 60.0  # a rollback in 8 rows
    s[8:16, 2 * N + 9] = 35.0
    assert_matches_the_emulator(s)
    assert_matches_the_emulator(f32(s * 32), 2.0 ** -5)  # the same scores from a row scale of 2^-5


@pytest.mark.parametrize("x", [31.99, 32 - 2 ** -8, 32 - 2 ** -9, 32.0, 32 + 2 ** -9])
def test_gate_threshold_in_the_last_pattern_below_32_doublings(x):
    assert_matches_the_emulator(row([0.0, -3.0], [x, 1.0]))


@pytest.mark.parametrize("overshoot", [33.0, 40.0, 100.0, 33 - 2 ** -10, 40 - 2 ** -12])
@pytest.mark.parametrize("m0", [0.0, 2.0 ** -9])
def test_delta_at_integer_overshoots_and_just_below(m0, overshoot):
    assert_matches_the_emulator(row([m0], [m0 + overshoot, m0]))


@pytest.mark.parametrize("below", [100.0, 116.5, 117.0, 118.0, 120.0, 125.0, 140.0])
def test_far_below_tiles_zero_and_subnormal_patterns_and_masked_keys(below):
    top = 16249 - 128 * below
    keys = [(u - 16249) / 128 for u in (1, 2, 63, 64, 65, 127, 128, 129)] + [(top - 16249) / 128, -math.inf]
    assert_matches_the_emulator(row([0.0], keys))


@pytest.mark.parametrize("overshoot", [385.0, 400.5, 1000.0, 30000.0])
def test_large_overshoots_of_385_doublings_and_more(overshoot):
    assert_matches_the_emulator(row([0.0, -1.0], [overshoot, overshoot - 1, overshoot - 9, 0.0], [overshoot - 2]))


def test_fully_masked_rows_and_tiles():
    s = np.concatenate([row([1.0, 2.0], [], [3.0]), np.full((1, 3 * N), -np.inf, dtype=np.float32)])
    assert_matches_the_emulator(s)


def test_negative_offsets_first_maxima_above_127_doublings():
    assert_matches_the_emulator(row([127.5, 127.0], [127.5 + 40, 100.0], [200.0]))
    assert_matches_the_emulator(row([140.0 + 2 ** -7], [139.0]))
