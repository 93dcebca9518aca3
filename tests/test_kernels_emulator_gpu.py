"""The emulator on CUDA: its torch.compile-fused elementwise pipeline must give the same P as the eager
code on the same scores, and the whole emulator must agree with the CPU one up to the rare rounding
ties that a different matmul summation order flips."""
from __future__ import annotations

import pytest
import torch

from fsbench.kernels.reference.emulator import (
    _tile_probabilities,
    emulate,
    fused_tile_probabilities,
)
from fsbench.kernels.reference.schraudolph import get_proxy, grid_offset, held_offset
from fsbench.kernels.tools.ablation import CONVENTIONAL, relative_error_pct

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)


@pytest.mark.parametrize("fmt", ["bf16", "mxfp8", "mxfp6"])
@pytest.mark.parametrize("schraudolph, proxy", [(False, "u16"), (True, "u16"), (True, "u8")])
@pytest.mark.parametrize("grid", [True, False], ids=["grid", "online"])
def test_fused_tile_probabilities_equal_eager(fmt, schraudolph, proxy, grid):
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(4, 512, 2, 128, generator=g, device="cuda") * 4
    x[..., -16:] = -torch.inf  # masked tail keys
    mt = x.amax(-1)
    ref = held_offset(grid_offset(mt[..., :1].expand_as(mt), get_proxy(proxy))) if grid else mt
    eager = _tile_probabilities(x, ref, fmt, schraudolph, proxy, 0.05798, grid)
    fused = fused_tile_probabilities()(x, ref, fmt, schraudolph, proxy, 0.05798, grid)
    assert torch.equal(eager[0], fused[0]), f"max diff {(eager[0] - fused[0]).abs().max().item()}"
    for e, f in zip(eager[1:], fused[1:]):
        assert torch.allclose(e, f, rtol=1e-5)


@pytest.mark.parametrize("fmt", ["bf16", "mxfp8", "mxfp6", "mxfp4"])
@pytest.mark.parametrize("options", [CONVENTIONAL, {"proxy": "u32"}], ids=str)
def test_cuda_emulator_agrees_with_cpu(fmt, options):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 1000, 128, generator=g).to(torch.bfloat16) for _ in range(3))
    cpu, cpu_stats = emulate(q, k, v, fmt, **options)
    gpu, gpu_stats = emulate(q.cuda(), k.cuda(), v.cuda(), fmt, **options)
    assert relative_error_pct(gpu.cpu(), cpu) < 0.05
    assert cpu_stats == gpu_stats
