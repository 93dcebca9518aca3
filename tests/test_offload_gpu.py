"""`--offload` on a CUDA GPU: the tiny pipeline makes the same video with the text encoder and the idle expert in
pinned host memory, holds less GPU memory when a video starts, and its compiled blocks build no graph anew when the
experts come back onto the GPU."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from fsbench.harness.cli import main  # noqa: E402
from fsbench.harness.model import offload  # noqa: E402
from fsbench.harness.precision.router import SelfAttentionRouter  # noqa: E402
from fsbench.harness.run import orchestrator  # noqa: E402
from fsbench.rundir import load_manifest  # noqa: E402

from weight_bytes import weight_bytes  # noqa: E402

SHAPE = dict(height=64, width=64, num_frames=9, steps=4)


def _video(pipe, spec, router, index=0):
    """(frames, GPU memory allocated when the video starts)."""
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated()
    generator = orchestrator.VideoGenerator(pipe, spec, None, router, reuse=False)
    with generator.profiler.video(index):
        frames = generator.frames(index)
    return frames, held


@pytest.fixture(scope="module")
def tiny():
    spec = orchestrator.prepare("tiny", "mlperf", "mxfp8:0-1;bf16:*", None, None, None, SHAPE)
    pipe = orchestrator.load_pipeline(spec, torch.device("cuda"))
    pipe.set_progress_bar_config(disable=True)
    router = SelfAttentionRouter(spec.schedule)
    router.install(pipe)
    yield spec, pipe, router
    router.uninstall()


def test_offload_keeps_the_video_and_holds_only_the_last_expert_between_videos(tiny):
    spec, pipe, router = tiny
    _video(pipe, spec, router)  # the first video leaves the caches every video uses behind
    reference, held_all = _video(pipe, spec, router)
    moved = weight_bytes(pipe.text_encoder, pipe.transformer)
    host = offload.install(pipe)
    try:
        assert host.resident == {"transformer_2"}
        first, held_first = _video(pipe, spec, router)
        second, held_second = _video(pipe, spec, router)
        assert host.resident == {"transformer_2"}
        weight = pipe.text_encoder.shared.weight
        assert weight.device.type == "cpu" and weight.is_pinned()
        assert next(pipe.transformer_2.parameters()).is_cuda and next(pipe.vae.parameters()).is_cuda
        assert host.host_bytes() >= moved + weight_bytes(pipe.transformer_2)
    finally:
        host.remove()
    assert all(next(m.parameters()).is_cuda for m in (pipe.text_encoder, pipe.transformer, pipe.transformer_2))
    assert np.array_equal(first, reference) and np.array_equal(second, reference)
    assert held_all - held_first >= moved and held_second == held_first


def _compiled_videos(pipe, spec, router, host: bool) -> tuple[np.ndarray, np.ndarray, int]:
    """Two videos through freshly compiled blocks (eager backend), the second with any recompile an error; and
    the graphs dynamo built in the first."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    for expert in (pipe.transformer, pipe.transformer_2):
        expert.compile_repeated_blocks(backend="eager", fullgraph=True, dynamic=False)
    held = offload.install(pipe) if host else None
    try:
        first, _ = _video(pipe, spec, router)
        graphs = counters["stats"]["unique_graphs"]
        with torch._dynamo.config.patch(error_on_recompile=True):
            second, _ = _video(pipe, spec, router)
        assert counters["graph_break"] == {}
    finally:
        if held is not None:
            held.remove()
        for expert in (pipe.transformer, pipe.transformer_2):
            for block in expert.blocks:
                block._compiled_call_impl = None
        torch._dynamo.reset()
    return first, second, graphs


def test_compiled_blocks_build_no_graph_anew_when_the_experts_return(tiny):
    """Both experts leave and return once per video: offloaded, the compiled blocks build the graphs they build
    with every weight on the GPU (one per format, plus what the CUDA emulator compiles), and the second video
    builds none."""
    spec, pipe, router = tiny
    resident, _, resident_graphs = _compiled_videos(pipe, spec, router, host=False)
    first, second, graphs = _compiled_videos(pipe, spec, router, host=True)
    assert graphs == resident_graphs >= len(spec.schedule.formats)
    assert np.array_equal(first, resident) and np.array_equal(second, first)


def test_run_offload_records_it_and_compare_tells_the_configurations_apart(tmp_path):
    args = ["run", "--count", "1", "--time", "0", "--profile", "--schedule", "mxfp8", "--device", "cuda",
            "--height", "32", "--width", "32", "--frames", "5", "--steps", "2"]
    for name, extra in (("resident", []), ("offloaded", ["--offload"])):
        result = CliRunner().invoke(main, [*args, *extra, "--out", str(tmp_path / name)], catch_exceptions=False)
        assert result.exit_code == 0, result.output
    speed = load_manifest(tmp_path / "offloaded")["results"]["SingleStream"]["performance"]["speed"]
    assert speed["offload"] is True and speed["host_offload"]["pinned_bytes"] > 0
    assert speed["host_offload"]["parts"] == ["text_encoder", "transformer", "transformer_2"]
    result = CliRunner().invoke(main, ["compare", str(tmp_path / "resident"), str(tmp_path / "offloaded"),
                                       "--out", str(tmp_path / "cmp")])
    assert result.exit_code == 0, result.output
    rows = json.loads((tmp_path / "cmp" / "compare.json").read_text())["rows"]
    assert [r["schedule"] for r in rows] == ["MXFP8 · weights on the GPU", "MXFP8 · host offload"]
