"""FP8 GEMMs (`--gemm fp8`): the numerics of one layer against a hand-computed per-row E4M3 quantization,
and the cost on the tiny model's video (PSNR/SSIM against the unquantized-GEMM video of the same schedule)."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from fsbench.eval.fidelity import psnr, ssim
from fsbench.harness.model import fp8_linear
from fsbench.harness.model.fp8_linear import Fp8Linear
from fsbench.harness.run import orchestrator


def _e4m3_grid() -> torch.Tensor:
    """Every finite float8_e4m3fn value, from the 256 bit patterns, ascending (float64)."""
    values = torch.arange(256, dtype=torch.int16).to(torch.uint8).view(torch.float8_e4m3fn).double()
    return torch.unique(values[torch.isfinite(values)])


def _round_to_grid(x: torch.Tensor) -> torch.Tensor:
    """Nearest E4M3 value of every element (float64), ties to the value with an even mantissa bit pattern."""
    grid = _e4m3_grid()
    x = x.clamp(grid[0], grid[-1])
    hi = torch.searchsorted(grid, x).clamp(1, len(grid) - 1)
    below, above = grid[hi - 1], grid[hi]
    pick_above = (above - x) < (x - below)
    tie = (above - x) == (x - below)
    above_even = (above.to(torch.float8_e4m3fn).view(torch.uint8) & 1) == 0
    return torch.where(pick_above | (tie & above_even), above, below)


def _hand_fp8_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """y = Q(x) Q(W)^T + b, Q = per-row scale amax/448 and round-to-nearest-even onto the E4M3 grid."""
    def quantize(t: torch.Tensor) -> torch.Tensor:
        t = t.double()
        scale = t.abs().amax(dim=1, keepdim=True) / 448.0
        return _round_to_grid(t / scale) * scale
    return quantize(x) @ quantize(weight).t() + bias.double()


@pytest.fixture
def layer() -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(64, 48)


def test_fp8_linear_matches_a_hand_computed_per_row_e4m3_quantization(layer):
    x = torch.randn(3, 5, 64) * torch.logspace(-2, 2, 64)  # rows and channels of very different magnitude
    out = Fp8Linear(layer)(x)
    expected = _hand_fp8_linear(x.reshape(-1, 64), layer.weight.detach(), layer.bias.detach()).reshape(3, 5, 48)
    assert out.shape == (3, 5, 48) and out.dtype == torch.float32
    assert torch.allclose(out.double(), expected, rtol=1e-5, atol=1e-5)


def test_fp8_linear_is_close_to_but_not_equal_to_the_bf16_layer(layer):
    bf16 = copy.deepcopy(layer).to(torch.bfloat16)
    x = torch.randn(64, 64, dtype=torch.bfloat16)
    reference = bf16(x).float()
    out = Fp8Linear(bf16)(x)
    assert out.dtype == torch.bfloat16
    rel = ((out.float() - reference).norm() / reference.norm()).item()
    assert 1e-3 < rel < 0.08, rel


def test_emulation_matches_torch_scaled_mm_where_the_cpu_has_it(layer):
    fp8 = Fp8Linear(layer.to(torch.bfloat16))
    a, a_scale = fp8_linear.quantize_rows(torch.randn(32, 64, dtype=torch.bfloat16))
    try:
        native = torch._scaled_mm(a, fp8.weight.t(), scale_a=a_scale, scale_b=fp8.weight_scale, bias=fp8.bias,
                                  out_dtype=torch.bfloat16)
    except (RuntimeError, NotImplementedError) as exc:
        pytest.skip(f"torch._scaled_mm has no CPU kernel here: {exc}")
    emulated = fp8_linear.emulated_mm(a, a_scale, fp8.weight, fp8.weight_scale, fp8.bias).to(torch.bfloat16)
    assert torch.allclose(native.float(), emulated.float(), rtol=1e-2, atol=1e-2)


SMALL = dict(height=32, width=32, num_frames=5, steps=2)


@pytest.mark.slow
def test_fp8_gemms_cost_little_fidelity_on_the_tiny_video(one_thread):
    """The tiny model (float32 on a CPU) with FP8 block GEMMs against the same schedule unquantized:
    same video up to quantization noise (PSNR/SSIM through eval.fidelity's public functions)."""
    spec = orchestrator.prepare("tiny", "mlperf", "bf16", None, 1, None, SMALL)
    pipe = orchestrator.load_pipeline(spec, torch.device("cpu"))
    pipe.set_progress_bar_config(disable=True)
    reference = orchestrator.VideoGenerator(pipe, spec, None, None, reuse=False).frames(0)
    record = fp8_linear.convert([pipe.transformer, pipe.transformer_2])
    assert record["linears_converted"] == 2 * 2 * 10 and not record["linears_skipped"]
    assert type(pipe.transformer.condition_embedder.time_proj) is nn.Linear  # embeddings stay unquantized
    test = orchestrator.VideoGenerator(pipe, spec, None, None, reuse=False).frames(0)
    ref8, test8 = ((f * 255).round().astype(np.uint8) for f in (reference, test))
    scores = [(psnr(r, t), ssim(r, t)) for r, t in zip(ref8, test8)]
    mean_psnr, mean_ssim = np.mean([s[0] for s in scores]), np.mean([s[1] for s in scores])
    assert not np.array_equal(ref8, test8)
    assert mean_psnr > 30 and mean_ssim > 0.9, (mean_psnr, mean_ssim)


@pytest.mark.slow
def test_the_fused_gpu_quantizer_is_bit_exact_with_the_eager_one():
    """Fp8Linear on CUDA quantizes activations through torch.compile(quantize_rows); the numerics must not move
    (checked here through inductor's CPU backend, which compiles the same graph)."""
    x = torch.randn(96, 64) * torch.logspace(-3, 3, 64)
    fused = torch.compile(fp8_linear.quantize_rows, dynamic=False)(x)
    eager = fp8_linear.quantize_rows(x)
    assert torch.equal(fused[0].view(torch.uint8), eager[0].view(torch.uint8)) and torch.equal(fused[1], eager[1])
