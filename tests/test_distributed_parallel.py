"""SingleStream on several processes (gloo on the CPU, tiny model in float32, 64x64, 9 frames, 2 steps): the
CFG-parallel and the Ulysses sequence-parallel videos equal the one-process video.

Tolerances: CFG parallelism runs each pass exactly as one process does, so every schedule matches bit for bit.
Under Ulysses, bf16 and mxfp4 (emulator) also match bit for bit: their operand scales are per head, per token or
per 32-key block. mxfp8 quantizes V with one per-tensor scale, which under Ulysses comes from the rank's heads
only; the decoded frames (values in [0, 1]) then differ by about 1e-3, bounded here at 5e-3.

Workers are forked (the test process has diffusers imported already) and always reaped: collectives time out
after 60 s and a worker still alive after the join deadline is killed.
"""
from __future__ import annotations

import datetime
import queue
import socket
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from fsbench.harness.parallel import team as distributed
from fsbench.harness.precision.router import SelfAttentionRouter
from fsbench.harness.run import orchestrator

SMALL = {"height": 64, "width": 64, "num_frames": 9, "steps": 2}
SCHEDULES = ("bf16", "mxfp4", "mxfp8")
JOIN_S = 120


def _spec(schedule: str) -> orchestrator.RunSpec:
    return orchestrator.prepare("tiny", "mlperf", schedule, None, 1, None, SMALL)


def _video(pipe, router: SelfAttentionRouter, spec: orchestrator.RunSpec) -> np.ndarray:
    router.install(pipe)
    try:
        return orchestrator.VideoGenerator(pipe, spec, Path("."), router, reuse=False).frames(0)
    finally:
        router.uninstall()


def _worker(rank: int, layout: distributed.Layout, port: int, schedules: tuple[str, ...], results: mp.Queue) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=layout.processes, timeout=datetime.timedelta(seconds=60))
    try:
        team = distributed.Ranks(layout, "SingleStream", rank, torch.device("cpu"))
        pipe = orchestrator.load_pipeline(_spec("bf16"), torch.device("cpu"))
        team.parallelize(pipe)
        for name in schedules:
            spec = _spec(name)
            frames = _video(pipe, team.router(spec.schedule, impl="auto", capture=None), spec)
            if rank == 0:
                results.put((name, frames))
    finally:
        dist.destroy_process_group()


def _run_parallel(layout: distributed.Layout, schedules: tuple[str, ...] = SCHEDULES) -> dict[str, np.ndarray]:
    context = mp.get_context("fork")
    results = context.Queue()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    workers = [context.Process(target=_worker, args=(rank, layout, port, schedules, results))
               for rank in range(layout.processes)]
    for worker in workers:
        worker.start()
    videos: dict[str, np.ndarray] = {}
    try:
        while len(videos) < len(schedules):
            name, frames = results.get(timeout=JOIN_S)
            videos[name] = frames
    except queue.Empty:
        pytest.fail(f"workers of {layout} produced {sorted(videos)} within {JOIN_S} s")
    finally:
        for worker in workers:
            worker.join(JOIN_S)
            if worker.is_alive():
                worker.kill()
                worker.join()
    assert [w.exitcode for w in workers] == [0] * layout.processes
    return videos


@pytest.fixture(scope="module")
def single_process() -> dict[str, np.ndarray]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        pipe = orchestrator.load_pipeline(_spec("bf16"), torch.device("cpu"))
        return {name: _video(pipe, SelfAttentionRouter(_spec(name).schedule), _spec(name)) for name in SCHEDULES}
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow
def test_cfg_parallel_video_equals_the_one_process_video_bit_for_bit(single_process):
    parallel = _run_parallel(distributed.Layout(2, "cpu", cfg=2))
    for name in SCHEDULES:
        np.testing.assert_array_equal(parallel[name], single_process[name], err_msg=name)


@pytest.mark.slow
def test_ulysses_video_equals_the_one_process_video_and_mxfp8_within_its_v_scale(single_process):
    parallel = _run_parallel(distributed.Layout(2, "cpu", ulysses=2))
    for name in ("bf16", "mxfp4"):
        np.testing.assert_array_equal(parallel[name], single_process[name], err_msg=name)
    diff = np.abs(parallel["mxfp8"] - single_process["mxfp8"]).max()
    assert diff < 5e-3


@pytest.mark.slow
def test_cfg_parallel_times_ulysses_on_four_processes_equals_the_one_process_video(single_process):
    parallel = _run_parallel(distributed.Layout(4, "cpu", cfg=2, ulysses=2), ("mxfp4",))
    np.testing.assert_array_equal(parallel["mxfp4"], single_process["mxfp4"])
