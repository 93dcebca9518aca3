"""Instrumentation of the latency breakdown of generated videos (`fsbench run --profile`): hooks that time text
encoding, every denoising step split into self-attention, cross-attention, GEMMs (linear layers) and the rest, VAE
decode, postprocess (frames to host) and video encoding, and record each video. `harness.measure.profile_report`
summarizes the records and writes RUN/profile.json and the tables of RUN/profile.md.

Device work is timed with CUDA events recorded around each region (no host sync inside a video; the events
are read once the video is done), so the numbers are GPU time, not host time around asynchronous launches.
On a CPU the same code path uses perf_counter, which is exact there because CPU ops are synchronous.
With compiled blocks (`--compile`) module hooks would break the graphs, so only the self-attention core is
split out (the op `fsbench::attention` runs its body eagerly inside the graphs, where the router's core times
it); GEMMs and cross-attention then count as `rest`.

Energy (`harness.measure.energy`): the GPU's joules over each video and over its denoising loop are measured (NVML's
energy counter, else nvidia-smi's power integrated over time), with one device sync at each of the four marks.
A step's joules are the loop's joules split in proportion to the steps' device time, and a step's
self-attention joules are its share of them: at the power cap the power is nearly constant, so time stands for
energy within the loop. On a CPU the energy fields are None and `energy.reason` says why.

Clock: under the power cap a kernel runs at the clock its power draw allows, so the same call can take longer in
the pipeline than on the bench without any overhead. nvidia-smi samples the SM clock and power every `CLOCK_SAMPLE_MS`
(`harness.measure.clocks`); an event recorded right after a device sync maps the CUDA events onto the samples' time, and
each sample counts for self-attention or for the rest of the denoising loop by when it was taken.

Memory: beside each video's peak (torch.cuda.max_memory_allocated), the memory held when it starts and the peak
of each phase (`MEMORY_PHASES`) say what a smaller card would have to do without.
"""
from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from fsbench import kernels
from fsbench.errors import FsbenchError
from fsbench.harness.measure import clocks as gpu_clock
from fsbench.harness.measure.energy import Meter
from fsbench.harness.precision.router import SelfAttentionCall
from fsbench.kernels.registry import SDPA

PARTS = ("self_attention", "cross_attention", "gemm")
CLOCK_SAMPLE_MS = 50
CLOCK_PARTS = ("self_attention", "rest_of_loop")
MEMORY_PHASES = ("text_encode", "denoise", "vae_decode", "postprocess_and_encode")  # in the order they end


class Clock:
    """Device time: CUDA events on a GPU, perf_counter on a CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def mark(self) -> Any:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def seconds(self, start: Any, end: Any) -> float:
        if self.cuda:
            end.synchronize()
            return start.elapsed_time(end) / 1000.0
        return end - start

    def anchor(self) -> tuple[Any, float]:
        """(mark, time.time()) taken together: the mark is recorded right after a device sync, so the GPU reaches
        it at that host time (within microseconds), and every later mark's host time follows from it."""
        if self.cuda:
            torch.cuda.synchronize()
        return self.mark(), time.time()

    def when(self, anchor: tuple[Any, float], mark: Any) -> float:
        """The time.time() at which the device reached `mark`."""
        return anchor[1] + self.seconds(anchor[0], mark)


class GpuPeak:
    """Peak GPU memory of each video: torch.cuda.max_memory_allocated, reset before the video; None on a CPU.

    The profiler also ends phases (`end_phase`): each phase's peak, beside the memory held when a video starts
    (weights), says which part of a video must shrink for it to fit a smaller card."""

    def __init__(self) -> None:
        self.bytes: int | None = None  # the largest peak of any video so far
        self.held: int | None = None  # the most memory allocated when a video started
        self.phases: dict[str, int] = {}  # the largest peak of each phase in any video so far
        self._top = 0  # the current video's peak over the phases already ended

    @staticmethod
    def _cuda() -> bool:
        return torch.cuda.is_available() and torch.cuda.is_initialized()

    def end_phase(self, name: str) -> None:
        """The peak since the last phase ended (or the video started) belongs to `name`; the next phase starts."""
        if not self._cuda():
            return
        peak = torch.cuda.max_memory_allocated()
        self.phases[name] = max(self.phases.get(name, 0), peak)
        self._top = max(self._top, peak)
        torch.cuda.reset_peak_memory_stats()

    @contextlib.contextmanager
    def video(self, record: dict[str, Any] | None = None, last_phase: str | None = None) -> Iterator[None]:
        """Around one video; `last_phase` names what runs after the last `end_phase` (None: no phases)."""
        cuda = self._cuda()
        self._top = 0
        if cuda:
            self.held = max(self.held or 0, torch.cuda.memory_allocated())
            torch.cuda.reset_peak_memory_stats()
        yield
        if cuda and last_phase is not None:
            self.end_phase(last_phase)
        peak = max(self._top, torch.cuda.max_memory_allocated()) if cuda else None
        if peak is not None:
            self.bytes = max(self.bytes or 0, peak)
        if record is not None:
            record["peak_gpu_memory_bytes"] = peak


class Profiler:
    """Hooks on one pipeline that time every region of every video it generates.

    `install(pipe, router)` before generating, `video(index)` around each video (the orchestrator does both),
    `region(name)` around host-side work such as video encoding; `profile_report.write(run, profiler)` at the end.
    """

    def __init__(self, device: torch.device):
        self.device = device
        self.clock = Clock(device)
        self.energy = Meter(device)
        self.videos: list[dict[str, Any]] = []
        self.fine = True
        self._undo: list[Any] = []
        self._router: Any = None
        self.peak = GpuPeak()
        self.anchor: tuple[Any, float] | None = None  # the current video's (mark, host time), `Clock.anchor`
        self._reset()

    def _reset(self) -> None:
        self._spans: dict[tuple[int, str], list[tuple[Any, Any]]] = defaultdict(list)
        self._regions: dict[str, list[tuple[Any, Any]]] = defaultdict(list)
        self._step_marks: list[tuple[int, str, Any]] = []
        self._open: dict[int, Any] = {}
        self._window: Any = None
        self._denoise_marks: list[Any] = []

    # ---- installation -------------------------------------------------------------------------------------
    def install(self, pipe: Any, router: Any) -> None:
        """Time the text encoder, both experts (per forward and, uncompiled, per linear and attention core),
        the self-attention core through `router.core`, the VAE decode and the postprocess."""
        if router.capture is not None or router.core is not None:
            raise FsbenchError("--profile cannot be combined with --capture (both take the attention core)")
        self._router = router
        router.core = self._self_attention
        self._undo.append(lambda: setattr(router, "core", None))
        self._hook_module(pipe.text_encoder, "text_encode")
        experts = [pipe.transformer, pipe.transformer_2]
        self.fine = not any(getattr(b, "_compiled_call_impl", None) is not None for e in experts for b in e.blocks)
        for expert in experts:
            self._hook_forward(expert)
            if self.fine:
                self._hook_gemms(expert)
                self._time_cross_attention(expert)
        self._wrap_method(pipe.vae, "decode", "vae_decode")
        self._wrap_method(pipe.video_processor, "postprocess_video", "postprocess")

    def uninstall(self) -> None:
        while self._undo:
            self._undo.pop()()

    def _hook_module(self, module: nn.Module, name: str) -> None:
        def pre(mod: nn.Module, args: Any) -> None:
            self._open[id(mod)] = self.clock.mark()

        def post(mod: nn.Module, args: Any, out: Any) -> None:
            self._regions[name].append((self._open.pop(id(mod)), self.clock.mark()))
            self.peak.end_phase(name)

        self._undo += [module.register_forward_pre_hook(pre).remove, module.register_forward_hook(post).remove]

    def _hook_forward(self, expert: nn.Module) -> None:
        """Each expert forward: its span, and a step mark at the first forward of every denoising step."""
        def pre(mod: nn.Module, args: Any, kwargs: Any) -> None:
            mark = self.clock.mark()
            step = self._router.step
            if not self._step_marks or self._step_marks[-1][0] != step:
                if not self._step_marks and self._window is not None:
                    self._denoise_marks.append(self._window.mark())
                self._step_marks.append((step, self._router.expert, mark))
            self._open[id(mod)] = mark

        def post(mod: nn.Module, args: Any, kwargs: Any, out: Any) -> None:
            self._spans[(self._router.step, "forward")].append((self._open.pop(id(mod)), self.clock.mark()))

        self._undo += [expert.register_forward_pre_hook(pre, with_kwargs=True).remove,
                       expert.register_forward_hook(post, with_kwargs=True).remove]

    def _hook_gemms(self, expert: nn.Module) -> None:
        from fsbench.harness.model.fp8_linear import Fp8Linear

        for module in expert.modules():
            if isinstance(module, (nn.Linear, Fp8Linear)):
                self._undo += [module.register_forward_pre_hook(self._gemm_pre).remove,
                               module.register_forward_hook(self._gemm_post).remove]

    def _gemm_pre(self, mod: nn.Module, args: Any) -> None:
        self._open[id(mod)] = self.clock.mark()

    def _gemm_post(self, mod: nn.Module, args: Any, out: Any) -> None:
        self._spans[(self._router.step, "gemm")].append((self._open.pop(id(mod)), self.clock.mark()))

    def _time_cross_attention(self, expert: nn.Module) -> None:
        from diffusers.models.transformers.transformer_wan import WanAttnProcessor

        for block in expert.blocks:
            block.attn2.set_processor(_TimedCrossAttention(self))
            self._undo.append(lambda attn=block.attn2: attn.set_processor(WanAttnProcessor()))

    def _wrap_method(self, owner: Any, method: str, name: str) -> None:
        original = getattr(owner, method)

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = self.clock.mark()
            if name == "vae_decode":
                self.end_denoising(start)
                self.peak.end_phase("denoise")
            out = original(*args, **kwargs)
            self._regions[name].append((start, self.clock.mark()))
            if name == "vae_decode":
                self.peak.end_phase(name)
            return out

        setattr(owner, method, timed)
        self._undo.append(lambda: delattr(owner, method))

    def end_denoising(self, mark: Any = None) -> None:
        """Close the last denoising step (the VAE decode does it; callers timing bare forwards call it)."""
        self._step_marks.append((-1, "", mark if mark is not None else self.clock.mark()))
        if self._window is not None and len(self._denoise_marks) == 1:
            self._denoise_marks.append(self._window.mark())

    # ---- timed cores ----------------------------------------------------------------------------------------
    def _self_attention(self, call: SelfAttentionCall) -> torch.Tensor:
        """The router's core (what `SelfAttentionRouter.attend` runs without capture: RMSNorm, RoPE and attention
        of one `SelfAttentionCall`), with a span around it."""
        start = self.clock.mark()
        out = call.run()
        self._spans[(self._router.step, "self_attention")].append((start, self.clock.mark()))
        return out

    def cross_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        start = self.clock.mark()
        out = kernels.attention(q, k, v, "bf16", impl=SDPA, layout="BSHD")
        self._spans[(self._router.step, "cross_attention")].append((start, self.clock.mark()))
        return out

    # ---- per video ------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def region(self, name: str) -> Iterator[None]:
        start = self.clock.mark()
        yield
        self._regions[name].append((start, self.clock.mark()))

    @contextlib.contextmanager
    def video(self, index: int) -> Iterator[None]:
        """Around one generated video: resets the spans, then resolves them into `self.videos`."""
        self._reset()
        wall = time.perf_counter()
        memory: dict[str, Any] = {}
        with (self.energy.window() as window, self.peak.video(memory, MEMORY_PHASES[-1]),
              self._clock_samples() as samples):
            self._window = window
            self.anchor = self.clock.anchor()
            start = window.mark()
            yield
            end = window.mark()
        record = self._resolve(index)
        record["clock"] = self.clock_split(samples) if samples else None
        record["wall_s"] = time.perf_counter() - wall
        record["joules"] = window.joules(start, end)
        record["denoise_joules"] = window.joules(*self._denoise_marks) if len(self._denoise_marks) == 2 else None
        split_joules(record)
        record.update(memory)
        self._window = None
        self.videos.append(record)

    def _clock_samples(self) -> contextlib.AbstractContextManager[list[dict[str, Any]]]:
        """nvidia-smi's samples over a video on a GPU (none on a CPU or without nvidia-smi)."""
        if not self.clock.cuda:
            return contextlib.nullcontext([])
        return gpu_clock.sampling(CLOCK_SAMPLE_MS, self.device)

    def clock_split(self, samples: list[dict[str, Any]]) -> dict[str, Any] | None:
        """Clock and power of the samples (`gpu_clock` records) taken during the last video's self-attention calls
        and during the rest of its denoising loop."""
        anchor = self.anchor
        if anchor is None or len(self._step_marks) < 2:
            return None
        spans = [(self.clock.when(anchor, s), self.clock.when(anchor, e))
                 for (_, part), pairs in self._spans.items() if part == "self_attention" for s, e in pairs]
        loop = self.clock.when(anchor, self._step_marks[0][2]), self.clock.when(anchor, self._step_marks[-1][2])
        marks = list(zip(samples, gpu_clock.in_spans(samples, spans), gpu_clock.in_spans(samples, [loop])))
        return {"self_attention": gpu_clock.summarize([s for s, attends, looping in marks if attends and looping]),
                "rest_of_loop": gpu_clock.summarize([s for s, attends, looping in marks if looping and not attends])}

    def _total(self, spans: list[tuple[Any, Any]]) -> float:
        return sum(self.clock.seconds(s, e) for s, e in spans)

    def _resolve(self, index: int) -> dict[str, Any]:
        record: dict[str, Any] = {"index": index}
        record.update({f"{name}_s": self._total(spans) for name, spans in self._regions.items()})
        steps = []
        marks = self._step_marks
        for (step, expert, start), (_, _, end) in zip(marks, marks[1:]):
            row: dict[str, Any] = {"step": step, "expert": expert, "fmt": self._router.schedule.by_step()[step],
                                   "total_s": self.clock.seconds(start, end),
                                   "forwards_s": self._total(self._spans[(step, "forward")])}
            parts = PARTS if self.fine else PARTS[:1]
            row.update({f"{part}_s": self._total(self._spans[(step, part)]) for part in parts})
            row["self_attention_calls"] = len(self._spans[(step, "self_attention")])
            row["rest_s"] = row["total_s"] - sum(row[f"{part}_s"] for part in parts)
            steps.append(row)
        record["steps"] = steps
        record["denoise_s"] = sum(row["total_s"] for row in steps)
        return record


def split_joules(record: dict[str, Any]) -> None:
    """Each step's share of the denoising loop's joules by device time, and its self-attention's share of it."""
    denoise, steps = record["denoise_joules"], record["steps"]
    loop_s = sum(row["total_s"] for row in steps)
    for row in steps:
        row["joules"] = None if denoise is None or loop_s <= 0 else denoise * row["total_s"] / loop_s
        row["self_attention_joules"] = (None if row["joules"] is None or row["total_s"] <= 0
                                        else row["joules"] * row["self_attention_s"] / row["total_s"])


class _TimedCrossAttention:
    """diffusers' `WanAttnProcessor` for text-to-video cross-attention (attn2), with the SDPA core timed."""

    def __init__(self, profiler: Profiler):
        self.profiler = profiler

    def __call__(self, attn: Any, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor | None = None,
                 attention_mask: torch.Tensor | None = None, rotary_emb: Any = None) -> torch.Tensor:
        if attn.add_k_proj is not None or attention_mask is not None or encoder_hidden_states is None:
            raise ValueError("the timed processor serves text-to-video cross-attention (attn2) without a mask only")
        q = attn.norm_q(attn.to_q(hidden_states)).unflatten(2, (attn.heads, -1))
        k = attn.norm_k(attn.to_k(encoder_hidden_states)).unflatten(2, (attn.heads, -1))
        v = attn.to_v(encoder_hidden_states).unflatten(2, (attn.heads, -1))
        out = self.profiler.cross_attention(q, k, v).flatten(2, 3).type_as(q)
        return attn.to_out[1](attn.to_out[0](out))


class NullProfiler:
    """What the runner uses without --profile: every region is a no-op; only the peak GPU memory is kept."""

    def __init__(self) -> None:
        self.peak = GpuPeak()

    @contextlib.contextmanager
    def region(self, name: str) -> Iterator[None]:
        yield

    @contextlib.contextmanager
    def video(self, index: int) -> Iterator[None]:
        with self.peak.video():
            yield
