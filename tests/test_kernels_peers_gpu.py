"""The peer rows against BF16 SDPA, and the sweep's interleaved timing, on the H200 (each peer only where its
wheel from scripts/build_peers.sh is installed)."""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("needs a Hopper (sm_90) CUDA GPU", allow_module_level=True)

from fsbench.kernels.tools import peers, sweep  # noqa: E402

PEERS = {"sage2-fp8": (peers.sage2_fp8_attention, peers.sage2_missing()),
         "fa3-fp8": (peers.fa3_fp8_attention, peers.fa3_missing())}


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


@pytest.mark.parametrize("name", sorted(PEERS))
@pytest.mark.parametrize("s", [4096, 1000])
def test_each_peer_is_close_to_bf16_attention_but_not_bf16_itself(name, s):
    fn, missing = PEERS[name]
    if missing:
        pytest.skip(f"{name} {missing}")
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(1, 4, s, 128, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    out = fn(q, k, v)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    assert out.shape == ref.shape and out.dtype == torch.bfloat16 and torch.isfinite(out).all()
    assert 1e-3 < _rel(out, ref) < 0.1  # quantized operands: an exact match would mean BF16 ran


def test_interleaved_timing_gives_each_row_one_call_per_repeat():
    calls = []

    def row(tag):
        def run(q, k, v):
            calls.append(tag)
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return run

    g = torch.Generator(device="cuda").manual_seed(0)
    inputs = [tuple(torch.randn(1, 2, 512, 128, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
              for _ in range(3)]
    times = sweep.interleaved_ms([row("a"), row("b")], [inputs, inputs], warmup=1, repeats=5)
    assert [len(t) for t in times] == [5, 5] and all(ms > 0 for t in times for ms in t)
    assert calls == ["a", "b"] + ["a", "b"] * 5  # the warm-ups, then round-robin
