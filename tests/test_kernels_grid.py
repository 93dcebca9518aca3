"""The frozen reference on the pattern grid: patterns move against the float reference only across a rounding
boundary, the output only in rows where one moved, and the per-tile integers (offset, gate, delta, P's codes and
scale) hold on the edge cases a kernel must reproduce bit for bit."""
from __future__ import annotations

import math

import pytest
import torch
from test_kernels_emulator import with_tile_offsets

from fsbench.kernels.constants import D_BIAS
from fsbench.kernels.reference.emulator import EmulatorOptions, emulate, quantize_operands
from fsbench.kernels.reference.formats import quantize_p_fp8
from fsbench.kernels.reference.schraudolph import (
    PROXIES,
    grid_offset,
    grid_pattern,
    grid_reference,
    pattern_bias,
    stage_a,
)
from fsbench.kernels.reference.trace import trace

U16 = PROXIES["u16"]
N = 128
GATE_P = 20344  # floor(D + 128 * 32)


def scores(*tiles: list[float]) -> torch.Tensor:
    """One row of base-2 scores, one list per key tile, padded to N keys with -inf (masked)."""
    row = []
    for t in tiles:
        row += list(t) + [-math.inf] * (N - len(t))
    return torch.tensor([row], dtype=torch.float32)


def at_pattern(u: int, c: int = 16249) -> float:
    """The score whose pattern on offset c is exactly u."""
    return (u - c) / 128


def bf16_value(u: int) -> float:
    """A BF16 bit pattern's value, decoded by hand (sign bit clear)."""
    e, m = u >> 7, u & 127
    return m * 2.0 ** -133 if e == 0 else (128 + m) * 2.0 ** (e - 134)


def old_patterns(x: torch.Tensor, m0: torch.Tensor) -> torch.Tensor:
    """The float reference: the pattern of x - m0 (rounded to float32), as Stage-A took it before the grid."""
    scale = 128.0
    return torch.round((x - m0[..., None]).double() * scale + scale * (U16.bias - 0.05798)).clamp(min=0)


def test_the_offset_is_an_integer_within_half_a_pattern_of_the_first_maximum():
    m0 = torch.randn(10000) * 20
    c = grid_offset(m0, U16)
    assert torch.equal(c, torch.round(c))
    # half a pattern, plus the float32 rounding of D - 128 m0 (an ulp of 2^-10 at most here) before the integer
    assert (grid_reference(c, U16) - m0.double()).abs().max() <= (0.5 + 2 ** -10) / 128
    assert pattern_bias(U16) == pytest.approx(D_BIAS, abs=1e-3)


def test_patterns_move_by_one_at_most_and_only_across_a_rounding_boundary():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4096, generator=g) * 3
    m0 = x[:, :N].amax(-1)
    c = grid_offset(m0, U16)
    new = grid_pattern(x, c[:, None], U16).double()
    old = old_patterns(x, m0)
    moved = new != old
    assert moved.any() and (new - old).abs().max() == 1
    # exact positions of each score under both references: a moved pattern has a half-integer between them
    at_new = x.double() * 128 + c[:, None]
    at_old = (x - m0[:, None]).double() * 128 + 128 * (U16.bias - 0.05798)
    lo, hi = torch.minimum(at_new, at_old), torch.maximum(at_new, at_old)
    boundary = torch.floor(hi - 0.5) + 0.5
    assert (boundary[moved] >= lo[moved]).all()
    assert (new[moved & (at_new > 0)] - torch.round(at_new[moved & (at_new > 0)])).abs().max() == 0


def test_output_changes_only_in_rows_where_a_pattern_moved():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 1, 512, 128, generator=g) for _ in range(3))
    k, v = k[:, :, :N], v[:, :, :N]  # one key tile: no gate, one rounding per score
    out, _ = emulate(q, k, v, "mxfp8")
    opts = EmulatorOptions()
    qh, kh, vh = quantize_operands(q, k, v, "mxfp8", opts)
    x = torch.bmm(qh[0], kh[0].transpose(1, 2))
    m0 = x.amax(-1)
    p_old = quantize_p_fp8(stage_a(x - m0[..., None], U16))
    old = torch.bmm(p_old, vh[0]) / p_old.sum(-1)[..., None]
    moved = (grid_pattern(x, grid_offset(m0, U16)[..., None], U16).double() != old_patterns(x, m0)).any(-1)[0]
    same = (out[0, 0] == old[0]).all(-1)
    assert moved.any() and not moved.all()
    assert same[~moved].all() and not same[moved].all()
    assert ((out[0] - old).norm() / old.norm()) < 0.01


def test_trace_reproduces_the_emulator_output_through_rollbacks():
    q, k, v = with_tile_offsets([0, 0, 40, 0, 37, 80], sq=128)
    out, stats = emulate(q, k, v, "mxfp8", chunk_elements=128 * N)
    qh, kh, vh = quantize_operands(q, k, v, "mxfp8", EmulatorOptions())
    t = trace(torch.bmm(qh[0], kh[0].transpose(1, 2))[0], "mxfp8")
    o = torch.zeros(128, 128)
    row_sum = torch.zeros(128)
    for j in range(t.p.shape[1]):
        o *= torch.exp2(-t.delta[:, j].float())[:, None]
        row_sum *= torch.exp2(-t.delta[:, j].float())
        o += torch.bmm(t.p[None, :, j], vh[0, :, j * N:(j + 1) * N])[0]
        row_sum += t.p[:, j].sum(-1)
    assert stats.rollbacks > 0 and (t.delta > 0).any()
    assert torch.equal(out[0, 0], o / row_sum[:, None])
    # P's codes times 2^E are P, and the largest code of every tile lies in [128, 256)
    decoded = t.codes.view(torch.float8_e4m3fn).float() * torch.exp2(t.exponent.float())[..., None]
    assert torch.equal(decoded, t.p)
    assert (t.codes.view(torch.float8_e4m3fn).float().amax(-1) >= 128).all()


@pytest.mark.parametrize("x, fires", [(31.99, False), (32 - 2 ** -8, False), (32 - 2 ** -9, True), (32.0, True)])
def test_gate_threshold_is_the_maximum_pattern_above_d_plus_32_doublings(x, fires):
    # m0 = 0: c = round(16248.578) = 16249, the reference m' = -0.0034; 32 - 2^-8 lands on the tie 20344.5 (even)
    t = trace(scores([0.0] * 4, [x, 1.0]))
    assert t.offset[0, 0] == 16249
    assert (t.top[0, 1] > GATE_P) == fires
    assert t.delta[0, 1] == (33 if fires else 0)


@pytest.mark.parametrize("m0, c", [(0.0, 16249), (2.0 ** -9, 16248)])
@pytest.mark.parametrize("overshoot", [33.0, 40.0, 100.0, 33 - 2 ** -10, 40 - 2 ** -12])
def test_delta_at_integer_overshoots_and_just_below(m0, c, overshoot):
    t = trace(scores([m0], [m0 + overshoot]))
    top = round(128 * (m0 + overshoot) + c - 1e-9)  # no ties on these positions
    assert t.offset[0, 0] == c and t.top[0, 1] == top
    # the fewest whole doublings bringing the maximum pattern to at most D, against the grid reference
    assert t.delta[0, 1] == math.ceil((top - pattern_bias(U16)) / 128)
    after = int(t.patterns[0, 1].max())
    assert pattern_bias(U16) - 128 < after <= pattern_bias(U16)


def test_far_below_tiles_keep_zero_and_subnormal_patterns_exact_and_masked_keys_zero():
    # tile 1 peaks 120 doublings below tile 0 (E = -127): patterns 0..127 are BF16 subnormals
    subnormal = [1, 2, 3, 64, 127]
    top = 16249 - 120 * 128
    t = trace(scores([0.0], [at_pattern(u) for u in subnormal] + [at_pattern(top), -math.inf]))
    assert t.exponent[0, 1] == -127 and t.delta[0, 1] == 0
    codes = t.codes[0, 1]
    for i, u in enumerate(subnormal + [top]):
        want = torch.tensor(bf16_value(u) * 2.0 ** 127).to(torch.float8_e4m3fn).view(torch.uint8)
        assert codes[i] == want, (u, codes[i], want)
    assert codes[len(subnormal) + 1:].eq(0).all()  # the masked keys, not 0x38
    assert codes[3] == 0x38  # pattern 64 is 2^-127 = 1.0 at E = -127


def test_large_overshoots_of_385_doublings_and_more_roll_back_exactly():
    for overshoot in (385.0, 400.5, 1000.0):
        t = trace(scores([0.0, -1.0], [overshoot, overshoot - 1, -math.inf]))
        top = round(128 * overshoot + 16249)
        assert t.top[0, 1] == top
        delta = math.ceil((top - pattern_bias(U16)) / 128)
        assert t.delta[0, 1] == delta
        got = t.codes[0, 1, :2].view(torch.float8_e4m3fn).float() * 2.0 ** int(t.exponent[0, 1])
        for j, x in enumerate((overshoot, overshoot - 1)):
            u = round(128 * x + 16249) - 128 * delta
            assert got[j] == torch.tensor(bf16_value(u)).to(torch.float8_e4m3fn).float() * 1.0
    out, stats = emulate(*with_tile_offsets([0, 400.0], sq=128), "mxfp8")
    assert torch.isfinite(out).all() and stats.rollbacks > 0


def test_fully_masked_rows_and_tiles_give_zero_codes_and_the_smallest_scale():
    t = trace(torch.cat([scores([1.0, 2.0], []), torch.full((1, 2 * N), -math.inf)]))
    assert t.top[0, 1] == 0 and t.delta[0, 1] == 0 and t.exponent[0, 1] == -127
    assert t.codes[0, 1].eq(0).all() and t.p[0, 1].eq(0).all()
    assert t.offset[1, 0] == 0 and t.codes[1].eq(0).all() and t.exponent[1].eq(-127).all()


def test_masked_tails_give_zero_codes_and_match_the_emulator():
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 1, s, 128, generator=g) for s in (128, N + 3, N + 3))
    qh, kh, _ = quantize_operands(q, k, v, "mxfp8", EmulatorOptions())
    x = torch.nn.functional.pad(torch.bmm(qh[0], kh[0].transpose(1, 2)), (0, N - 3), value=-math.inf)
    t = trace(x[0], "mxfp8")
    assert t.codes[:, 1, 3:].eq(0).all() and t.codes[:, 1, :3].ne(0).any()
    out, _ = emulate(q, k, v, "mxfp8")
    assert torch.isfinite(out).all()


def test_a_negative_offset_is_held_as_the_float32_a_kernel_adds():
    # a first-tile maximum of 127.5 doublings: D - 128 m0 = -71.42, c = -71, held in 1 + 71 2^-24 -> 1 + 72 2^-24
    c = grid_offset(torch.tensor([127.5, 0.0]), U16)
    assert c.tolist() == [-71.0, 16249.0]
    x = torch.tensor([[127.5, 127.5 - 2 ** -7], [0.0, -2 ** -8]])  # the second row: a tie, to even
    assert grid_pattern(x, c[:, None], U16).tolist() == [[16248, 16247], [16249, 16248]]
    t = trace(scores([127.5, 127.0], [127.5 + 40]))
    assert t.offset[0, 0] == -71 and t.top[0, 1] == 16248 + 40 * 128 and t.delta[0, 1] == 40
