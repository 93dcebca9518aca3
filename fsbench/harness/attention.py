"""Route every self-attention (`attn1`) of both Wan experts through `kernels.attention` with the format the
schedule gives for (denoising step, layer); cross-attention (`attn2`) keeps diffusers' BF16 SDPA.

The step comes from the pipeline's public `callback_on_step_end` (pass `router.on_step_end`), the CFG pass
from counting expert forwards within a step (the pipeline runs cond, then uncond, as two batch-1 calls).
With a `Capture`, every call's `AttentionStats` is recorded and q, k, v of the calls with the highest
rollback rates are kept for offline kernel studies.
"""
from __future__ import annotations

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
from fsbench.harness.results import atomic_write, atomic_write_text
from fsbench.harness.schedule import ResolvedSchedule

Core = Callable[..., torch.Tensor]
CFG_PASSES = ("cond", "uncond")


@dataclass
class Capture:
    """Per-call statistics of one LoadGen test; `save_qkv` keeps q, k, v of the top-N rollback calls."""

    out_dir: Path
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
        self.out_dir.mkdir(parents=True, exist_ok=True)
        with open(self.out_dir / "calls.jsonl", "a", encoding="utf-8") as f:
            for record in self.records[self._flushed:]:
                f.write(json.dumps(record) + "\n")
        self._flushed = len(self.records)

    def finish(self) -> dict[str, Any]:
        """Write summary.json (mean rollback rate per step and format) and the saved q, k, v; return the summary."""
        self.flush()
        per_step: dict[tuple[int, str], list[float]] = defaultdict(list)
        for r in self.records:
            per_step[(r["step"], r["fmt"])].append(r["rollback_rate"])
        saved = []
        for rate, _, record, (q, k, v) in sorted(self._top, key=lambda item: -item[0]):
            name = (f"qkv/v{record['video']}-s{record['step']}-{record['expert']}-l{record['layer']}-"
                    f"{record['cfg']}.pt")
            atomic_write(self.out_dir / name, lambda tmp, q=q, k=k, v=v, r=record: torch.save(
                {"q": q, "k": k, "v": v, "layout": "BSHD", "record": r}, tmp))
            saved.append({"file": name, "rollback_rate": rate})
        summary = {
            "calls": len(self.records),
            "per_step": [{"step": s, "fmt": f, "calls": len(rates), "mean_rollback_rate": sum(rates) / len(rates),
                          "max_rollback_rate": max(rates)} for (s, f), rates in sorted(per_step.items())],
            "saved_qkv": saved,
        }
        atomic_write_text(self.out_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
        return summary


class SelfAttentionRouter:
    """Installs `_RoutedSelfAttention` on every attn1 of `pipe.transformer` (high-noise expert) and
    `pipe.transformer_2` (low-noise expert) and tracks which step and CFG pass is running."""

    def __init__(self, schedule: ResolvedSchedule, *, impl: str = "auto", capture: Capture | None = None,
                 core: Core | None = None):
        """`core(q, k, v, fmt) -> out` replaces kernels.attention (timing, no-op baselines); `impl` picks the
        kernel for the MX formats (bf16 always runs SDPA)."""
        self.schedule, self.impl, self.capture, self.core = schedule, impl, capture, core
        self.kernels_used: dict[str, str] = {}  # format -> the implementation that ran it (for the manifest)
        self.kernel_fallbacks: dict[str, str] = {}  # format -> why "auto" ran Triton, not Gluon (for the manifest)
        self.video = -1
        self.step = 0
        self.expert = ""
        self.cfg_pass = -1
        self._installed: list[tuple[Any, Any]] = []

    def install(self, pipe: Any) -> None:
        for expert, model in (("high", pipe.transformer), ("low", pipe.transformer_2)):
            if len(model.blocks) != len(self.schedule.table[0]):
                raise ValueError(f"schedule resolved for {len(self.schedule.table[0])} layers, "
                                 f"{expert}-noise expert has {len(model.blocks)}")
            self._installed.append((model, model.register_forward_pre_hook(self._forward_hook(expert))))
            for layer, block in enumerate(model.blocks):
                block.attn1.set_processor(_RoutedSelfAttention(self, layer))

    def uninstall(self) -> None:
        """Give attn1 back diffusers' own processor and drop the step hooks (the pipeline can be reused)."""
        from diffusers.models.transformers.transformer_wan import WanAttnProcessor

        for model, handle in self._installed:
            handle.remove()
            for block in model.blocks:
                block.attn1.set_processor(WanAttnProcessor())
        self._installed.clear()

    def begin_video(self, video: int) -> None:
        self.video, self.step, self.cfg_pass, self.expert = video, 0, -1, ""

    def on_step_end(self, pipe: Any, step: int, timestep: Any, callback_kwargs: dict) -> dict:
        """`callback_on_step_end` for the pipeline: the next forward belongs to step `step + 1`."""
        self.step, self.cfg_pass = step + 1, -1
        return {}

    def _forward_hook(self, expert: str) -> Callable:
        def hook(module: torch.nn.Module, args: Any) -> None:
            self.expert = expert
            self.cfg_pass += 1
        return hook

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        fmt = self.schedule.fmt(self.step, layer)
        if self.core is not None:
            return self.core(q, k, v, fmt)
        impl = "auto" if fmt == "bf16" else self.impl
        if fmt not in self.kernels_used:
            self.kernels_used[fmt] = kernels.resolve_impl(fmt, impl, q.device, q.shape[-1])
            reason = kernels.gluon_fallback(fmt, impl, q.device, q.shape[-1])
            if reason is not None:
                self.kernel_fallbacks[fmt] = reason
                logging.getLogger("fsbench").warning("%s attention runs the Triton kernel: %s", fmt, reason)
        if self.capture is None:
            return kernels.attention(q, k, v, fmt, impl=impl, layout="BSHD")
        out, stats = kernels.attention_with_stats(q, k, v, fmt, impl=impl, layout="BSHD")
        record = {"video": self.video, "step": self.step, "expert": self.expert, "layer": layer,
                  "cfg": CFG_PASSES[self.cfg_pass] if self.cfg_pass < len(CFG_PASSES) else str(self.cfg_pass),
                  "fmt": fmt, "tokens": q.shape[1], **stats.as_dict()}
        self.capture.add(record, q, k, v)
        return out


class _RoutedSelfAttention:
    """A Wan attention processor for attn1: the projections, RMS norms and RoPE of diffusers'
    `WanAttnProcessor`, then the router's attention core in BSHD layout."""

    def __init__(self, router: SelfAttentionRouter, layer: int):
        self.router, self.layer = router, layer

    def __call__(self, attn: Any, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor | None = None,
                 attention_mask: torch.Tensor | None = None,
                 rotary_emb: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        if encoder_hidden_states is not None or attention_mask is not None:
            raise ValueError("the routed processor serves self-attention (attn1) without a mask only")
        q = attn.norm_q(attn.to_q(hidden_states)).unflatten(2, (attn.heads, -1))
        k = attn.norm_k(attn.to_k(hidden_states)).unflatten(2, (attn.heads, -1))
        v = attn.to_v(hidden_states).unflatten(2, (attn.heads, -1))
        if rotary_emb is not None:
            q, k = _rope(q, *rotary_emb), _rope(k, *rotary_emb)
        out = self._attend(q, k, v).flatten(2, 3).type_as(q)
        return attn.to_out[1](attn.to_out[0](out))

    # Outside torch.compile graphs (--compile): the layer and the step are Python state, so inside a graph
    # dynamo would recompile once per layer and per step; the Triton kernels are opaque to it anyway.
    # Contiguous (the copy `flatten` would make anyway): every kernel then hands the graph the same strides.
    @torch.compiler.disable
    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return self.router.attend(self.layer, q, k, v).contiguous()


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Wan's RoPE on interleaved (even, odd) channel pairs; cos/sin are (1, S, 1, D)."""
    even, odd = x.unflatten(-1, (-1, 2)).unbind(-1)
    c, s = cos[..., 0::2], sin[..., 1::2]
    return torch.stack((even * c - odd * s, even * s + odd * c), dim=-1).flatten(-2).type_as(x)
