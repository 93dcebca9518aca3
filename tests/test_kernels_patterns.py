"""The integer identities mxfp8's Gluon policy computes P with (`hopper.gluon.ptx.NARROW_ASM`, `softmax.
fused_policy_frozen_codes`), checked on CPU over every Stage-A pattern: the row maximum taken on the bits of the
Stage-A sums is the maximum of the patterns, and one multiply-add of those bits by 2^16 (after a floor where the
offset is positive) is the BF16 P of the pattern moved to P's scale, the clamped subtraction the float route did."""
from __future__ import annotations

import numpy as np
import pytest

from fsbench.kernels import constants

PATTERNS = np.arange(0, (1 << 16) + 1, dtype=np.int64)  # every pattern .sat lets through: t - P_BASE in [0, 1]


def _sums(patterns: np.ndarray) -> np.ndarray:
    """Stage-A's t = P_BASE + pattern 2^-16, exact in float32 (its ulp in [128, 256) is 2^-16)."""
    return (constants.P_BASE + patterns.astype(np.float64) * 2.0 ** -16).astype(np.float32)


def test_the_bits_of_the_stage_a_sums_are_the_patterns_in_order():
    bits = _sums(PATTERNS).view(np.int32).astype(np.int64)
    assert np.array_equal(bits - constants.P_BASE_BITS, PATTERNS)
    # strictly increasing: the integer maximum of the bits is the bits of the maximum pattern, for any row
    assert np.all(np.diff(bits) == 1)


def test_the_rounding_add_puts_the_nearest_pattern_in_the_low_bits():
    """t = sat(fma) + P_BASE in float32 rounds the clamped value to the nearest 2^-16, ties to even: the pattern."""
    rng = np.random.default_rng(0)
    r = np.concatenate([rng.random(1 << 20, dtype=np.float32),  # and every exact tie
                        ((PATTERNS[:-1] + 0.5) * 2.0 ** -16).astype(np.float32), np.float32([0.0, 1.0])])
    t = r + np.float32(constants.P_BASE)
    assert t.dtype == np.float32
    assert np.array_equal(t.view(np.int32).astype(np.int64) - constants.P_BASE_BITS,
                          np.rint(r.astype(np.float64) * 65536.0).astype(np.int64))


@pytest.mark.parametrize("doublings", [range(-127, 0), range(0, 129)], ids=["off<=0", "off>0"])
def test_one_multiply_add_moves_each_pattern_to_ps_scale_and_makes_it_a_float(doublings):
    """For every offset 128 k (k = e_p + delta) and every pattern whose moved value stays below 2^15 (what e_p's
    definition guarantees for a row's patterns): bits(t) 2^16 - k 2^23 mod 2^32, after flooring bits(t) at
    P_BASE_BITS + 128 k where k > 0, is the float32 whose high half is max(pattern - 128 k, 0), the BF16 P the float
    route reads after subtracting 128 e_p inside its FFMA."""
    bits = _sums(PATTERNS).view(np.int32).astype(np.int64)
    for k in doublings:
        off = 128 * k
        keep = PATTERNS - off < 1 << 15
        x = np.maximum(bits, constants.P_BASE_BITS + off) if off > 0 else bits
        moved = (x * 65536 - (off << 16)) & 0xFFFFFFFF
        expected = np.maximum(PATTERNS - off, 0) << 16
        assert np.array_equal(moved[keep], expected[keep]), k
        if off > 0:  # without the floor the patterns below the offset would wrap into negative BF16 values
            wrapped = ((bits * 65536 - (off << 16)) & 0xFFFFFFFF)[PATTERNS < off]
            assert np.all(wrapped >= 1 << 31)
