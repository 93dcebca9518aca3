"""The drop-in for a user's script: `fsbench.sdpa` has SDPA's signature and refuses what the kernels do not
compute; `fsbench.patch` routes SDPA and diffusers' attention through the kernels and restores both on exit; the
emulator announces itself once."""
from __future__ import annotations

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
    with pytest.raises(fsbench.errors.FsbenchError, match="MX format"):
        with fsbench.patch("bf16"):
            pass
