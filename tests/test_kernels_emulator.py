"""The emulator: exactness with every component off, streaming invariance, the frozen-max gate and its
exact rollback on crafted inputs, and the statistics it reports."""
from __future__ import annotations

import math

import pytest
import torch

from fsbench import kernels
from fsbench.kernels.reference.emulator import LOG2E, emulate
from fsbench.kernels.reference.schraudolph import PROXIES, proxy_table, stage_a
from fsbench.kernels.tools.ablation import CONVENTIONAL, cosine, relative_error_pct

D = 128
QUANTIZED = ["mxfp8", "mxfp6", "mxfp4"]


def exact_attention(q, k, v):
    s = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    return torch.softmax(s, dim=-1) @ v.double()


def normal(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(shape, generator=g).to(torch.bfloat16).float() for _ in range(3))


def with_tile_offsets(offsets, heads=1, sq=256, seed=0):
    """q, k, v whose base-2 scores in key tile j are offset by about offsets[j] doublings.

    All queries share a direction e (amplitude a); tile j's keys carry offsets[j] / (a log2e / sqrt(d))
    of it, so q.k / sqrt(d) * log2e ~= offsets[j] + small noise."""
    g = torch.Generator().manual_seed(seed)
    e = torch.zeros(D)
    e[0] = 1.0
    a = 8.0
    q = torch.randn(1, heads, sq, D, generator=g) * 0.3 + a * e
    k = torch.randn(1, heads, 128 * len(offsets), D, generator=g) * 0.3
    per_unit = a * LOG2E / math.sqrt(D)
    for j, off in enumerate(offsets):
        k[:, :, j * 128:(j + 1) * 128] += (off / per_unit) * e
    v = torch.randn(1, heads, 128 * len(offsets), D, generator=g)
    return q, k, v


def test_all_components_off_is_exact_attention_to_bf16_rounding():
    q, k, v = normal((1, 2, 1000, D), 0)
    out, stats = emulate(q, k, v, "bf16", **CONVENTIONAL)
    assert relative_error_pct(out, exact_attention(q, k, v)) < 0.5
    assert stats.key_tiles == 8 and stats.rollbacks == 0 and not stats.overflowed


@pytest.mark.slow
def test_result_does_not_depend_on_how_many_tiles_are_processed_at_once():
    q, k, v = normal((1, 2, 700, D), 1)
    for fmt in ["bf16", "mxfp6"]:
        for options in [CONVENTIONAL, {}]:
            one_tile, _ = emulate(q, k, v, fmt, chunk_elements=700 * 128, **options)
            all_tiles, _ = emulate(q, k, v, fmt, chunk_elements=1 << 30, **options)
            assert relative_error_pct(one_tile, all_tiles) < 1e-4


@pytest.mark.slow
def test_schraudolph_costs_about_its_rms_on_bf16_and_quantization_dominates():
    q, k, v = normal((1, 1, 1024, D), 2)
    ref, _ = emulate(q, k, v, "bf16", **CONVENTIONAL)
    fused, _ = emulate(q, k, v, "bf16")
    # Table 8: the U16 ramp has 1.777 % RMS error per probability; on the output it averages to a similar size
    assert 1.0 < relative_error_pct(fused, ref) < 2.5
    for fmt in QUANTIZED:
        conv, _ = emulate(q, k, v, fmt, **CONVENTIONAL)
        full, _ = emulate(q, k, v, fmt)
        assert relative_error_pct(full, ref) - relative_error_pct(conv, ref) < 0.6
    assert cosine(fused, ref) > 0.9995


@pytest.mark.parametrize("fmt", QUANTIZED)
@pytest.mark.parametrize("case", ["late_sink", "staircase"])
def test_rollback_keeps_output_as_accurate_as_conventional_softmax(fmt, case):
    # late sink: tile 6 of 8 is 40 doublings above tile 0; staircase: +3 doublings per tile for 16 tiles
    offsets = [0, 0, 0, 0, 0, 0, 40, 0] if case == "late_sink" else [3 * j for j in range(16)]
    q, k, v = with_tile_offsets(offsets)
    exact = exact_attention(q, k, v)
    gated, stats = emulate(q, k, v, fmt)
    conventional, _ = emulate(q, k, v, fmt, **CONVENTIONAL)
    assert torch.isfinite(gated).all() and not stats.overflowed
    assert stats.rollbacks > 0 and stats.gate_trips == 0
    assert relative_error_pct(gated, exact) <= relative_error_pct(conventional, exact) + 0.5


def test_rollback_shift_is_exact_for_unquantized_probabilities():
    # With exact exp2 and fp32 P the rollback rescales by exact powers of two: the result must match the
    # online softmax to float32 rounding, across several rollbacks.
    q, k, v = with_tile_offsets([3 * j for j in range(16)], seed=3)
    ungated, _ = emulate(q, k, v, "bf16", schraudolph=False, frozen_max=False)
    gated, stats = emulate(q, k, v, "bf16", schraudolph=False)
    assert stats.rollbacks >= 1
    assert relative_error_pct(gated, ungated) < 0.5


def test_gate_disabled_reports_trips_and_wrapping_overflow():
    q, k, v = with_tile_offsets([0, 0, 0, 0, 0, 0, 40, 0])
    _, stats = emulate(q, k, v, "mxfp8", gate_doublings=None)
    assert stats.gate_trips > 0 and stats.rollbacks == 0
    # 128.3 doublings above the frozen max the BF16 pattern reaches the Inf/NaN codes (0x7F80 and up)
    q, k, v = with_tile_offsets([0, 0, 0, 0, 0, 0, 128.3, 0])
    out, stats = emulate(q, k, v, "mxfp8", gate_doublings=None)
    assert stats.overflowed and not torch.isfinite(out).all()
    out, stats = emulate(q, k, v, "mxfp8")
    assert torch.isfinite(out).all() and stats.rollbacks > 0


def test_rollback_rate_counts_workgroup_tiles():
    q, k, v = with_tile_offsets([0, 0, 0, 0, 0, 0, 40, 0], sq=256)
    _, stats = emulate(q, k, v, "mxfp6")
    # 2 query tiles x 8 key tiles; every row of both query tiles rolls back once, at tile 6
    assert (stats.workgroup_tiles, stats.rollbacks) == (16, 2)
    assert stats.rollback_rate == pytest.approx(2 / 16)


def test_any_sequence_length_batch_and_heads():
    q, k, v = normal((2, 3, 77, 64), 4)
    k2, v2 = normal((2, 3, 300, 64), 5)[:2]
    out, stats = emulate(q, k2, v2, "mxfp4")
    assert out.shape == (2, 3, 77, 64) and torch.isfinite(out).all() and stats.key_tiles == 3


def test_stage_a_u16_reads_the_pattern_as_bf16():
    x = torch.tensor([0.0, 1.0, -1.0, 3.5])
    got = stage_a(x, PROXIES["u16"])
    pattern = torch.round(128 * (x.double() + 127 - 0.05798)).to(torch.int16)
    assert torch.equal(got, pattern.view(torch.bfloat16).float())
    assert (got / torch.exp2(x) - 1).abs().max() < 0.045


def test_proxy_table_matches_paper_table_8():
    rows = {r["proxy"]: r for r in proxy_table()}
    # Wu et al., arXiv 2611.09225v1, Table 8 (min, max, RMS, added by f-hat; all in %)
    paper = {"U32 / FP32": (-3.939, 1.966, 1.770, 0.000), "U16 / FP16": (-3.972, 2.000, 1.770, 0.020),
             "U16 / BF16": (-4.199, 2.242, 1.777, 0.162), "U8 / E4M3": (-8.012, 6.398, 3.141, 2.595)}
    for name, expected in paper.items():
        r = rows[name]
        got = tuple(round(r[key], 3) for key in ("min_pct", "max_pct", "rms_pct", "added_pct"))
        assert got == expected, name
    assert (rows["U16 / BF16"]["reach_log2"], rows["U16 / FP16"]["reach_log2"]) == (128, 16)


@pytest.mark.parametrize("bad, match", [
    (dict(q=torch.zeros(1, 8, 2, 48), k=torch.zeros(1, 8, 2, 48)), "multiple of 32"),
    (dict(q=torch.zeros(8, 2, 64)), "4-D"),
    (dict(fmt="mxfp5"), "unknown attention format"),
    (dict(impl="cuda"), "unknown attention impl"),
    (dict(q=torch.zeros(1, 8, 2, 64, dtype=torch.int8)), "bfloat16, float16 or float32"),
    (dict(options={"gate": 3}), "unknown attention option"),
    (dict(options={"proxy": "u12"}), "unknown Schraudolph proxy"),
    (dict(k=torch.zeros(1, 9, 3, 64)), "disagree"),
])
def test_bad_inputs_give_clear_value_errors(bad, match):
    args = dict(q=torch.zeros(1, 8, 2, 64), k=torch.zeros(1, 8, 2, 64), v=torch.zeros(1, 8, 2, 64),
                fmt="mxfp8", impl="emulate", options={})
    args.update(bad)
    if "k" in bad:
        args["v"] = bad["k"]
    with pytest.raises(ValueError, match=match):
        kernels.attention(args["q"], args["k"], args["v"], args["fmt"], impl=args["impl"], **args["options"])


def test_entry_point_takes_bshd_and_matches_sdpa_for_bf16():
    q, k, v = normal((1, 2, 64, D), 6)  # BHSD
    bshd = [t.transpose(1, 2).contiguous() for t in (q, k, v)]
    out = kernels.attention(*bshd, "bf16")
    assert out.shape == bshd[0].shape
    assert torch.allclose(out.transpose(1, 2), torch.nn.functional.scaled_dot_product_attention(q, k, v), atol=1e-5)
    emulated, stats = kernels.attention_with_stats(*bshd, "mxfp8", impl="emulate")
    assert emulated.shape == bshd[0].shape and stats.key_tiles == 1
