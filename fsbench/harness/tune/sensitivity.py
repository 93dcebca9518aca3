"""Sensitivity: how far each candidate format moves every (step, layer)'s self-attention output from BF16.

One BF16 pass over the calibration prompts runs through the router's capture path (`precision.router.Capture`):
every self-attention call hands its q, k and v to `SensitivityCapture.add`, which attends them again in each
candidate format, with the overflow gate and without it, and keeps only the running sums of the relative L2 error
and the cosine against BF16. Nothing of q, k, v is stored, so the pass fits at the real model's shapes.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from fsbench import kernels
from fsbench.harness.precision.router import Capture, SelfAttentionRouter
from fsbench.harness.run.orchestrator import RunSpec, VideoGenerator

VARIANTS = {"gate": {}, "nogate": {"gate_doublings": None}}  # the kernels' options of each variant


@dataclass
class SensitivityCapture(Capture):
    """A `Capture` that scores every call in `formats` against its BF16 output instead of keeping q, k, v."""

    formats: tuple[str, ...] = ()
    impl: str = "auto"
    sums: dict[tuple[int, int, str, str], list[float]] = field(default_factory=lambda: defaultdict(lambda: [0.0] * 3))

    def add(self, record: dict[str, Any], q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        super().add(record, q, k, v)
        ref = kernels.attention(q, k, v, "bf16", layout="BSHD").float().flatten()
        for fmt in self.formats:
            gated, stats = kernels.attention_with_stats(q, k, v, fmt, impl=self.impl, layout="BSHD")
            # Where the gate never fired (no rollback) the call without it computes the very same tiles.
            ungated = gated if not stats.rollbacks else kernels.attention(q, k, v, fmt, impl=self.impl, layout="BSHD",
                                                                         **VARIANTS["nogate"])
            for variant, out in (("gate", gated), ("nogate", ungated)):
                out = out.float().flatten()
                rel = float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref).clamp_min(1e-30))
                cos = float(torch.nn.functional.cosine_similarity(out, ref, dim=0))
                acc = self.sums[(record["step"], record["layer"], fmt, variant)]
                acc[0], acc[1], acc[2] = acc[0] + rel, acc[1] + cos, acc[2] + 1

    def table(self, videos: int) -> list[dict[str, Any]]:
        """One row per (step, layer, format): calls per video and the mean error of each variant."""
        rows: dict[tuple[int, int, str], dict[str, Any]] = {}
        for (step, layer, fmt, variant), (rel, cos, n) in sorted(self.sums.items()):
            row = rows.setdefault((step, layer, fmt), {"step": step, "layer": layer, "fmt": fmt,
                                                       "calls_per_video": n / videos})
            suffix = "" if variant == "gate" else "_nogate"
            row[f"rel_l2{suffix}"], row[f"cosine{suffix}"] = rel / n, cos / n
        return list(rows.values())


def calibrate(pipe: Any, spec: RunSpec, formats: tuple[str, ...], impl: str) -> list[dict[str, Any]]:
    """Generate every prompt of `spec` (its schedule: BF16) and return the sensitivity table."""
    capture = SensitivityCapture(None, formats=formats, impl=impl)
    router = SelfAttentionRouter(spec.schedule, impl=impl, capture=capture)
    router.install(pipe)
    try:
        generator = VideoGenerator(pipe, spec, Path(), router, reuse=False)
        for index in range(len(spec.prompts.texts)):
            generator.frames(index)
    finally:
        router.uninstall()
    return capture.table(len(spec.prompts.texts))
