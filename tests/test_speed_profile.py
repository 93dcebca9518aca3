"""The latency breakdown (`--profile`), the negative-prompt cache and the speed options on the tiny model."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from fsbench.errors import FsbenchError
from fsbench.harness.cli import main
from fsbench.harness.measure.profile import Profiler
from fsbench.harness.measure.profile_report import format_table, summarize
from fsbench.harness.model import options as speed
from fsbench.harness.precision.router import SelfAttentionRouter
from fsbench.harness.run import orchestrator
from fsbench.rundir import load_manifest

SMALL = dict(height=32, width=32, num_frames=5, steps=2)


@pytest.fixture(scope="module")
def tiny():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    spec = orchestrator.prepare("tiny", "mlperf", "mxfp8:0;bf16:*", None, None, None, SMALL)
    pipe = orchestrator.load_pipeline(spec, torch.device("cpu"))
    pipe.set_progress_bar_config(disable=True)
    yield spec, pipe
    torch.set_num_threads(threads)


def _frames(pipe, spec, router, profiler=None, index=0) -> np.ndarray:
    generator = orchestrator.VideoGenerator(pipe, spec, None, router, reuse=False, profiler=profiler)
    with generator.profiler.video(index):
        return generator.frames(index)


def test_profile_splits_every_step_and_leaves_the_video_unchanged(tiny):
    spec, pipe = tiny
    router = SelfAttentionRouter(spec.schedule)
    router.install(pipe)
    profiler = Profiler(pipe.device)
    try:
        reference = _frames(pipe, spec, router)
        profiler.install(pipe, router)
        profiled = _frames(pipe, spec, router, profiler)
    finally:
        profiler.uninstall()
        router.uninstall()
    assert np.array_equal(profiled, reference)
    assert type(pipe.transformer.blocks[0].attn2.processor).__name__ == "WanAttnProcessor"
    assert "decode" not in vars(pipe.vae) and router.core is None
    video = profiler.videos[0]
    assert [(s["step"], s["fmt"]) for s in video["steps"]] == [(0, "mxfp8"), (1, "bf16")]
    for step in video["steps"]:
        parts = step["self_attention_s"] + step["cross_attention_s"] + step["gemm_s"]
        assert 0 < parts < step["forwards_s"] <= step["total_s"]
        assert step["rest_s"] == pytest.approx(step["total_s"] - parts)
    assert video["text_encode_s"] > 0 and video["vae_decode_s"] > 0 and video["postprocess_s"] > 0
    summary = summarize(profiler, {"latency_mean_ns": 1e9 * (video["wall_s"] + 0.01)})
    assert set(summary["step_by_format"]) == {"mxfp8", "bf16"}
    assert summary["loadgen_overhead_s"] == pytest.approx(0.01)
    assert "| self-attention share |" in format_table(summary)


def test_clock_samples_count_for_self_attention_or_the_rest_of_the_loop_by_when_they_were_taken(tiny):
    """The profiler's spans mapped to host time: samples in the middle of self-attention calls, between calls and
    before the loop land in their parts (the samples are made here; nvidia-smi takes them on a GPU)."""
    spec, pipe = tiny
    router = SelfAttentionRouter(spec.schedule)
    router.install(pipe)
    profiler = Profiler(pipe.device)
    try:
        profiler.install(pipe, router)
        _frames(pipe, spec, router, profiler)
    finally:
        profiler.uninstall()
        router.uninstall()
    when = lambda mark: profiler.clock.when(profiler.anchor, mark)  # noqa: E731
    calls = sorted((when(s), when(e)) for (_, part), pairs in profiler._spans.items() if part == "self_attention"
                   for s, e in pairs)
    assert len(calls) == 2 * 2 * len(pipe.transformer.blocks)  # two steps, two CFG passes
    sample = lambda t, mhz: {"t": t, "clock_mhz": mhz, "power_w": mhz / 2, "temp_c": 50.0,  # noqa: E731
                             "power_cap": mhz == 1000, "thermal": False}
    samples = ([sample((a + b) / 2, 1000) for a, b in calls]
               + [sample((b + a2) / 2, 2000) for (_, b), (a2, _) in zip(calls, calls[1:]) if a2 > b]
               + [sample(calls[0][0] - 3600, 3000)])
    split = profiler.clock_split(samples)
    assert split["self_attention"]["clock_mhz"] == 1000 and split["self_attention"]["samples"] == len(calls)
    assert split["self_attention"]["power_cap_share"] == 1.0
    assert split["rest_of_loop"]["clock_mhz"] == 2000 and split["rest_of_loop"]["samples"] == len(calls) - 1
    profiler.videos[0]["clock"] = split
    table = format_table(summarize(profiler))
    assert f"| self attention | 1000 | 500 | 50 | {len(calls)} | 100% |" in table
    assert "| rest of loop | 2000 | 1000 | 50 |" in table


def test_negative_prompt_is_encoded_once_per_pipeline(tiny):
    spec, pipe = tiny
    s = spec.settings
    calls = []
    handle = pipe.text_encoder.register_forward_hook(lambda *_: calls.append(1))
    try:
        plain = pipe.encode_prompt(spec.prompts.texts[1], s.negative_prompt, True, max_sequence_length=512)
        speed.cache_negative_prompt(pipe)
        speed.cache_negative_prompt(pipe)  # idempotent
        calls.clear()
        first = pipe.encode_prompt(spec.prompts.texts[0], s.negative_prompt, True, max_sequence_length=512)
        second = pipe.encode_prompt(spec.prompts.texts[1], s.negative_prompt, True, max_sequence_length=512)
    finally:
        handle.remove()
        del pipe.encode_prompt
    assert len(calls) == 3  # two prompts, one negative prompt
    assert torch.equal(second[0], plain[0]) and torch.equal(second[1], plain[1])
    assert second[1] is first[1]


def test_compiled_blocks_hold_attention_with_one_graph_per_format_and_keep_the_video(tiny):
    """Regional compilation with fullgraph=True (dynamo, eager backend: no C++ toolchain needed) with a
    per-step schedule of two formats: the attention op sits inside the block's graph, the format (a string
    argument) costs one graph per format and neither the layer nor the step recompiles anything (A14B has 40
    layers, past dynamo's recompile limit of 8); the profiler's timer still sees every call and the video is
    the eager one."""
    from torch._dynamo.utils import counters

    spec, pipe = tiny
    router = SelfAttentionRouter(spec.schedule)
    router.install(pipe)
    reference = _frames(pipe, spec, router)
    torch._dynamo.reset()
    counters.clear()
    for expert in (pipe.transformer, pipe.transformer_2):
        expert.compile_repeated_blocks(backend="eager", fullgraph=True, dynamic=False)
    profiler = Profiler(pipe.device)
    try:
        profiler.install(pipe, router)
        compiled = _frames(pipe, spec, router, profiler)
        graphs = counters["stats"]["unique_graphs"]
        with torch._dynamo.config.patch(error_on_recompile=True):
            again = _frames(pipe, spec, router)
    finally:
        profiler.uninstall()
        router.uninstall()
        for expert in (pipe.transformer, pipe.transformer_2):
            for block in expert.blocks:
                block._compiled_call_impl = None
        torch._dynamo.reset()
    assert 1 < len(spec.schedule.formats) and graphs == len(spec.schedule.formats)
    assert counters["graph_break"] == {}
    assert not profiler.fine and "gemm_s" not in profiler.videos[0]["steps"][0]
    assert all(step["self_attention_s"] > 0 for step in profiler.videos[0]["steps"])
    assert np.allclose(compiled, reference, atol=1e-5) and np.array_equal(again, compiled)


def test_speed_options_are_checked_and_name_the_run_folder():
    assert speed.SpeedOptions().slug == ""
    assert speed.SpeedOptions(gemm="fp8", vae="bf16").slug == "-fp8gemm-vaebf16"
    assert speed.SpeedOptions(gemm="fp8", offload=True).slug == "-fp8gemm"  # offload keeps the numerics
    with pytest.raises(FsbenchError, match="--gemm"):
        speed.SpeedOptions(gemm="fp4")


def test_run_profile_writes_the_table_and_the_manifest_records_the_speed_options(tmp_path, one_thread):
    run = tmp_path / "run"
    result = CliRunner().invoke(main, ["run", "--count", "1", "--time", "0", "--profile", "--warm-up",
                                       "--schedule", "mxfp4:0;bf16:*", "--gemm", "fp8",
                                       "--out", str(run), "--height", "32", "--width", "32", "--frames", "5",
                                       "--steps", "2"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    summary = load_manifest(run)["results"]["SingleStream"]["performance"]
    assert summary["speed"]["gemm"] == "fp8" and summary["speed"]["fp8"]["linears_converted"] == 40
    assert summary["speed"]["compile"] is False and summary["speed"]["negative_prompt_cache"]
    assert summary["profile"]["videos"] == 1 and 0 < summary["profile"]["harness_overhead_share"] < 1
    table = (run / "profile.md").read_text()
    assert "| vae_decode |" in table and "| bf16 | 1 |" in table and "| mxfp4 | 1 |" in table
    assert json.loads((run / "profile.json").read_text())["videos"][0]["steps"][1]["step"] == 1
    assert summary["profile"]["energy"]["joules_per_video"] is None
    assert summary["warm_up"]["formats"] == ["bf16", "mxfp4"]
    assert summary["profile"]["videos"] == 1  # the warm-up is neither profiled nor a LoadGen sample
    assert "Energy: not measured (no GPU energy on a cpu device)." in table


@pytest.mark.slow
def test_run_compile_with_inductor_makes_the_eager_video(tmp_path, one_thread):
    """`fsbench run --compile` (inductor's CPU backend, the attention op inside the blocks' graphs) on a
    two-format schedule shaped like the hybrid one (mxfp6 then mxfp4) compiles one graph per format and writes
    the eager run's video: identical mp4 bytes, or decoded frames within one level where inductor's fused
    elementwise code rounds a float differently from eager torch."""
    from torch._dynamo.utils import counters

    from fsbench.eval.video_io import read_frames

    videos = []
    torch._dynamo.reset()
    counters.clear()
    for name, extra in (("eager", []), ("compiled", ["--compile"])):
        run = tmp_path / name
        result = CliRunner().invoke(main, ["run", "--count", "1", "--time", "0", "--schedule", "mxfp6:0;mxfp4:*",
                                           "--out", str(run), "--height", "32", "--width", "32", "--frames", "5",
                                           "--steps", "2", *extra], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        videos.append(sorted((run / "videos").iterdir())[0])
    assert load_manifest(tmp_path / "compiled")["results"]["SingleStream"]["performance"]["speed"]["compile"]
    assert counters["stats"]["unique_graphs"] == 2 and counters["graph_break"] == {}
    torch._dynamo.reset()
    eager, compiled = (read_frames(v)[0].astype(int) for v in videos)
    assert videos[0].read_bytes() == videos[1].read_bytes() or np.abs(eager - compiled).max() <= 1


@pytest.mark.slow
def test_capture_records_every_call_inside_compiled_blocks_as_it_does_eagerly(tiny, tmp_path):
    """The op's body runs eagerly inside the graphs, so a Capture sees each call's step, layer, expert, CFG
    pass, format and statistics with compiled blocks exactly as without them."""
    from fsbench.harness.precision.router import Capture

    spec, pipe = tiny
    records = []
    for compiled in (False, True):
        capture = Capture(tmp_path / str(compiled))
        router = SelfAttentionRouter(spec.schedule, capture=capture)
        router.install(pipe)
        if compiled:
            torch._dynamo.reset()
            for expert in (pipe.transformer, pipe.transformer_2):
                expert.compile_repeated_blocks(backend="eager", fullgraph=True, dynamic=False)
        try:
            _frames(pipe, spec, router)
        finally:
            router.uninstall()
            for expert in (pipe.transformer, pipe.transformer_2):
                for block in expert.blocks:
                    block._compiled_call_impl = None
            torch._dynamo.reset()
        records.append(capture.records)
    eager, compiled = records
    layers = len(pipe.transformer.blocks)
    assert len(eager) == spec.settings.steps * 2 * layers  # both CFG passes of every step
    assert [r["layer"] for r in eager[:layers]] == list(range(layers))
    assert compiled == eager
