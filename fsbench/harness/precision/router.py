"""Route every self-attention (`attn1`) of both Wan experts through `kernels.attention` with the format the
schedule gives for (denoising step, layer); cross-attention (`attn2`) keeps diffusers' BF16 SDPA.

The step comes from the pipeline's public `callback_on_step_end` (pass `router.on_step_end`), the CFG pass
from counting expert forwards within a step (the pipeline runs cond, then uncond, as two batch-1 calls).
With a `Capture`, every call's `AttentionStats` is recorded and q, k, v of the calls with the highest
rollback rates are kept for offline kernel studies.

Every routed call goes through the custom op `torch.ops.fsbench.self_attention` (`kernels.op`) with the raw
q and k projections and their RMSNorm and RoPE (`kernels.prologue`), which one Triton pass applies on the GPU
(faster than inductor's fusion of them); compiled blocks (`--compile`) hold the call inside their graphs. The
format reaches the op as a string argument read from the processor, which the router sets at every step: a
compiled block gets one graph per format of the schedule. The op's body runs eagerly even inside a graph and calls
the router back (`_op_call`), which knows the step, the expert, the CFG pass and, counting calls within the
expert's forward, the layer: timers (`core`, `--profile`) and statistics (`Capture`) see every call, as a
`SelfAttentionCall`, with or without compilation. A timer around `call.run()` covers the same work for every
format: RMSNorm, RoPE and attention.
"""
from __future__ import annotations

import functools
import heapq
import json
import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from fsbench import kernels
from fsbench.files import atomic_write, atomic_write_text
from fsbench.harness.precision.schedule import ResolvedSchedule
from fsbench.kernels import api, op  # api.attention: the run records the kernel it ran, so no emulator warning
from fsbench.kernels.prologue import Prologue, apply as apply_prologue
from fsbench.kernels.registry import AUTO

CFG_PASSES = ("cond", "uncond")


@dataclass(frozen=True)
class SelfAttentionCall:
    """One routed self-attention call: the projections xq, xk (q and k before `prologue`; q and k themselves where
    it is None) and v, all BSHD, with the format and kernel the schedule gives it."""

    xq: torch.Tensor
    xk: torch.Tensor
    v: torch.Tensor
    fmt: str
    impl: str
    prologue: Prologue | None = None

    def qkv(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v as attention sees them (the prologue applied by its torch reference)."""
        if self.prologue is None:
            return self.xq, self.xk, self.v
        return (*apply_prologue(self.xq, self.xk, self.prologue), self.v)

    def run(self) -> torch.Tensor:
        """The call's output from the kernels, the prologue included."""
        if self.prologue is None:
            return api.attention(self.xq, self.xk, self.v, self.fmt, impl=self.impl, layout="BSHD")
        return kernels.attention_prologue(self.xq, self.xk, self.v, self.prologue, self.fmt, impl=self.impl)


Core = Callable[[SelfAttentionCall], torch.Tensor]


@dataclass
class Capture:
    """Per-call statistics of one LoadGen test; `save_qkv` keeps q, k, v of the top-N rollback calls.
    Without `out_dir` the records stay in memory (`fsbench.apply`)."""

    out_dir: Path | None
    save_qkv: int = 0
    records: list[dict[str, Any]] = field(default_factory=list)
    _top: list[tuple[float, int, dict[str, Any], tuple[torch.Tensor, ...]]] = field(default_factory=list)
    _flushed: int = 0

    def add(self, record: dict[str, Any], q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        self.records.append(record)
        if self.save_qkv <= 0:
            return
        item = (record["rollback_rate"], len(self.records), record)
        if len(self._top) < self.save_qkv:
            heapq.heappush(self._top, (*item, tuple(t.detach().cpu().clone() for t in (q, k, v))))
        elif item[0] > self._top[0][0]:
            heapq.heapreplace(self._top, (*item, tuple(t.detach().cpu().clone() for t in (q, k, v))))

    def flush(self) -> None:
        """Append the records gathered since the last flush to calls.jsonl (called after every video)."""
        if self.out_dir is None:
            return
        self.out_dir.mkdir(parents=True, exist_ok=True)
        with open(self.out_dir / "calls.jsonl", "a", encoding="utf-8") as f:
            for record in self.records[self._flushed:]:
                f.write(json.dumps(record) + "\n")
        self._flushed = len(self.records)

    def finish(self) -> dict[str, Any]:
        """Write summary.json (mean rollback rate per step and format) and the saved q, k, v; return the summary."""
        self.flush()
        out_dir = self.out_dir
        if out_dir is None:
            raise ValueError("a capture kept in memory has no folder to write its summary to")
        saved = []
        for rate, _, record, (q, k, v) in sorted(self._top, key=lambda item: -item[0]):
            name = (f"qkv/v{record['video']}-s{record['step']}-{record['expert']}-l{record['layer']}-"
                    f"{record['cfg']}.pt")
            tensors = {"q": q, "k": k, "v": v, "layout": "BSHD", "record": record}
            atomic_write(out_dir / name, functools.partial(torch.save, tensors))
            saved.append({"file": name, "rollback_rate": rate})
        summary = {
            "calls": len(self.records),
            "per_step": per_step(self.records),
            "saved_qkv": saved,
        }
        atomic_write_text(out_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
        return summary


def per_step(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Calls and mean / max rollback rate per (step, format) of captured call records."""
    rates_by: dict[tuple[int, str], list[float]] = defaultdict(list)
    for r in records:
        rates_by[(r["step"], r["fmt"])].append(r["rollback_rate"])
    return [{"step": s, "fmt": f, "calls": len(rates), "mean_rollback_rate": sum(rates) / len(rates),
             "max_rollback_rate": max(rates)} for (s, f), rates in sorted(rates_by.items())]


class SelfAttentionRouter:
    """Installs `_RoutedSelfAttention` on every attn1 of `pipe.transformer` (high-noise expert) and
    `pipe.transformer_2` (low-noise expert, where the pipeline has one) and tracks which step and CFG pass is
    running."""

    def __init__(self, schedule: ResolvedSchedule, *, impl: str = AUTO, capture: Capture | None = None,
                 core: Core | None = None, bf16_impl: str = AUTO):
        """`core(call) -> out` replaces the kernels (timing, no-op baselines); `impl` picks the kernel for the MX
        formats, `bf16_impl` the one for bf16 (auto: SDPA)."""
        self.schedule, self.impl, self.capture, self.core = schedule, impl, capture, core
        self.bf16_impl = bf16_impl
        self.kernels_used: dict[str, str] = {}  # format -> the implementation that ran it (for the manifest)
        self.kernel_fallbacks: dict[str, str] = {}  # format -> why "auto" passed over a faster kernel (manifest)
        self.video = -1
        self.step = 0
        self.expert = ""
        self.cfg_pass = -1
        self._calls = 0  # op calls since the last expert forward began: the layer of the next call
        self._installed: list[tuple[Any, Any]] = []
        self._processors: list[_RoutedSelfAttention] = []
        self._previous_core: op.Core | None = None

    def install(self, pipe: Any) -> None:
        for expert, model in (("high", pipe.transformer), ("low", getattr(pipe, "transformer_2", None))):
            if model is None:
                continue
            if len(model.blocks) != len(self.schedule.table[0]):
                raise ValueError(f"schedule resolved for {len(self.schedule.table[0])} layers, "
                                 f"{expert}-noise expert has {len(model.blocks)}")
            self._installed.append((model, model.register_forward_pre_hook(self._forward_hook(expert))))
            for layer, block in enumerate(model.blocks):
                check_norms(block.attn1)
                processor = _RoutedSelfAttention(self, layer)
                self._processors.append(processor)
                block.attn1.set_processor(processor)
        self._previous_core = op.set_core(self._op_call)
        self.set_step(self.step)

    def uninstall(self) -> None:
        """Give attn1 back diffusers' own processor and drop the step hooks (the pipeline can be reused)."""
        from diffusers.models.transformers.transformer_wan import WanAttnProcessor

        for model, handle in self._installed:
            handle.remove()
            for block in model.blocks:
                block.attn1.set_processor(WanAttnProcessor())
        self._installed.clear()
        self._processors.clear()
        op.set_core(self._previous_core)

    def begin_video(self, video: int) -> None:
        self.video, self.expert = video, ""
        self.set_step(0)

    def on_step_end(self, pipe: Any, step: int, timestep: Any, callback_kwargs: dict) -> dict:
        """`callback_on_step_end` for the pipeline: the next forward belongs to step `step + 1`."""
        self.set_step(step + 1)
        return {}

    def set_step(self, step: int) -> None:
        """The next forward belongs to `step`, first CFG pass: hand every processor the format and kernel of its
        layer at `step` (the op's string arguments)."""
        self.step, self.cfg_pass = step, -1
        if step >= len(self.schedule.table):
            return
        for processor in self._processors:
            processor.fmt = self.schedule.fmt(step, processor.layer)
            processor.impl = self.bf16_impl if processor.fmt == "bf16" else self.impl

    def _forward_hook(self, expert: str) -> Callable:
        def hook(module: torch.nn.Module, args: Any) -> None:
            self.expert = expert
            self.cfg_pass += 1
            self._calls = 0
        return hook

    def _op_call(self, xq: torch.Tensor, xk: torch.Tensor, v: torch.Tensor, fmt: str, impl: str,
                 prologue: Prologue | None) -> torch.Tensor:
        """The op's body while installed: blocks run in order, so the n-th call of a forward is layer n."""
        layer = self._calls % len(self.schedule.table[0])
        self._calls += 1
        if fmt != self.schedule.fmt(self.step, layer):
            raise RuntimeError(f"attention call {layer} of step {self.step} got {fmt}, the schedule says "
                               f"{self.schedule.fmt(self.step, layer)}: the blocks ran out of order")
        return self.attend(layer, SelfAttentionCall(xq, xk, v, fmt, impl, prologue))

    def attend(self, layer: int, call: SelfAttentionCall) -> torch.Tensor:
        if self.core is not None:
            return self.core(call)
        fmt, impl, device, head_dim = call.fmt, call.impl, call.v.device, call.v.shape[-1]
        if fmt not in self.kernels_used:
            self.kernels_used[fmt] = kernels.resolve_impl(fmt, impl, device, head_dim)
            reason = kernels.auto_fallback(fmt, device, head_dim) if impl == AUTO else None
            if reason is not None:
                self.kernel_fallbacks[fmt] = reason
                logging.getLogger("fsbench").warning("%s attention runs impl=%s: %s", fmt, self.kernels_used[fmt],
                                                     reason)
        if self.capture is None:
            return call.run()
        q, k, v = call.qkv()
        out, stats = kernels.attention_with_stats(q, k, v, fmt, impl=impl, layout="BSHD")
        record = {"video": self.video, "step": self.step, "expert": self.expert, "layer": layer,
                  "cfg": CFG_PASSES[self.cfg_pass] if self.cfg_pass < len(CFG_PASSES) else str(self.cfg_pass),
                  "fmt": fmt, "tokens": q.shape[1], **stats.as_dict()}
        self.capture.add(record, q, k, v)
        return out


class _RoutedSelfAttention:
    """A Wan attention processor for attn1: the projections of diffusers' `WanAttnProcessor`, then its RMS norms,
    RoPE and attention in one op (`torch.ops.fsbench.self_attention`), BSHD."""

    def __init__(self, router: SelfAttentionRouter, layer: int):
        self.router, self.layer = router, layer
        self.fmt, self.impl = "bf16", "auto"  # set by the router at every step
        self.op = op.self_attention_op()

    def __call__(self, attn: Any, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor | None = None,
                 attention_mask: torch.Tensor | None = None,
                 rotary_emb: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        if encoder_hidden_states is not None or attention_mask is not None:
            raise ValueError("the routed processor serves self-attention (attn1) without a mask only")
        xq, xk, v = (proj(hidden_states).unflatten(2, (attn.heads, -1)) for proj in (attn.to_q, attn.to_k, attn.to_v))
        cos, sin = rotary_emb if rotary_emb is not None else (None, None)
        out = self.op(xq, xk, v, attn.norm_q.weight, attn.norm_k.weight, _eps(attn.norm_q, xq), cos, sin, self.fmt,
                      self.impl)
        return attn.to_out[1](attn.to_out[0](out.flatten(2, 3)))


def check_norms(attn: Any) -> None:
    """ValueError unless attn1's q and k norms are the RMSNorms with weights and one eps that the prologue
    (`kernels.prologue`) computes."""
    norms = (attn.norm_q, attn.norm_k)
    if not all(isinstance(n, torch.nn.RMSNorm) and n.weight is not None for n in norms) or \
            norms[0].eps != norms[1].eps:
        raise ValueError(f"the routed processor needs attn1's norm_q and norm_k to be RMSNorms with weights and one "
                         f"eps, got {type(norms[0]).__name__} and {type(norms[1]).__name__}")


def _eps(norm: torch.nn.RMSNorm, x: torch.Tensor) -> float:
    """The RMSNorm's eps, or torch's default for x's dtype where it has none (as `rms_norm` takes it)."""
    return norm.eps if norm.eps is not None else torch.finfo(x.dtype).eps
