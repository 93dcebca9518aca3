"""The drop-in for a user's script: `fsbench.sdpa` has SDPA's signature and refuses what the kernels do not
compute; `fsbench.patch` routes SDPA and diffusers' attention through the kernels and restores both on exit; the
emulator announces itself once."""
from __future__ import annotations

import pydoc
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import fsbench
from fsbench.harness.run import orchestrator

ROOT = Path(__file__).resolve().parents[1]
SIZE = {"height": 32, "width": 32, "num_frames": 5, "steps": 2}


def _qkv(shape=(1, 2, 64, 32)):
    return tuple(torch.randn(*shape, generator=torch.Generator().manual_seed(i)) for i in range(3))


def test_sdpa_takes_sdpa_arguments_in_bhsd():
    q, k, v = _qkv()
    assert torch.equal(fsbench.sdpa(q, k, v, fmt="bf16"), F.scaled_dot_product_attention(q, k, v))
    out = fsbench.sdpa(q, k, v, None, 0.0, False, 0.25, fmt="mxfp8")
    assert torch.equal(out, fsbench.attention(q, k, v, "mxfp8", layout="BHSD", sm_scale=0.25))
    native = F.scaled_dot_product_attention(q, k, v, scale=0.25)
    assert out.shape == native.shape and not torch.equal(out, native)
    def error(approx):
        return (approx - native).abs().mean() / native.abs().mean()

    mxfp4 = fsbench.sdpa(q, k, v, scale=0.25, fmt="mxfp4")
    assert error(out) < 0.1 and error(out) < error(mxfp4)  # MX attention of the same scores, not another computation


@pytest.mark.parametrize("kwargs, named", [
    ({"attn_mask": torch.ones(64, 64, dtype=torch.bool)}, "attn_mask"),
    ({"is_causal": True}, "is_causal"),
    ({"dropout_p": 0.1}, "dropout_p"),
    ({"enable_gqa": True}, "enable_gqa"),
])
def test_sdpa_refuses_what_the_kernels_do_not_compute_in_one_line(kwargs, named):
    q, k, v = _qkv()
    with pytest.raises(ValueError) as raised:
        fsbench.sdpa(q, k, v, **kwargs)
    assert named in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.slow
def test_the_emulator_warns_once_per_process():
    code = ("import warnings, torch, fsbench\n"
            "q = torch.randn(1, 2, 32, 32)\n"
            "with warnings.catch_warnings(record=True) as seen:\n"
            "    warnings.simplefilter('always')\n"
            "    fsbench.sdpa(q, q, q); fsbench.sdpa(q, q, q, fmt='mxfp4'); fsbench.attention(q, q, q, 'mxfp6')\n"
            "    fsbench.sdpa(q, q, q, impl='emulate')\n"
            "print(len(seen)); print(seen[0].message)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    count, message = run.stdout.splitlines()
    assert count == "1" and "emulator" in message and "mxfp8" in message


@pytest.fixture(scope="module")
def tiny():
    spec = orchestrator.prepare("tiny", "mlperf", "bf16", None, 1, None, SIZE)
    pipe = orchestrator.load_pipeline(spec, torch.device("cpu"))
    pipe.set_progress_bar_config(disable=True)
    return spec, pipe


def _video(spec, pipe) -> np.ndarray:
    s = spec.settings
    return pipe(prompt=spec.prompts.texts[0], negative_prompt=s.negative_prompt, height=s.height, width=s.width,
                num_frames=s.num_frames, num_inference_steps=s.steps, guidance_scale=s.guidance_scale,
                guidance_scale_2=s.guidance_scale_2, latents=spec.latent.clone(), output_type="np").frames[0]


def test_patch_routes_sdpa_and_restores_it(one_thread):
    q, k, v = _qkv()
    original = F.scaled_dot_product_attention
    mask = torch.rand(64, 64, generator=torch.Generator().manual_seed(3)) > 0.5
    with fsbench.patch("mxfp4"):
        assert torch.equal(F.scaled_dot_product_attention(q, k, v), fsbench.sdpa(q, k, v, fmt="mxfp4"))
        masked = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # not the kernels': the original's
    assert F.scaled_dot_product_attention is original
    assert torch.equal(masked, original(q, k, v, attn_mask=mask))


def test_patch_runs_a_diffusers_pipeline_on_the_kernels_and_gives_its_attention_back(tiny, one_thread):
    dispatch = pytest.importorskip("diffusers.models.attention_dispatch")
    spec, pipe = tiny
    registry = dispatch._AttentionBackendRegistry
    active = registry._active_backend
    before = _video(spec, pipe)
    with fsbench.patch("mxfp4"):
        assert registry._active_backend.value == "fsbench_mxfp4"
        patched = _video(spec, pipe)
    assert registry._active_backend == active
    assert not np.array_equal(patched, before)
    assert np.array_equal(_video(spec, pipe), before)  # leaving the block gave the pipeline its attention back


def test_patch_refuses_bf16_in_one_line():
    with pytest.raises(ValueError, match="MX format"):
        with fsbench.patch("bf16"):
            pass


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(F.cosine_similarity(a.flatten().double(), b.flatten().double(), dim=0))


def _grads(attend, q, k, v, loss):
    """Gradients of `loss(attend(q, k, v))` with respect to q, k and v (fresh leaves)."""
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    loss(attend(*leaves)).backward()
    return [t.grad for t in leaves]


def test_sdpa_backward_is_torch_sdpa_backward_on_the_same_inputs():
    q, k, v = _qkv()
    weight = torch.randn(1, 2, 64, 32, generator=torch.Generator().manual_seed(7))
    def linear(out):
        return (out * weight).sum()  # the same upstream gradient for both: straight-through shows as equality

    ours = _grads(lambda *t: fsbench.sdpa(*t, scale=0.3, fmt="mxfp8", impl="emulate"), q, k, v, linear)
    torchs = _grads(lambda *t: F.scaled_dot_product_attention(*t, scale=0.3), q, k, v, linear)
    for mine, reference in zip(ours, torchs):
        assert mine is not None and _cosine(mine, reference) > 0.9999
        torch.testing.assert_close(mine, reference)
    with torch.no_grad():  # the forward is the kernel's still
        assert torch.equal(fsbench.sdpa(q, k, v, scale=0.3, fmt="mxfp8", impl="emulate"),
                           fsbench.attention(q, k, v, "mxfp8", impl="emulate", layout="BHSD", sm_scale=0.3))


def test_a_linear_before_attention_under_patch_trains_as_under_torch(one_thread):
    torch.manual_seed(0)
    layer = torch.nn.Linear(64, 3 * 64)
    x, target = torch.randn(2, 48, 64), torch.randn(2, 2, 48, 32)

    def weight_grad() -> torch.Tensor:
        layer.zero_grad()
        q, k, v = layer(x).unflatten(-1, (3, 2, 32)).permute(2, 0, 3, 1, 4)  # 3 x (B, H, S, D)
        F.mse_loss(F.scaled_dot_product_attention(q, k, v), target).backward()
        return layer.weight.grad.clone()

    reference = weight_grad()
    with fsbench.patch("mxfp8", impl="emulate"):
        patched = weight_grad()
    assert _cosine(patched, reference) > 0.99


def test_a_gradient_through_a_routed_call_is_torchs():
    q, k, v = _qkv()
    mask = torch.rand(64, 64, generator=torch.Generator().manual_seed(3)) > 0.5
    def attend(*t):
        return F.scaled_dot_product_attention(*t, attn_mask=mask)

    reference = _grads(attend, q, k, v, torch.sum)
    with fsbench.patch("mxfp4", impl="emulate"):
        routed = _grads(attend, q, k, v, torch.sum)
    for mine, theirs in zip(routed, reference):
        assert torch.equal(mine, theirs)


def _shaped(q_shape, k_shape=None, v_shape=None, dtype=torch.float32):
    k_shape = k_shape or q_shape
    return tuple(torch.randn(*shape, generator=torch.Generator().manual_seed(i), dtype=dtype)
                 for i, shape in enumerate((q_shape, k_shape, v_shape or k_shape)))


ROUTED = {  # calls the kernels cannot compute: under patch, torch's SDPA computes them, bit for bit
    "batch 0": (_shaped((0, 2, 8, 32)), {}),
    "no queries": (_shaped((1, 2, 0, 32), (1, 2, 8, 32)), {}),
    "no keys": (_shaped((1, 2, 8, 32), (1, 2, 0, 32)), {}),
    "value head dim": (_shaped((1, 2, 16, 32), (1, 2, 16, 32), (1, 2, 16, 64)), {}),
    "float64": (_shaped((1, 2, 16, 32), dtype=torch.float64), {}),
    "head dim 48": (_shaped((1, 2, 16, 48)), {}),
    "attn_mask": (_shaped((1, 2, 16, 32)), {"attn_mask": torch.arange(16)[:, None] >= torch.arange(16) % 3}),
    "is_causal": (_shaped((1, 2, 16, 32)), {"is_causal": True}),
    "dropout_p": (_shaped((1, 2, 16, 32)), {"dropout_p": 0.5}),
    "enable_gqa": (_shaped((1, 4, 16, 32), (1, 2, 16, 32)), {"enable_gqa": True}),
    "2-D": (_shaped((16, 32)), {}),
}


@pytest.mark.parametrize("case", list(ROUTED))
def test_patch_leaves_every_call_the_kernels_cannot_compute_to_torch(case):
    (q, k, v), kwargs = ROUTED[case]
    torch.manual_seed(0)
    expected = F.scaled_dot_product_attention(q, k, v, **kwargs)
    with fsbench.patch("mxfp8", impl="emulate"):
        torch.manual_seed(0)
        got = F.scaled_dot_product_attention(q, k, v, **kwargs)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    assert torch.equal(got, expected)


def test_patch_leaves_torchs_own_errors_to_torch():
    q, k, v = _shaped((1, 4, 16, 32), (1, 2, 16, 32))  # more query heads without enable_gqa
    with pytest.raises(RuntimeError) as native:
        F.scaled_dot_product_attention(q, k, v)
    with fsbench.patch("mxfp8", impl="emulate"), pytest.raises(RuntimeError) as patched:
        F.scaled_dot_product_attention(q, k, v)
    assert str(patched.value) == str(native.value)


@pytest.mark.parametrize("case, named", [("value head dim", "value head dim"), ("float64", "float64"),
                                         ("head dim 48", "head dim 48"), ("2-D", "fewer than 3 dims")])
def test_sdpa_refuses_shapes_and_dtypes_the_kernels_do_not_take_in_one_line(case, named):
    (q, k, v), _ = ROUTED[case]
    with pytest.raises(ValueError) as raised:
        fsbench.sdpa(q, k, v, fmt="mxfp8", impl="emulate")
    assert named in str(raised.value) and "\n" not in str(raised.value)


COMPUTED = {  # calls the kernels compute: the kernels' output, torch's shape, close to torch's values
    "scale": (_shaped((1, 2, 64, 32)), {"scale": 0.05}),
    "3-D": (_shaped((2, 64, 32)), {}),
    "batch broadcast": (_shaped((2, 2, 64, 32), (1, 2, 64, 32)), {}),
    "5-D": (_shaped((2, 1, 2, 64, 32), (2, 64, 32)), {}),
    "cross attention": (_shaped((1, 2, 32, 32), (1, 2, 64, 32)), {}),
    "float16": (_shaped((1, 2, 64, 32), dtype=torch.float16), {}),
}


@pytest.mark.parametrize("case", list(COMPUTED))
def test_patch_computes_what_the_kernels_can_and_matches_torchs_shapes(case):
    (q, k, v), kwargs = COMPUTED[case]
    expected = F.scaled_dot_product_attention(q, k, v, **kwargs)
    with fsbench.patch("mxfp8", impl="emulate"):
        got = F.scaled_dot_product_attention(q, k, v, **kwargs)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    assert torch.equal(got, fsbench.sdpa(q, k, v, **kwargs, fmt="mxfp8", impl="emulate"))
    assert not torch.equal(got, expected)  # the kernels ran
    error = float((got - expected).abs().mean() / expected.abs().mean())
    assert error < 0.1  # MX attention of random scores: see test_sdpa_takes_sdpa_arguments_in_bhsd


def test_sdpa_on_3d_input_is_the_4d_call_without_its_batch():
    q, k, v = _shaped((2, 64, 32))
    flat = fsbench.sdpa(q, k, v, fmt="mxfp6", impl="emulate")
    assert torch.equal(flat, fsbench.sdpa(q[None], k[None], v[None], fmt="mxfp6", impl="emulate")[0])


@pytest.mark.parametrize("case", ["batch 0", "no queries", "no keys"])
def test_sdpa_of_an_empty_call_is_torchs_empty_result(case):
    (q, k, v), _ = ROUTED[case]
    got = fsbench.sdpa(q, k, v, fmt="mxfp4", impl="emulate")
    assert torch.equal(got, F.scaled_dot_product_attention(q, k, v)) and got.shape == q.shape


BAD = {  # (tensor, index, value): one non-finite element of q, k or v in head 0 of batch 0
    "nan in v": ("v", (0, 0, 5, 3), float("nan")),
    "inf in v": ("v", (0, 0, 5, 3), float("inf")),
    "nan in q": ("q", (0, 0, 7, 1), float("nan")),
    "inf in q": ("q", (0, 0, 7, 1), float("inf")),
    "inf in k": ("k", (0, 0, 9, 2), float("inf")),
    "-inf in k": ("k", (0, 0, 9, 2), float("-inf")),
}


@pytest.mark.parametrize("case", list(BAD))
@pytest.mark.parametrize("fmt", ["mxfp8", "mxfp4"])
def test_a_bad_value_spreads_as_in_torch_and_stays_in_its_head(case, fmt):
    name, index, value = BAD[case]
    qkv = dict(zip("qkv", _shaped((2, 2, 64, 32))))
    qkv[name][index] = value
    expected = F.scaled_dot_product_attention(*qkv.values())
    got = fsbench.sdpa(*qkv.values(), fmt=fmt, impl="emulate")
    assert torch.equal(got.isnan(), expected.isnan()) and torch.equal(got.isinf(), expected.isinf())
    assert not expected[0, 0].isfinite().all()  # the case is a bad one for torch too
    clean = got[:, 1], got[1]  # the other heads: the kernels' finite output
    assert all(t.isfinite().all() for t in clean)
    error = float((got[1] - expected[1]).abs().mean() / expected[1].abs().mean())
    assert error < {"mxfp8": 0.1, "mxfp4": 0.3}[fmt]


@pytest.mark.parametrize("fmt", ["MXFP8", "mxfp5", "fp8"])
def test_an_unknown_format_is_a_value_error_naming_the_formats(fmt):
    q, k, v = _qkv()
    for call in (lambda: fsbench.sdpa(q, k, v, fmt=fmt), lambda: fsbench.attention(q, k, v, fmt),
                 lambda: list(map(lambda f: fsbench.sdpa(q, k, v, fmt=f), [fmt]))):
        with pytest.raises(ValueError, match="mxfp8, mxfp6, mxfp4"):
            call()
    with pytest.raises(ValueError, match="mxfp8, mxfp6, mxfp4"), fsbench.patch(fmt):
        pass


def test_patch_refuses_an_unknown_impl_before_it_switches_anything():
    original = F.scaled_dot_product_attention
    with pytest.raises(ValueError, match="emulate"), fsbench.patch("mxfp8", impl="emulator"):
        pass
    assert F.scaled_dot_product_attention is original


def test_help_on_sdpa_documents_the_call():
    text = pydoc.render_doc(fsbench.sdpa, renderer=pydoc.plaintext)
    for needed in ("attn_mask", "enable_gqa", "fmt", "mxfp6", "straight-through", "NaN", "3-D", "torch's SDPA"):
        assert needed in text, needed


def test_diffusers_attention_under_patch_runs_the_kernels_or_torch_with_torchs_gradient():
    dispatch = pytest.importorskip("diffusers.models.attention_dispatch")
    q, k, v = (t.transpose(1, 2) for t in _shaped((1, 2, 24, 32)))  # diffusers hands backends BSHD
    mask = torch.arange(24)[:, None] >= torch.arange(24) % 5
    def native(*args, **kwargs):
        return F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in args), **kwargs).transpose(1, 2)

    with fsbench.patch("mxfp4", impl="emulate"):
        masked = dispatch.dispatch_attention_fn(q, k, v, attn_mask=mask)
        plain = _grads(dispatch.dispatch_attention_fn, q, k, v, torch.sum)
        out = dispatch.dispatch_attention_fn(q, k, v)
    assert torch.equal(masked, native(q, k, v, attn_mask=mask))
    assert torch.equal(out, fsbench.sdpa(*(t.transpose(1, 2) for t in (q, k, v)), fmt="mxfp4",
                                         impl="emulate").transpose(1, 2))
    for mine, theirs in zip(plain, _grads(native, q, k, v, torch.sum)):
        torch.testing.assert_close(mine, theirs)
