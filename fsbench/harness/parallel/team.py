"""The processes of a `fsbench run` or `fsbench sweep`: one, or N (`--gpus N`) over torch.distributed (NCCL for
tensors on GPUs, gloo for control messages and for everything on a CPU), where only rank 0 talks to LoadGen.

- Offline: N data-parallel pipeline replicas. Rank 0's SUT answers LoadGen's samples from N threads; each thread
  takes an idle replica (its own pipeline, or rank r through a private gloo channel) and the replica writes the video.
- SingleStream: all N ranks compute each query together, `cfg` (1 or 2) x `ulysses` ranks: rank 0 broadcasts the
  prompt index, the "cfg" groups split the cond/uncond passes (harness.parallel.cfg), the "ulysses" groups split the
  sequence (harness.parallel.ulysses). Every rank holds the same weights and latent, as the hooks require.
- A sweep is a series of Offline AccuracyOnly passes, one per schedule, served by the same replicas: the pipelines
  load once, each pass's prompts are shared among the replicas as they fall idle, every video is written once by
  the replica that made it (atomically), and rank 0's one progress bar counts the videos of all ranks. A resumed
  pass reuses the finished videos on whichever rank is asked for them, so a sweep resumes on any N.

A run always has a team: `launch` gives one process a `Team` of one (it routes attention and serves LoadGen's
samples itself) and N processes a `Ranks` each, so the orchestrator runs the same code on any N and never asks.

Launch: `fsbench run --gpus N` starts N-1 workers with torch.multiprocessing (from a fork server on a CPU, where a
spawned worker would import diffusers again; spawned with CUDA, which cannot be forked) and serves as rank 0; under
torchrun every process is one rank. `--device cpu` makes the "GPUs" CPU processes (the tests).
"""
from __future__ import annotations

import contextlib
import datetime
import json
import os
import queue
import socket
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol, TypeVar

import torch
import torch.distributed as dist

from fsbench.errors import FsbenchError
from fsbench.harness.model import pipeline
from fsbench.harness.model.synthetic import CONFIGS
from fsbench.harness.precision.router import Capture, SelfAttentionRouter
from fsbench.harness.precision.schedule import ResolvedSchedule
from fsbench.harness.run.presets import Settings
from fsbench.kernels.registry import AUTO

TIMEOUT_ENV = "FSBENCH_DIST_TIMEOUT"  # seconds a rank waits in one collective or for one video (default 1800)
_CPU = torch.device("cpu")


@dataclass(frozen=True)
class Layout:
    """How a run uses its processes: `processes` = replicas x cfg x ulysses."""

    processes: int
    device: str
    cfg: int = 1
    ulysses: int = 1

    @property
    def replicas(self) -> int:
        return self.processes // (self.cfg * self.ulysses)

    @property
    def backend(self) -> str:
        """NCCL moves the tensors on GPUs; gloo carries the CPU control messages (and everything on a CPU)."""
        return "cpu:gloo,cuda:nccl" if self.device == "cuda" else "gloo"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "replicas": self.replicas, "backend": self.backend}


def leads_job() -> bool:
    """Whether this process leads its job (rank 0, or not started by torchrun): it alone holds the run folder."""
    return torchrun_world() is None or os.environ["RANK"] == "0"


_LAUNCHED_BY = ("RANK", "WORLD_SIZE", "LOCAL_RANK")  # any of these: started by torchrun (or an env:// launcher)
_RENDEZVOUS = ("MASTER_ADDR", "MASTER_PORT")


def torchrun_world() -> int | None:
    """WORLD_SIZE when this process was started by torchrun (or any env:// launcher), else None. A partial
    environment (a leftover WORLD_SIZE, say) is refused in one line naming what is missing, before any work."""
    given = [name for name in _LAUNCHED_BY if name in os.environ]
    if not given:
        return None
    missing = [name for name in (*_LAUNCHED_BY, *_RENDEZVOUS) if not os.environ.get(name)]
    if missing:
        raise FsbenchError(f"{given[0]} is set but {missing[0]} is not: a torchrun environment needs "
                           f"{', '.join((*_LAUNCHED_BY, *_RENDEZVOUS))}; unset {', '.join(given)} or start the command "
                           "with torchrun")
    for name in (*_LAUNCHED_BY, "MASTER_PORT"):
        if not os.environ[name].isdigit():
            raise FsbenchError(f"{name}={os.environ[name][:40]!r} is not a whole number: torchrun sets it; unset it "
                               "or start the command with torchrun")
    return int(os.environ["WORLD_SIZE"])


def process_count(gpus: int | None, cuda: bool) -> int:
    """The ranks of a run: torchrun's WORLD_SIZE, else --gpus (on CUDA at most this host's devices), else 1."""
    launched = torchrun_world()
    if launched is not None and gpus is not None and gpus != launched:
        raise FsbenchError(f"--gpus {gpus} under torchrun with WORLD_SIZE {launched}; drop --gpus or match it")
    n = launched or (1 if gpus is None else gpus)
    if n < 1:
        raise FsbenchError(f"--gpus must be at least 1, got {n}")
    if cuda and launched is None and n > torch.cuda.device_count():
        raise FsbenchError(f"--gpus {n}: this host has {torch.cuda.device_count()} CUDA device(s)")
    return n


def plan(scenario: str, model: str, settings: Settings, gpus: int | None, cfg: int | None, ulysses: int | None,
         device: str = "auto", capture: bool = False, warm_up: bool = False) -> Layout:
    """Check the parallel options against the scenario, the model and this host before any work starts."""
    resolved = pipeline.default_device() if device == "auto" else torch.device(device)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise FsbenchError("--device cuda: no CUDA device here; use --device cpu")
    pipeline.check_device(model, resolved)
    n = process_count(gpus, resolved.type == "cuda")
    if n > 1 and capture:
        raise FsbenchError("--capture records one process's attention calls; run it without --gpus")
    if n > 1 and warm_up:
        raise FsbenchError("--warm-up runs in one process only: leave it out with --gpus")
    if scenario == "Offline":
        if (cfg or 1) > 1 or (ulysses or 1) > 1:
            raise FsbenchError("Offline runs one pipeline replica per GPU; --cfg-parallel and --ulysses are for "
                               "SingleStream")
        return Layout(n, resolved.type)
    s = settings
    guided = s.guidance_scale > 1 and s.guidance_scale_2 > 1
    cfg = cfg or (2 if n % 2 == 0 and guided else 1)
    ulysses = ulysses or n // cfg
    if cfg not in (1, 2):
        raise FsbenchError(f"--cfg-parallel {cfg}: classifier-free guidance has 2 passes, so use 1 or 2")
    if cfg == 2 and not guided:
        raise FsbenchError("--cfg-parallel 2 needs classifier-free guidance (guidance scales above 1)")
    if cfg * ulysses != n:
        raise FsbenchError(f"SingleStream splits each query over all GPUs: --cfg-parallel {cfg} x --ulysses "
                           f"{ulysses} must equal --gpus {n}")
    heads = num_heads(model)
    if heads % ulysses:
        raise FsbenchError(f"--ulysses {ulysses} does not divide the model's {heads} attention heads")
    if s.tokens % ulysses:
        raise FsbenchError(f"--ulysses {ulysses} does not divide the {s.tokens} tokens of a "
                           f"{s.width}x{s.height}x{s.num_frames} video; pick a divisor")
    return Layout(n, resolved.type, cfg, ulysses)


def num_heads(model: str) -> int:
    if model in CONFIGS:
        return CONFIGS[model]["transformer"]["num_attention_heads"]
    config = pipeline.checkpoint_dir(model) / "transformer" / "config.json"
    return json.loads(config.read_text())["num_attention_heads"]


class Generator(Protocol):
    """What a team needs of the orchestrator's video generator (`harness.run.orchestrator.VideoGenerator`)."""

    generated: int
    reused: int

    def __call__(self, index: int) -> str: ...

    def can_reuse(self, index: int) -> bool: ...

    def frames(self, index: int) -> Any: ...


class Team:
    """The processes of one run as the orchestrator sees them. This class is the team of one process: it routes
    attention here, serves LoadGen's samples itself and adds nothing to the summary. `Ranks` is the team of N."""

    def __init__(self, layout: Layout, device: torch.device, rank: int = 0):
        self.layout, self.device, self.rank = layout, device, rank

    @property
    def leads(self) -> bool:
        """Rank 0 talks to LoadGen and writes the results; the other ranks follow it."""
        return self.rank == 0

    def parallelize(self, pipe: Any) -> None:
        """Split the model over the team's processes (one process keeps it whole)."""

    def router(self, schedule: ResolvedSchedule, *, impl: str, capture: Capture | None,
               bf16_impl: str = AUTO) -> SelfAttentionRouter:
        """The attention router of this process."""
        return SelfAttentionRouter(schedule, impl=impl, capture=capture, bf16_impl=bf16_impl)

    @contextlib.contextmanager
    def serve(self, generator: Generator) -> Iterator[tuple[Callable[[int], str], int]]:
        """Rank 0: `(generate, concurrency)` for LoadGen's SUT."""
        yield generator, 1

    def follow(self, generator: Generator) -> None:
        """Ranks > 0: compute what rank 0 asks for until it is done."""
        raise RuntimeError("a team of one process has no rank 0 to follow")

    def record(self) -> dict[str, Any]:
        """What the team adds to a LoadGen summary: nothing for one process, `parallel` (the layout) for N."""
        return {}


R = TypeVar("R")


def launch(layout: Layout, scenario: str, main: Callable[[Team], R]) -> R:
    """`main(team)` on every process of `layout`, this one included; returns this process's result.

    One process runs `main` here with a `Team`; N processes each join the process group and run it with their
    `Ranks` (under torchrun this process is one rank; else this process is rank 0 and starts the others, so
    `main` must be picklable)."""
    if layout.processes == 1:
        return main(Team(layout, torch.device(layout.device)))
    if torchrun_world() is not None:
        return _rank(int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), layout, scenario, "env://", main)
    module = getattr(main, "func", main).__module__  # a functools.partial names its function
    return run_ranks(layout.processes, layout.device == "cpu", _rank,
                     lambda rank, init: (rank, rank, layout, scenario, init, main), preload=(module,))


def run_ranks(n: int, cpu: bool, target: Callable[..., Any], args: Callable[[int, str], tuple],
              preload: Sequence[str] = ()) -> Any:
    """Rank 0 in this process and ranks 1..n-1 as child processes, all meeting at one fresh TCP rendezvous:
    `target(*args(rank, init_method))` on each. Returns rank 0's result; a child that fails is one error naming it,
    and none is left running.

    With CUDA the children are spawned (CUDA cannot be forked). On a CPU they come from a fork server that imported
    this module and `preload` once: as quick as a fork of this process, without inheriting its threads (a fork of a
    process whose OpenMP or logging threads hold a lock can hang the child)."""
    init = f"tcp://127.0.0.1:{_free_port()}"
    context = torch.multiprocessing.get_context("forkserver" if cpu else "spawn")
    if cpu:
        context.set_forkserver_preload([__name__, *preload])
    workers = [context.Process(target=target, args=args(rank, init), name=f"fsbench rank {rank}")
               for rank in range(1, n)]
    for worker in workers:
        worker.start()
    finished = False
    try:
        result = target(*args(0, init))
        finished = True
    finally:
        _reap(workers, grace_s=60.0 if finished else 5.0)
    failed = [f"{w.name} (exit code {w.exitcode})" for w in workers if w.exitcode]
    if failed:
        raise RuntimeError(f"{', '.join(failed)} failed; its traceback is above")
    return result


def _reap(workers: list[Any], grace_s: float) -> None:
    """Wait for the workers to finish their loops, then stop any that did not (a failed rank 0 leaves them waiting)."""
    deadline = time.monotonic() + grace_s
    for worker in workers:
        worker.join(max(0.0, deadline - time.monotonic()))
    for worker in workers:
        if worker.is_alive():
            worker.terminate()
            worker.join(5)
        if worker.is_alive():
            worker.kill()
            worker.join()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, local_rank: int, layout: Layout, scenario: str, init_method: str,
          main: Callable[[Team], R]) -> R:
    """One rank of N: take its device and CPU share, join the process group, run `main` with its `Ranks`."""
    if layout.device == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = _CPU
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // layout.processes))
    timeout = datetime.timedelta(seconds=float(os.environ.get(TIMEOUT_ENV, 1800)))
    dist.init_process_group(layout.backend, init_method=init_method, rank=rank,
                            world_size=layout.processes, timeout=timeout)
    try:
        return main(Ranks(layout, scenario, rank, device))
    finally:
        dist.destroy_process_group()
        torch.set_num_threads(threads)


class Ranks(Team):
    """This rank's process groups and its part in a LoadGen test (built in the same order on every rank); the same
    groups serve every pass of a sweep."""

    def __init__(self, layout: Layout, scenario: str, rank: int, device: torch.device):
        super().__init__(layout, device, rank)
        self.single_stream = scenario == "SingleStream"
        self.mesh: Any = None
        self.parallel_config: Any = None
        self.channels: dict[int, Any] = {}
        self.pool: _ReplicaPool | None = None
        if self.single_stream:
            from torch.distributed.device_mesh import init_device_mesh

            self.mesh = init_device_mesh(device.type, (layout.cfg, 1, layout.ulysses),
                                         mesh_dim_names=("cfg", "ring", "ulysses"))
        else:
            self.channels = {r: dist.new_group([0, r], backend="gloo") for r in range(1, layout.processes)}

    def parallelize(self, pipe: Any) -> None:
        """SingleStream: the sequence split and the CFG split on both experts (Offline replicas need nothing)."""
        from fsbench.harness.parallel import cfg as cfg_parallel, ulysses

        if self.single_stream and self.layout.ulysses > 1:
            self.parallel_config = ulysses.shard_sequence(pipe, self.mesh, self.rank, self.layout.processes,
                                                          self.device)
        if self.single_stream and self.layout.cfg > 1:
            cfg_parallel.install(pipe, self.mesh["cfg"].get_group())

    def router(self, schedule: ResolvedSchedule, *, impl: str, capture: Capture | None,
               bf16_impl: str = AUTO) -> SelfAttentionRouter:
        """The attention router for this rank: Ulysses-aware when the sequence is split."""
        from fsbench.harness.parallel.ulysses import UlyssesRouter

        if self.parallel_config is None:
            return super().router(schedule, impl=impl, capture=capture, bf16_impl=bf16_impl)
        return UlyssesRouter(schedule, self.mesh["ulysses"].get_group(), self.parallel_config, impl=impl,
                             bf16_impl=bf16_impl)

    def record(self) -> dict[str, Any]:
        """The layout as the manifest records it."""
        name = torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else "cpu"
        layout = {**self.layout.as_dict(), "device_name": name,
                  "launcher": "torchrun" if torchrun_world() is not None else "fsbench"}
        if self.pool is not None:
            layout["samples_per_replica"] = [self.pool.served[rank] for rank in sorted(self.pool.served)]
        return {"parallel": layout}

    @contextlib.contextmanager
    def serve(self, generator: Generator) -> Iterator[tuple[Callable[[int], str], int]]:
        """Rank 0: `(generate, concurrency)` for LoadGen's SUT; on exit the other ranks are released."""
        if self.single_stream:
            yield self._lead(generator), 1
            dist.broadcast_object_list([None], src=0, device=_CPU)
            return
        self.pool = _ReplicaPool(generator, self.channels)
        try:
            yield self.pool.generate, 1 + len(self.channels)
        finally:
            self.pool.release()

    def _lead(self, generator: Generator) -> Callable[[int], str]:
        def generate(index: int) -> str:
            if not generator.can_reuse(index):
                dist.broadcast_object_list([index], src=0, device=_CPU)
            return generator(index)
        return generate

    def follow(self, generator: Generator) -> None:
        """Ranks > 0: compute what rank 0 sends until it sends None (SingleStream: this rank's part of every
        query's frames; Offline: whole videos, as a replica)."""
        if self.single_stream:
            while (index := _receive_broadcast()) is not None:
                generator.frames(index)
        else:
            _answer_samples(generator, self.channels[self.rank])


def _receive_broadcast() -> Any:
    message = [None]
    dist.broadcast_object_list(message, src=0, device=_CPU)
    return message[0]


def _answer_samples(generator: Generator, channel: Any) -> None:
    """A replica's loop: a sample index in, (video path, reused, error) out, until None arrives."""
    while True:
        message = [None]
        dist.recv_object_list(message, src=0, group=channel, device=_CPU)
        if message[0] is None:
            return
        reused = generator.reused
        try:
            reply = (generator(message[0]), generator.reused > reused, None)
        except Exception:  # noqa: BLE001 - the error travels to rank 0, which stops the test
            reply = (None, False, traceback.format_exc())
        dist.send_object_list([reply], dst=0, group=channel, device=_CPU)


class _ReplicaPool:
    """Rank 0's view of the replicas: each sample goes to an idle one; remote ones report over their channel."""

    def __init__(self, local: Generator, channels: dict[int, Any]):
        self.local, self.channels = local, channels
        self.idle: queue.Queue[int] = queue.Queue()
        for rank in (0, *channels):
            self.idle.put(rank)
        self.lock = threading.Lock()
        self.remote_generated = self.remote_reused = 0
        self.served = {rank: 0 for rank in (0, *channels)}

    def generate(self, index: int) -> str:
        rank = self.idle.get()
        with self.lock:
            self.served[rank] += 1
        try:
            if rank == 0:
                return self.local(index)
            dist.send_object_list([index], dst=rank, group=self.channels[rank], device=_CPU)
            reply: list[Any] = [None]
            dist.recv_object_list(reply, src=rank, group=self.channels[rank], device=_CPU)
            path, reused, error = reply[0]
            if error is not None:
                raise RuntimeError(f"replica rank {rank} failed on sample {index}:\n{error}")
            with self.lock:
                self.remote_reused += reused
                self.remote_generated += not reused
            return path
        finally:
            self.idle.put(rank)

    def release(self) -> None:
        """Stop the replicas' loops and count their videos in the local generator's totals."""
        for rank, channel in self.channels.items():
            dist.send_object_list([None], dst=rank, group=channel, device=_CPU)
        self.local.generated += self.remote_generated
        self.local.reused += self.remote_reused
