"""Wan's q/k prologue (RMSNorm over all heads, interleaved RoPE): the torch reference against what the harness
ran before, the `norm_rope` Triton kernel in the interpreter against it, and `attention_prologue`."""
from __future__ import annotations

import pytest
import torch

from fsbench import kernels
from fsbench.kernels.prologue import Prologue, apply

from triton_interpreter import RNE_BF16, RNE_FP8, run_in_interpreter


def wan_tables(s: int, d: int, theta: float = 10000.0, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (1, S, 1, D) float32 as Wan's rotary embedding lays them out: each angle repeated for the two
    channels of its pair, computed in float64."""
    freqs = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64, device=device) / d)
    angles = torch.outer(torch.arange(s, dtype=torch.float64, device=device), freqs).repeat_interleave(2, dim=-1)
    return angles.cos().float()[None, :, None], angles.sin().float()[None, :, None]


def make_case(b: int, s: int, h: int, d: int, dtype: torch.dtype, rope: bool = True, seed: int = 0,
              device: str = "cpu"):
    """Projections xq, xk as (B, S, H, D) views of (B, S, H*D), v (B, S, H, D) and a prologue with random weights."""
    g = torch.Generator(device).manual_seed(seed)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, device=device)

    xq, xk = ((randn(b, s, h * d) * 4).to(dtype).unflatten(2, (h, d)) for _ in range(2))
    v = randn(b, s, h, d).to(dtype)
    wq, wk = ((torch.rand(h * d, generator=g, device=device) + 0.5).to(dtype) for _ in range(2))
    cos, sin = wan_tables(s, d, device=device) if rope else (None, None)
    return xq, xk, v, Prologue(wq, wk, 1e-6, cos, sin)


def _diffusers_q_k(xq: torch.Tensor, xk: torch.Tensor, pro: Prologue, monkeypatch) -> tuple[torch.Tensor, ...]:
    """q and k as diffusers' own `WanAttnProcessor` makes them from the projections xq and xk: a `WanAttention`
    whose projections are the identity and whose norms carry the prologue's weights, its attention call
    intercepted."""
    from diffusers.models.transformers import transformer_wan

    _, _, h, d = xq.shape
    attn = transformer_wan.WanAttention(h * d, heads=h, dim_head=d, eps=pro.eps).to(xq.dtype)
    with torch.no_grad():
        for proj in (attn.to_q, attn.to_k, attn.to_v):
            proj.weight.copy_(torch.eye(h * d))
            proj.bias.zero_()
        attn.norm_q.weight.copy_(pro.wq)
        attn.norm_k.weight.copy_(pro.wk)
    seen = []
    monkeypatch.setattr(transformer_wan, "dispatch_attention_fn", lambda q, k, v, **_: seen.append((q, k)) or q)
    with torch.no_grad():
        for x in (xq, xk):
            transformer_wan.WanAttnProcessor()(attn, x.flatten(2), rotary_emb=(pro.cos, pro.sin))
    return seen[0][0], seen[1][1]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_apply_equals_diffusers_wan_processor_byte_for_byte(dtype, monkeypatch):
    xq, xk, _, pro = make_case(2, 37, 3, 64, dtype)
    for got, want in zip(apply(xq, xk, pro), _diffusers_q_k(xq, xk, pro, monkeypatch)):
        assert got.dtype == dtype and got.shape == xq.shape
        assert torch.equal(got.view(torch.int16), want.view(torch.int16))


def test_torchs_rms_norm_of_bf16_rounds_once_after_the_weight_as_the_kernels_do():
    """The rounding the kernels mirror (`kernels.hopper.norm_rope`): torch upcasts x to float32, multiplies by the
    inverse RMS and by the weight in float32 and rounds once; rounding x * rstd to bf16 before the weight (an
    older composite) would differ in a large share of the values, the reduction order in a rare few."""
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(64, 1024, generator=g) * 3).bfloat16()
    w = (torch.rand(1024, generator=g) + 0.5).bfloat16()
    got = torch.nn.functional.rms_norm(x, (1024,), w, 1e-6)
    rstd = 1.0 / torch.sqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)
    once, twice = ((x.float() * rstd) * w.float()).bfloat16(), (x.float() * rstd).bfloat16() * w
    assert (got != once).float().mean() < 1e-3 < 0.05 < (got != twice).float().mean()


def test_apply_without_rope_is_the_norm_alone_and_bad_shapes_are_refused():
    xq, xk, _, pro = make_case(1, 16, 2, 32, torch.bfloat16, rope=False)
    q, _ = apply(xq, xk, pro)
    want = torch.nn.functional.rms_norm(xq.flatten(2), (64,), pro.wq, pro.eps).unflatten(2, (2, 32))
    assert torch.equal(q, want)
    with pytest.raises(ValueError, match="H\\*D"):
        apply(xq[:, :, :1], xk[:, :, :1], pro)
    _, _, _, roped = make_case(1, 8, 2, 32, torch.bfloat16)
    with pytest.raises(ValueError, match="RoPE tables"):
        apply(xq, xk, roped)  # tables for 8 positions, 16 tokens
    with pytest.raises(ValueError, match="cos and sin"):
        Prologue(pro.wq, pro.wk, 1e-6, roped.cos, None)


@pytest.mark.parametrize("fmt", ["bf16", "mxfp8"])
def test_attention_prologue_on_the_cpu_is_attention_of_the_reference_prologue(fmt):
    xq, xk, v, pro = make_case(1, 200, 2, 128, torch.bfloat16)
    got = kernels.attention_prologue(xq, xk, v, pro, fmt)
    want = kernels.attention(*apply(xq, xk, pro), v, fmt)
    assert got.shape == v.shape and got.dtype == torch.bfloat16
    assert torch.equal(got, want)
    emulated = kernels.attention_prologue(xq, xk, v, pro, fmt, impl="emulate")
    assert torch.equal(emulated, kernels.attention(*apply(xq, xk, pro), v, fmt, impl="emulate"))


_KERNELS_SCRIPT = RNE_FP8 + RNE_BF16 + '''
import json, sys
sys.path.insert(0, sys.argv[1])
from test_kernels_prologue import make_case
from fsbench.kernels.hopper import launch
from fsbench.kernels.prologue import apply

b, s, h, d, dtype, rope = json.loads(sys.argv[2])
dtype = getattr(torch, dtype)
xq, xk, v, pro = make_case(b, s, h, d, dtype, rope)
out = {}
q, k = launch.norm_rope(xq, xk, pro)
for name, got, want in (("q", q, apply(xq, xk, pro)[0]), ("k", k, apply(xq, xk, pro)[1])):
    pair = want.float().unflatten(-1, (-1, 2)).norm(dim=-1).repeat_interleave(2, dim=-1)  # |rotated pair|
    ulp = torch.exp2(torch.floor(torch.log2(pair))) * torch.finfo(dtype).eps
    out[name] = {"mismatches": int((got != want).sum()), "count": got.numel(),
                 "max_pair_ulps": ((got.float() - want.float()).abs() / ulp).max().item(),
                 "contiguous": got.is_contiguous(), "shape": list(got.shape)}
print(json.dumps(out))
'''


def _run_kernels(tmp_path, case: list) -> dict:
    import json
    from pathlib import Path

    return run_in_interpreter(tmp_path, _KERNELS_SCRIPT, str(Path(__file__).parent), json.dumps(case))


@pytest.mark.parametrize("case", [[1, 300, 2, 128, "bfloat16", True],
                                  [2, 130, 3, 128, "bfloat16", False],
                                  [1, 200, 3, 128, "float16", True]],
                         ids=["bf16-s300-h2", "bf16-b2-s130-h3-norope", "fp16-s200-h3"])
@pytest.mark.slow
def test_norm_rope_kernel_equals_the_torch_prologue_but_for_rare_one_ulp_steps(tmp_path, case):
    """`norm_rope` in the interpreter against `prologue.apply`: the kernel sums x^2 over a token's channels in its
    own order (a tree over each chunk of channels), torch in another, so a token's inverse RMS may differ in its
    last float32 bit, and a normed value next to a rounding boundary then rounds to its 16-bit neighbour: one ulp
    of the value, hence at most one ulp of its channel pair's magnitude m after the rotation, plus the rotated
    value's own rounding (under one ulp of m): at most 2 ulps of m. Measured (these cases and S = 1024 with 2, 3
    and 8 heads): at most 4.1e-5 of the elements differ, by at most 1 ulp of m; pinned at 1e-4 and 2 ulps."""
    res = _run_kernels(tmp_path, case)
    b, s, h, d = case[:4]
    for name in "qk":
        got = res[name]
        assert got["shape"] == [b, s, h, d] and got["contiguous"]
        assert got["max_pair_ulps"] <= 2.0, got
        assert got["mismatches"] <= 1e-4 * got["count"], got
