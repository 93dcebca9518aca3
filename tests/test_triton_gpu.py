"""The Hopper Triton and Gluon kernels against the emulator (needs an sm_90 GPU; results live in results/h200/)."""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("needs a Hopper (sm_90) CUDA GPU", allow_module_level=True)

from fsbench.kernels import attention_with_stats, registry  # noqa: E402
from fsbench.kernels.hopper.launch import GLUON_KERNEL, triton_attention  # noqa: E402
from fsbench.kernels.reference.emulator import emulate  # noqa: E402
from fsbench.kernels.tools.check import Case, make_inputs  # noqa: E402

CONVENTIONAL = {"frozen_max": False, "schraudolph": False, "rowsum_gemm": False}


@pytest.fixture(params=["triton", "gluon"])
def impl(request) -> str:
    """Every test runs on both kernels: the autotuned Triton one and the Gluon one."""
    return request.param


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


@pytest.mark.parametrize("s", [4096, 4000, 100])
def test_fused_mxfp8_matches_the_emulator_including_a_tail_tile(s, impl):
    q, k, v = make_inputs(Case("random", (1, 2, s, 128), {}), 0, "cuda")
    out, stats = triton_attention(q, k, v, "mxfp8", kernel=registry.get(impl).hopper)
    ref, ref_stats = emulate(q, k, v, "mxfp8")
    assert _rel(out, ref) < 1e-2  # measured 5.6e-3: ~FP22 QK scores flip a few P roundings
    assert stats.key_tiles == ref_stats.key_tiles and stats.workgroup_tiles == ref_stats.workgroup_tiles


def test_conventional_fp8_matches_the_emulators_online_softmax(impl):
    q, k, v = make_inputs(Case("random", (1, 2, 4000, 128), {}), 1, "cuda")
    out, _ = triton_attention(q, k, v, "mxfp8", kernel=registry.get(impl).hopper, softmax="conventional")
    ref, _ = emulate(q, k, v, "mxfp8", **CONVENTIONAL)
    assert _rel(out, ref) < 1e-2  # measured 5.9e-3


@pytest.mark.parametrize("fmt", ["mxfp6", "mxfp4"])
def test_mx_formats_match_the_emulator_with_block_scaled_p(fmt, impl):
    q, k, v = make_inputs(Case("random", (1, 2, 4000, 128), {}), 2, "cuda")
    out, _ = triton_attention(q, k, v, fmt, kernel=registry.get(impl).hopper)
    ref, _ = emulate(q, k, v, fmt)
    assert _rel(out, ref) < 1e-2


@pytest.mark.parametrize("fmt", ["mxfp6", "mxfp4"])
def test_row_scaled_mx_p_stays_close_to_the_emulator(fmt, impl):
    q, k, v = make_inputs(Case("random", (1, 2, 4000, 128), {}), 2, "cuda")
    out, _ = triton_attention(q, k, v, fmt, kernel=registry.get(impl).hopper, mx_p_scale="row")
    ref, _ = emulate(q, k, v, fmt)
    assert _rel(out, ref) < 5e-2  # measured 3.5e-2: one E8M0 per row and key tile, not per 32 keys


@pytest.mark.parametrize("gate", [32, None])
def test_late_sink_rolls_back_exactly_or_counts_a_trip(gate, impl):
    case = Case("late-sink", (1, 2, 4000, 128), {"gate_doublings": gate}, ((3990, 40.0),))
    q, k, v = make_inputs(case, 0, "cuda")
    out, stats = triton_attention(q, k, v, "mxfp8", kernel=registry.get(impl).hopper, gate_doublings=gate)
    ref, ref_stats = emulate(q, k, v, "mxfp8", gate_doublings=gate)
    assert torch.isfinite(out).all() and not stats.overflowed
    assert (stats.rollbacks, stats.gate_trips) == (ref_stats.rollbacks, ref_stats.gate_trips)
    assert (stats.rollbacks if gate else stats.gate_trips) > 0
    assert _rel(out, ref) < 2e-3


def test_staircase_of_maxima_stays_finite_and_matches(impl):
    case = Case("staircase", (1, 2, 2048, 128), {}, tuple((512 * i + 7, 36.0 * i) for i in range(1, 4)))
    q, k, v = make_inputs(case, 0, "cuda")
    out, stats = triton_attention(q, k, v, "mxfp8", kernel=registry.get(impl).hopper)
    ref, ref_stats = emulate(q, k, v, "mxfp8")
    assert torch.isfinite(out).all() and stats.rollbacks == ref_stats.rollbacks > 0
    assert _rel(out, ref) < 2e-3


def test_bshd_entry_point_returns_bshd_in_the_input_dtype(impl):
    """BSHD in, BSHD out written in place by the kernel (contiguous, no copy), equal to the BHSD call's."""
    bhsd = make_inputs(Case("random", (1, 2, 300, 128), {}), 3, "cuda")
    q, k, v = (t.transpose(1, 2).contiguous() for t in bhsd)
    out, stats = attention_with_stats(q, k, v, "mxfp8", impl=impl)
    assert out.shape == q.shape and out.dtype == q.dtype and stats.key_tiles == 3
    assert out.is_contiguous()
    assert torch.equal(out.transpose(1, 2), attention_with_stats(*bhsd, "mxfp8", impl=impl, layout="BHSD")[0])


@pytest.fixture
def one_config(request):
    """Pin the autotuner to one launch configuration (so every tiling is checked, not only the fastest)."""
    from fsbench.kernels.hopper.triton_fused import attention_kernel

    configs, cache = attention_kernel.configs, attention_kernel.cache
    attention_kernel.configs, attention_kernel.cache = [configs[request.param]], {}
    yield configs[request.param]
    attention_kernel.configs, attention_kernel.cache = configs, cache


@pytest.mark.parametrize("one_config", range(4), indirect=True)
@pytest.mark.parametrize("fmt", ["mxfp8", "mxfp6"])
def test_every_launch_configuration_matches_the_emulator_and_counts_rollbacks_per_128_rows(one_config, fmt):
    case = Case("staircase", (1, 2, 2000, 128), {}, tuple((512 * i + 7, 36.0 * i) for i in range(1, 4)))
    q, k, v = make_inputs(case, 0, "cuda")
    out, stats = triton_attention(q, k, v, fmt)
    ref, ref_stats = emulate(q, k, v, fmt)
    assert torch.isfinite(out).all() and stats.rollbacks == ref_stats.rollbacks > 0, one_config
    assert _rel(out, ref) < 2e-3, one_config
    q, k, v = make_inputs(Case("random", (1, 2, 1000, 128), {}), 3, "cuda")
    assert _rel(triton_attention(q, k, v, fmt)[0], emulate(q, k, v, fmt)[0]) < 1e-2, one_config


@pytest.mark.parametrize("s", [128, 256, 4000])
def test_gluon_kernel_handles_one_two_and_many_key_tiles(s):
    """The Gluon kernel peels its first and last key tiles: one tile, two tiles and a tail must all hold."""
    q, k, v = make_inputs(Case("random", (1, 2, s, 128), {}), 4, "cuda")
    for fmt in ("mxfp8", "mxfp6"):
        ref = triton_attention(q, k, v, fmt)[0]
        out, stats = triton_attention(q, k, v, fmt, kernel=GLUON_KERNEL)
        assert _rel(out, ref) < 2e-3 and stats.key_tiles == -(-s // 128)
    q, k, v = make_inputs(Case("random", (1, 2, 100, 128), {}), 4, "cuda")
    assert _rel(triton_attention(q, k, v, "mxfp8", kernel=GLUON_KERNEL)[0], emulate(q, k, v, "mxfp8")[0]) < 1e-2


@pytest.mark.parametrize("name, spikes", [
    ("gate-threshold", ((3000, 32.0),)),  # rows on either side of 32 doublings: scores a few ulps apart may flip
    ("integer-overshoot", ((3000, 33.0),)),
    ("far-below", ((5, 120.0),)),  # every tile past the first some 120 doublings below it (E <= -117)
    ("large-overshoot", ((3990, 400.0),)),  # 400 doublings above the reference, past the 16-bit pattern
])
@pytest.mark.parametrize("fmt", ["mxfp8", "mxfp6"])
def test_pattern_grid_edge_cases_match_the_emulator(name, spikes, fmt, impl):
    """The edge cases of the pattern grid (docs/pattern-grid.md), 4000 keys (a masked tail): finite, the same
    rollbacks as the emulator and its output to the QK scores' own rounding."""
    q, k, v = make_inputs(Case(name, (1, 2, 4000, 128), {}, spikes), 0, "cuda")
    out, stats = triton_attention(q, k, v, fmt, kernel=registry.get(impl).hopper)
    ref, ref_stats = emulate(q, k, v, fmt)
    assert torch.isfinite(out).all() and not stats.overflowed
    if name != "gate-threshold":
        assert stats.rollbacks == ref_stats.rollbacks
    assert _rel(out, ref) < 1e-2
