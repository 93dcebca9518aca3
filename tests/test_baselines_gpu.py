"""The BF16 baselines (FlashAttention-3 BF16, cuDNN's BF16 graph) and the grouped-head FP8 rows against BF16 SDPA,
and the kernel-alone profile, on an sm_90 GPU (each row only where its package is installed)."""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("needs a Hopper (sm_90) CUDA GPU", allow_module_level=True)

from fsbench.kernels.tools import cudnn_bf16, cudnn_fp8, kernel_time, peers  # noqa: E402

FRONTEND = None if cudnn_fp8.available() else "needs cudnn-frontend"
ROWS = {"fa3-bf16": (peers.fa3_bf16_attention, peers.fa3_missing(), 0.0, 1e-2),
        "cudnn-bf16": (cudnn_bf16.cudnn_bf16_attention, FRONTEND, 0.0, 1e-2),
        "fa3-fp8": (peers.fa3_fp8_attention, peers.fa3_missing(), 1e-3, 0.1),
        "cudnn-fp8": (cudnn_fp8.cudnn_fp8_attention, FRONTEND, 1e-3, 0.1)}


def _inputs(heads: int, kv_heads: int, s: int) -> tuple[torch.Tensor, ...]:
    """Fresh standard normal BF16, BSHD in memory as the pipeline's (indexed BHSD)."""
    g = torch.Generator(device="cuda").manual_seed(torch.randint(0, 2**31, ()).item())
    return tuple(torch.randn(1, s, h, 128, device="cuda", dtype=torch.bfloat16, generator=g).transpose(1, 2)
                 for h in (heads, kv_heads, kv_heads))


@pytest.mark.parametrize("name", sorted(ROWS))
@pytest.mark.parametrize("heads, kv_heads, s", [(8, 8, 1000), (16, 2, 4096)])
def test_each_row_matches_sdpa_with_grouped_or_full_heads(name, heads, kv_heads, s):
    fn, missing, low, high = ROWS[name]
    if missing:
        pytest.skip(f"{name} {missing}")
    q, k, v = _inputs(heads, kv_heads, s)
    out = fn(q, k, v)
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), enable_gqa=True)
    rel = ((out.float() - ref).norm() / ref.norm()).item()
    assert out.shape == q.shape and out.dtype == torch.bfloat16 and torch.isfinite(out).all()
    assert low <= rel < high  # BF16 rows within BF16 rounding; FP8 rows off by their quantization, never exact


def test_cudnn_rows_give_the_same_attention_with_and_without_the_softmax_statistics():
    if FRONTEND:
        pytest.skip(FRONTEND)
    q, k, v = _inputs(16, 2, 2048)
    for fn in (cudnn_bf16.cudnn_bf16_attention, cudnn_fp8.cudnn_fp8_attention):
        plain, training = fn(q, k, v).float(), fn(q, k, v, stats=True).float()
        assert ((plain - training).norm() / plain.norm()).item() < 1e-2  # the training graph may pick its own kernel


def test_the_kernel_alone_is_the_longest_kernel_of_the_call_and_faster_than_the_call():
    q, k, v = _inputs(16, 16, 4096)
    flops = 4 * 16 * 4096 * 4096 * 128

    def call(q, k, v):  # attention and a cast after it: two kernels, attention the longer
        return torch.nn.functional.scaled_dot_product_attention(q, k, v).float()

    found = kernel_time.kernel_alone(call, [(q, k, v)], 4, flops)
    assert found["kernel_launches"] == 4 and found["kernels_per_call"] >= 2
    assert "cast" not in found["kernel"].lower() and "copy" not in found["kernel"].lower()
    assert 0 < found["kernel_ms"] < found["busy_ms_per_call"]
    assert found["kernel_tflops"] == pytest.approx(flops / found["kernel_ms"] / 1e9)


def test_the_registrys_fa3_runs_bf16_attention_on_bshd_projections_as_the_router_passes_them():
    from fsbench import kernels
    from fsbench.kernels import registry

    if peers.fa3_missing():
        pytest.skip(f"fa3 {peers.fa3_missing()}")
    q, k, v = (t.transpose(1, 2) for t in _inputs(8, 8, 1000))  # BSHD, as the pipeline's projections
    out = kernels.attention(q, k, v, "bf16", impl=registry.FA3, layout="BSHD")
    ref = kernels.attention(q, k, v, "bf16", impl=registry.SDPA, layout="BSHD")
    assert out.shape == q.shape and ((out.float() - ref.float()).norm() / ref.float().norm()).item() < 1e-2
