"""`fsbench.apply` on the tiny diffusers pipeline: the videos of `fsbench run` with the same schedule, the schedule
resolved for each call's step count, the routing removable; the MX kernels as diffusers attention backends."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import fsbench
from fsbench.errors import FsbenchError
from fsbench.harness.cli import main
from fsbench.harness.run import orchestrator

SIZE = {"height": 32, "width": 32, "num_frames": 5, "steps": 3}
SMALL = ["--height", "32", "--width", "32", "--frames", "5", "--steps", "3"]
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def spec():
    return orchestrator.prepare("tiny", "mlperf", "bf16", None, 1, None, SIZE)


@pytest.fixture(scope="module")
def pipe(spec):
    pipe = orchestrator.load_pipeline(spec, CPU)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def generate(pipe, spec, steps: int = SIZE["steps"], height: int = SIZE["height"], frames: int = SIZE["num_frames"]):
    """What a user's script does: one plain pipeline call, no callback."""
    s = spec.settings
    latent = spec.latent if (height, frames) == (SIZE["height"], SIZE["num_frames"]) else None
    return pipe(prompt=spec.prompts.texts[0], negative_prompt=s.negative_prompt, height=height, width=height,
                num_frames=frames, num_inference_steps=steps, guidance_scale=s.guidance_scale,
                guidance_scale_2=s.guidance_scale_2, latents=None if latent is None else latent.clone(),
                generator=torch.Generator().manual_seed(0), output_type="np").frames[0]


def test_apply_writes_the_video_of_fsbench_run_with_the_same_schedule(tmp_path, spec, pipe, one_thread):
    from diffusers.utils import export_to_video

    run = tmp_path / "run"
    result = CliRunner().invoke(main, ["run", "--scenario", "Offline", "--mode", "accuracy", "--schedule", "hybrid",
                                       "--num-prompts", "1", "--device", "cpu", "--out", str(run), *SMALL],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    expected = next((run / "videos").glob("*.mp4")).read_bytes()
    with fsbench.apply(pipe, "hybrid", capture=True) as handle:
        frames = generate(pipe, spec)
    ours = tmp_path / "apply.mp4"
    export_to_video(list(frames), str(ours), fps=spec.settings.fps)
    assert ours.read_bytes() == expected
    assert handle.kernels_used == {"mxfp6": "emulate", "mxfp4": "emulate"}
    # hybrid on 3 steps: the first and last step mxfp6, the middle one mxfp4; cond and uncond on 2 layers each
    assert [(row["step"], row["fmt"], row["calls"]) for row in handle.per_step()] == [
        (0, "mxfp6", 4), (1, "mxfp4", 4), (2, "mxfp6", 4)]


def test_each_call_gets_the_schedule_for_its_own_step_count(spec, pipe, one_thread):
    with fsbench.apply(pipe, "hybrid", capture=True) as handle:
        generate(pipe, spec, steps=20, height=16, frames=1)
        generate(pipe, spec, steps=4, height=16, frames=1)
    formats = {}
    for call in handle.calls:
        formats.setdefault(call["video"], {})[call["step"]] = call["fmt"]
    first, second = (formats[video] for video in sorted(formats))
    # the docs' hybrid: mxfp6 for the first and last 3 of 20 steps (1 of 4), mxfp4 between
    assert [first[s] for s in range(20)] == ["mxfp6"] * 3 + ["mxfp4"] * 14 + ["mxfp6"] * 3
    assert [second[s] for s in range(4)] == ["mxfp6", "mxfp4", "mxfp4", "mxfp6"]


def test_remove_gives_back_diffusers_attention(spec, pipe, one_thread):
    from diffusers.models.transformers.transformer_wan import WanAttnProcessor

    before = generate(pipe, spec)
    handle = fsbench.apply(pipe, "mxfp4")
    routed = generate(pipe, spec)
    handle.remove()
    after = generate(pipe, spec)
    assert not np.array_equal(routed, before) and np.array_equal(after, before)
    for model in (pipe.transformer, pipe.transformer_2):
        assert all(type(block.attn1.processor) is WanAttnProcessor for block in model.blocks)
        assert not model._forward_pre_hooks


def test_bad_schedule_or_impl_is_a_clear_error(pipe):
    with pytest.raises(FsbenchError, match="unknown schedule"):
        fsbench.apply(pipe, "fastest")
    with pytest.raises(FsbenchError, match="impl 'cuda'"):
        fsbench.apply(pipe, "hybrid", impl="cuda")
    with pytest.raises(FsbenchError, match="gives no format for step"):
        fsbench.apply(pipe, "mxfp4:0-19")  # checked against the pipeline's default 50 steps
    fsbench.apply(pipe, "mxfp4:0-19", steps=20).remove()


@pytest.fixture
def registry():
    """diffusers' attention-backend registry; its process-wide active backend is restored after the test."""
    dispatch = pytest.importorskip("diffusers.models.attention_dispatch")
    if not hasattr(dispatch, "_AttentionBackendRegistry"):
        pytest.skip("this diffusers has no attention-backend registry")
    active = dispatch._AttentionBackendRegistry._active_backend
    yield dispatch
    dispatch._AttentionBackendRegistry.set_active_backend(active)


def test_kernels_are_diffusers_attention_backends(registry, spec, pipe, one_thread):
    from fsbench.harness.precision import diffusers_backends

    assert diffusers_backends.register() == ["fsbench_mxfp8", "fsbench_mxfp6", "fsbench_mxfp4"]
    q, k, v = (torch.randn(1, 24, 2, 32, generator=torch.Generator().manual_seed(i)) for i in range(3))
    out = registry.dispatch_attention_fn(q, k, v, backend=registry.AttentionBackendName("fsbench_mxfp4"))
    assert torch.equal(out, fsbench.attention(q, k, v, "mxfp4", layout="BSHD"))
    native = torch.nn.functional.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)))
    assert not torch.equal(out, native.transpose(1, 2))

    before = generate(pipe, spec)
    try:
        for model in (pipe.transformer, pipe.transformer_2):
            model.set_attention_backend("fsbench_mxfp4")
        quantized = generate(pipe, spec)
    finally:
        for model in (pipe.transformer, pipe.transformer_2):
            model.reset_attention_backend()
    assert not np.array_equal(quantized, before) and np.abs(quantized - before).mean() < 0.1
    with pytest.raises(ValueError, match="without a mask"):
        registry.dispatch_attention_fn(q, k, v, attn_mask=torch.ones(24, 24, dtype=torch.bool),
                                       backend=registry.AttentionBackendName("fsbench_mxfp8"))
