"""The emulator on CUDA (its elementwise pipeline fused by torch.compile) against the CPU emulator."""
from __future__ import annotations

import pytest
import torch

from kernels.ablation import CONVENTIONAL, relative_error_pct
from kernels.emulator import emulate

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)


@pytest.mark.parametrize("fmt", ["bf16", "mxfp8", "mxfp6", "mxfp4"])
@pytest.mark.parametrize("options", [CONVENTIONAL, {}, {"proxy": "u32"}, {"proxy": "u8"}], ids=str)
def test_cuda_emulator_matches_cpu(fmt, options):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 1000, 128, generator=g).to(torch.bfloat16) for _ in range(3))
    cpu, cpu_stats = emulate(q, k, v, fmt, **options)
    gpu, gpu_stats = emulate(q.cuda(), k.cuda(), v.cuda(), fmt, **options)
    assert relative_error_pct(gpu.cpu(), cpu) < 1e-3
    assert cpu_stats == gpu_stats
