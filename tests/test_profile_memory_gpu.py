"""The profile's GPU memory on a CUDA GPU: the memory held when a video starts and the peak of each phase, checked
against what the phases must hold at least (the weights, and for the VAE decode the decoded fp32 video too)."""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from fsbench.harness.measure.profile import MEMORY_PHASES, Profiler  # noqa: E402
from fsbench.harness.measure.profile_report import format_table, summarize  # noqa: E402
from fsbench.harness.precision.router import SelfAttentionRouter  # noqa: E402
from fsbench.harness.run import orchestrator  # noqa: E402

from weight_bytes import weight_bytes  # noqa: E402

SHAPE = dict(height=64, width=64, num_frames=9, steps=2)


def test_each_phase_peak_holds_the_weights_and_the_decode_peak_the_decoded_video_too():
    spec = orchestrator.prepare("tiny", "mlperf", "bf16:*", None, None, None, SHAPE)
    pipe = orchestrator.load_pipeline(spec, torch.device("cuda"))
    pipe.set_progress_bar_config(disable=True)
    router = SelfAttentionRouter(spec.schedule)
    router.install(pipe)
    profiler = Profiler(pipe.device)
    profiler.install(pipe, router)
    try:
        generator = orchestrator.VideoGenerator(pipe, spec, None, router, reuse=False, profiler=profiler)
        with profiler.video(0):
            frames = generator.frames(0)
    finally:
        profiler.uninstall()
        router.uninstall()
    weights = weight_bytes(pipe.text_encoder, pipe.transformer, pipe.transformer_2, pipe.vae)
    video_fp32 = 3 * SHAPE["num_frames"] * SHAPE["height"] * SHAPE["width"] * 4
    assert frames.shape[-4:] == (SHAPE["num_frames"], SHAPE["height"], SHAPE["width"], 3)
    summary = summarize(profiler)
    phases = summary["peak_gpu_memory_by_phase_bytes"]
    assert tuple(phases) == MEMORY_PHASES
    assert summary["gpu_memory_held_bytes"] >= weights
    assert min(phases.values()) >= weights
    assert phases["vae_decode"] >= weights + video_fp32
    assert summary["peak_gpu_memory_bytes"] == max(phases.values())
    assert profiler.videos[0]["peak_gpu_memory_bytes"] == summary["peak_gpu_memory_bytes"]
    assert "peak by phase: text_encode " in format_table(summary)
