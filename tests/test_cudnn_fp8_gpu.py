"""cuDNN's FP8 attention (the bench's cudnn-fp8 row) against BF16 SDPA on the H200 (needs cudnn-frontend)."""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("needs a Hopper (sm_90) CUDA GPU", allow_module_level=True)
pytest.importorskip("cudnn", reason="needs the cudnn-frontend package (pip install nvidia-cudnn-frontend)")

from fsbench.kernels.tools.cudnn_fp8 import cudnn_fp8_attention  # noqa: E402


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


@pytest.mark.parametrize("s", [4096, 1000])
def test_cudnn_fp8_is_close_to_bf16_attention(s):
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(1, 4, s, 128, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    out = cudnn_fp8_attention(q, k, v)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    assert out.shape == ref.shape and out.dtype == torch.bfloat16 and torch.isfinite(out).all()
    assert _rel(out, ref) < 0.1
    assert _rel(out, ref) > 1e-3  # FP8 operands and output: an exact match would mean BF16 ran


def test_bshd_views_give_the_same_attention_as_contiguous_bhsd():
    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v = (torch.randn(1, 2048, 4, 128, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    views = [x.transpose(1, 2) for x in (q, k, v)]
    out = cudnn_fp8_attention(*views)
    ref = cudnn_fp8_attention(*(x.contiguous() for x in views))
    assert _rel(out, ref) < 1e-2
