"""Wan's q/k prologue on the H200: the `norm_rope` kernel against torch's prologue at A14B's size,
`attention_prologue` against the emulator and SDPA of the torch reference (needs an sm_90 GPU)."""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("needs a Hopper (sm_90) CUDA GPU", allow_module_level=True)

from test_kernels_prologue import make_case  # noqa: E402

from fsbench import kernels  # noqa: E402
from fsbench.kernels.hopper import launch  # noqa: E402
from fsbench.kernels.prologue import apply  # noqa: E402
from fsbench.kernels.reference.emulator import emulate  # noqa: E402

A14B = (1, 75600, 40, 128)


def _cuda_case(b: int, s: int, h: int, d: int, rope: bool = True):
    return make_case(b, s, h, d, torch.bfloat16, rope, device="cuda")


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def test_norm_rope_kernel_is_torchs_prologue_but_for_rare_one_ulp_steps_at_a14b_size():
    """Against `apply` on the GPU, whose RMSNorm is torch's fused CUDA kernel (its own reduction order and
    rsqrt): a token's inverse RMS may differ in its last float32 bits, flipping the rounding of a rare value next
    to a boundary by one ulp, at most two ulps of its channel pair's magnitude after the rotation (the CPU test's
    reasoning)."""
    xq, xk, _, pro = _cuda_case(*A14B)
    for got, want in zip(launch.norm_rope(xq, xk, pro), apply(xq, xk, pro)):
        assert got.shape == want.shape and got.is_contiguous()
        pair = want.float().unflatten(-1, (-1, 2)).norm(dim=-1).repeat_interleave(2, dim=-1)
        ulp = torch.exp2(torch.floor(torch.log2(pair))) * torch.finfo(torch.bfloat16).eps
        assert ((got.float() - want.float()).abs() / ulp).max().item() <= 2.0
        assert (got != want).float().mean().item() < 1e-3


@pytest.mark.parametrize("engine", ["triton", "gluon"])
@pytest.mark.parametrize("s", [4096, 4000])
def test_attention_prologue_on_hopper_matches_the_emulator_of_the_reference_prologue(engine, s):
    xq, xk, v, pro = _cuda_case(1, s, 2, 128)
    out = kernels.attention_prologue(xq, xk, v, pro, "mxfp8", impl=engine)
    q, k = apply(xq, xk, pro)
    ref, _ = emulate(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), "mxfp8")
    assert out.shape == v.shape and out.dtype == torch.bfloat16
    assert _rel(out, ref.transpose(1, 2)) < 1e-2  # the bound tests/test_triton_gpu.py holds the kernels to


def test_attention_prologue_in_bf16_matches_sdpa_of_the_reference_prologue():
    xq, xk, v, pro = _cuda_case(1, 4000, 2, 128)
    out = kernels.attention_prologue(xq, xk, v, pro, "bf16")
    q, k = apply(xq, xk, pro)
    ref = torch.nn.functional.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)))
    assert out.shape == v.shape and out.dtype == torch.bfloat16
    assert _rel(out, ref.transpose(1, 2)) < 5e-3  # q, k differ in rare last bits; bf16 output rounding ~2e-3
