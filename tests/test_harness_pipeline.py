"""Pipelines, presets, the fixed latent and self-attention routing, with the real diffusers WanPipeline."""
from __future__ import annotations

import math
import shutil

import numpy as np
import pytest
import torch

from fsbench.errors import FsbenchError
from fsbench.harness.model import pipeline
from fsbench.harness.precision.router import Capture, SelfAttentionRouter
from fsbench.harness.precision.schedule import load as load_schedule
from fsbench.harness.run import dataset, orchestrator
from fsbench.harness.run.presets import build_settings

SMALL = dict(height=32, width=32, num_frames=5, steps=4)


@pytest.fixture(scope="module")
def tiny():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    spec = orchestrator.prepare("tiny", "mlperf", "bf16", None, None, None, SMALL)
    pipe = orchestrator.load_pipeline(spec, torch.device("cpu"))
    pipe.set_progress_bar_config(disable=True)
    yield spec, pipe
    torch.set_num_threads(threads)


def _frames(pipe, spec, router=None) -> np.ndarray:
    return orchestrator.VideoGenerator(pipe, spec, None, router, reuse=False).frames(0)


def test_presets_follow_the_mlperf_reference_and_tiny_runs_small():
    mlperf = build_settings("mlperf", "a14b-synthetic")
    assert (mlperf.height, mlperf.width, mlperf.num_frames, mlperf.fps, mlperf.steps) == (720, 1280, 81, 16, 20)
    assert (mlperf.guidance_scale, mlperf.guidance_scale_2, mlperf.boundary_ratio) == (4.0, 3.0, 0.875)
    assert mlperf.flow_shift == 3.0 and mlperf.negative_prompt.startswith("vivid colors, overexposed")
    assert mlperf.latent_shape == (1, 16, 21, 90, 160) and mlperf.tokens == 75600
    assert build_settings("paper", "a14b-synthetic").flow_shift == 12.0
    tiny = build_settings("mlperf", "tiny")
    assert tiny.height * tiny.width <= 128 * 128 and tiny.steps <= 8
    assert build_settings("mlperf", "tiny", steps=2, height=None).steps == 2


@pytest.mark.parametrize("override, message", [
    (dict(height=100), "multiples of 16"), (dict(num_frames=8), "4k\\+1"), (dict(steps=0), "steps must be 1-")])
def test_bad_overrides_are_user_errors(override, message):
    with pytest.raises(FsbenchError, match=message):
        build_settings("mlperf", "tiny", **override)


def test_scheduler_gives_the_reference_20_step_timesteps():
    # Timesteps for UniPC flow_shift 3.0, 20 steps, from the MLPerf reference notes: 7 high-noise steps.
    pipe_scheduler = pipeline._scheduler(build_settings("mlperf", "a14b-synthetic"))
    pipe_scheduler.set_timesteps(20)
    assert pipe_scheduler.timesteps.tolist() == [999, 982, 964, 944, 923, 900, 875, 848, 818, 786, 750, 710, 667,
                                                 618, 563, 500, 429, 347, 251, 138]


def test_fixed_latent_is_deterministic_and_checked(tmp_path):
    settings = build_settings("mlperf", "tiny", **SMALL)
    a, b = dataset.fixed_latent(settings), dataset.fixed_latent(settings)
    assert a.shape == (1, 16, 2, 4, 4) and torch.equal(a, b)
    assert dataset.latent_sha256(a) == dataset.latent_sha256(b.clone())
    torch.save(a * 2, tmp_path / "latent.pt")
    assert torch.equal(dataset.fixed_latent(settings, tmp_path / "latent.pt"), a * 2)
    torch.save(torch.zeros(1, 16, 21, 90, 160), tmp_path / "big.pt")
    with pytest.raises(FsbenchError, match=r"needs a tensor of shape \(1, 16, 2, 4, 4\)"):
        dataset.fixed_latent(settings, tmp_path / "big.pt")


def test_routed_bf16_self_attention_is_bit_exact_and_cross_attention_untouched(tiny):
    spec, pipe = tiny
    reference = _frames(pipe, spec)
    router = SelfAttentionRouter(spec.schedule)
    router.install(pipe)
    try:
        for model in (pipe.transformer, pipe.transformer_2):
            assert all(type(b.attn1.processor).__name__ == "_RoutedSelfAttention" for b in model.blocks)
            assert all(type(b.attn2.processor).__name__ == "WanAttnProcessor" for b in model.blocks)
        routed = _frames(pipe, spec, router)
    finally:
        router.uninstall()
    assert np.array_equal(routed, reference)
    assert np.array_equal(_frames(pipe, spec), reference)


def test_router_uses_the_schedule_format_of_each_step_expert_and_cfg_pass(tiny):
    spec, pipe = tiny
    seen = []

    def core(call):
        seen.append((router.step, router.expert, router.cfg_pass, call.fmt))
        q, k, v = call.qkv()
        return torch.nn.functional.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v))).transpose(1, 2)

    router = SelfAttentionRouter(load_schedule("hybrid").resolve(4, 2), core=core)
    router.install(pipe)
    try:
        _frames(pipe, spec, router)
    finally:
        router.uninstall()
    # 4 steps x 2 CFG passes x 2 layers; flow_shift 3 puts steps 0-1 on the high-noise expert.
    assert len(seen) == 16
    assert {(s, e, c) for s, e, c, _ in seen} == {(s, "high" if s < 2 else "low", c) for s in range(4) for c in (0, 1)}
    assert {s: f for s, _, _, f in seen} == {0: "mxfp6", 1: "mxfp4", 2: "mxfp4", 3: "mxfp6"}


def test_capture_records_every_call_and_keeps_top_qkv(tiny, tmp_path):
    spec, pipe = tiny
    capture = Capture(tmp_path, save_qkv=2)
    router = SelfAttentionRouter(spec.schedule, capture=capture)
    router.install(pipe)
    try:
        router_frames = _frames(pipe, spec, router)
    finally:
        router.uninstall()
    summary = capture.finish()
    assert router_frames.shape == (5, 32, 32, 3)
    assert summary["calls"] == 16 == len((tmp_path / "calls.jsonl").read_text().splitlines())
    assert [s["step"] for s in summary["per_step"]] == [0, 1, 2, 3]
    saved = torch.load(tmp_path / summary["saved_qkv"][0]["file"])
    assert saved["q"].shape == (1, 8, 2, 32) and saved["layout"] == "BSHD"


def test_a_saved_checkpoint_loads_offline_and_gaps_name_the_fix(tiny, tmp_path):
    spec, pipe = tiny
    pipe.save_pretrained(tmp_path / "ckpt")
    loaded = pipeline.build(str(tmp_path / "ckpt"), spec.settings, torch.device("cpu"))
    loaded.set_progress_bar_config(disable=True)
    assert pipeline.num_layers(str(tmp_path / "ckpt")) == 2
    assert loaded.scheduler.config.flow_shift == 3.0 and loaded.config.boundary_ratio == 0.875
    # mmapped weights take other CPU kernel paths: close, not bit-identical (offline-stack notes)
    assert np.allclose(_frames(loaded, spec), _frames(pipe, spec), atol=2e-2)
    shutil.rmtree(tmp_path / "ckpt" / "transformer_2")
    for f in (tmp_path / "ckpt" / "vae").glob("*.safetensors"):
        f.unlink()
    with pytest.raises(FsbenchError, match=r"has no transformer_2/, vae/\*\.safetensors: run scripts/fetch_model.py"):
        pipeline.build(str(tmp_path / "ckpt"), spec.settings, torch.device("cpu"))


def test_missing_models_are_user_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    settings = build_settings("mlperf", "tiny")
    with pytest.raises(FsbenchError, match="not in the Hugging Face cache: run scripts/fetch_model.py"):
        pipeline.build("Wan-AI/Wan2.2-T2V-A14B-Diffusers", settings, torch.device("cpu"))
    with pytest.raises(FsbenchError, match="not tiny, a14b-synthetic, a checkpoint folder"):
        pipeline.build(str(tmp_path / "nothing" / "here"), settings, torch.device("cpu"))
    with pytest.raises(FsbenchError, match="needs a CUDA GPU"):
        pipeline.build("a14b-synthetic", settings, torch.device("cpu"))


def _generated_run(pipe, spec, folder, schedule: str, keep: int = 4):
    """A run folder as an accuracy pass leaves it: prompt 0's mp4, its kept frames and a manifest; returns the
    pipeline's own uint8 frames."""
    import json

    resolved = load_schedule(schedule).resolve(spec.settings.steps, pipeline.num_layers("tiny"))
    router = SelfAttentionRouter(resolved)
    router.install(pipe)
    try:
        generator = orchestrator.VideoGenerator(pipe, spec, folder, router, reuse=False, keep_frames=keep)
        made = generator.frames(0)
        generator.frames = lambda index: made  # the frames above are those the video and kept frames hold
        generator(0)
    finally:
        router.uninstall()
    (folder / "manifest.json").write_text(json.dumps({
        "model": "tiny", "settings": spec.settings.as_dict(), "schedule": {"name": schedule, "spec": schedule},
        "prompts": {"texts": spec.prompts.texts[:1]}}))
    return (made * 255).astype(np.uint8)


def test_fidelity_reads_the_kept_frames_the_pipeline_made_not_the_lossy_mp4(tiny, tmp_path):
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    from fsbench.eval import fidelity
    from fsbench.eval.runs import Run
    from fsbench.rundir import kept_frames

    spec, pipe = tiny
    reference = _generated_run(pipe, spec, tmp_path / "bf16", "bf16")
    test = _generated_run(pipe, spec, tmp_path / "mxfp4", "mxfp4")
    prompt = spec.prompts.texts[0]
    assert kept_frames(tmp_path / "mxfp4", prompt).is_file()
    result = fidelity.evaluate(Run.open(tmp_path / "mxfp4"), Run.open(tmp_path / "bf16"), ("psnr", "ssim"))
    row = result.rows[0]
    a, b = reference[::4], test[::4]  # the pipeline's frames 0 and 4 of 5
    assert row["source"] == "frames" and row["frames_compared"] == 2
    assert row["psnr"] == pytest.approx(peak_signal_noise_ratio(a, b, data_range=255), abs=1e-9)
    assert row["ssim"] == pytest.approx(np.mean([structural_similarity(x, y, data_range=255, channel_axis=-1)
                                                 for x, y in zip(a, b)]), abs=1e-9)
    floor = result.summary["codec_floor"]["psnr"]["mean"]  # BF16's own mp4 against its frames: the codec's error
    assert floor == pytest.approx(peak_signal_noise_ratio(
        reference[::4], np.stack(fidelity.read_frames(tmp_path / "bf16" / "videos" / f"{prompt}-0.mp4", 4)[0]),
        data_range=255), abs=1e-9)
    assert math.isfinite(floor) and result.summary["source"]["kind"] == "frames"


def test_a_run_keeping_every_frame_is_compared_on_the_same_frames(tiny, tmp_path):
    from click.testing import CliRunner

    from fsbench.eval import fidelity
    from fsbench.eval.runs import Run
    from fsbench.eval.video_io import read_frames
    from fsbench.harness.cli import main

    spec, pipe = tiny
    made = _generated_run(pipe, spec, tmp_path / "all", "mxfp4", keep=1)
    _generated_run(pipe, spec, tmp_path / "bf16", "bf16")
    kept, count = read_frames(tmp_path / "all" / "frames" / f"{spec.prompts.texts[0]}-0.mp4")
    assert count == 5 and np.array_equal(kept, made)  # every frame, bit for bit
    every_fourth = fidelity.evaluate(Run.open(tmp_path / "all"), Run.open(tmp_path / "bf16"), ("psnr",)).rows[0]
    assert every_fourth["source"] == "frames" and every_fourth["frames_compared"] == 2
    refused = CliRunner().invoke(main, ["run", "--model", "tiny", "--keep-all-frames"])
    assert refused.exit_code == 2 and "--keep-all-frames keeps the frames of an accuracy pass" in refused.stderr
