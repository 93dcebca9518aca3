"""`kernels.attention`: validate inputs, pick an implementation, return the output (and statistics)."""
from __future__ import annotations

import importlib.util
from typing import Any

import torch

from fsbench.kernels import registry
from fsbench.kernels.constants import FORMATS
from fsbench.kernels.prologue import Prologue, apply
from fsbench.kernels.registry import AUTO, IMPLS, resolve_impl
from fsbench.kernels.stats import AttentionStats

__all__ = ["FORMATS", "IMPLS", "LAYOUTS", "attention", "attention_prologue", "attention_with_stats", "resolve_impl"]
LAYOUTS = ("BSHD", "BHSD")
DTYPES = (torch.bfloat16, torch.float16, torch.float32)  # what the kernels read


def _check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, fmt: str, impl: str, layout: str) -> None:
    registry.check_format(fmt)
    if impl not in IMPLS:
        raise ValueError(f"unknown attention impl {impl!r}; expected one of {', '.join(IMPLS)}")
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; expected one of {', '.join(LAYOUTS)}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D ({layout}), got shape {tuple(t.shape)}")
        if t.dtype not in DTYPES:
            raise ValueError(f"{name} must be bfloat16, float16 or float32, got {t.dtype}")
    if k.shape != v.shape:
        raise ValueError(f"k and v shapes differ: {tuple(k.shape)} vs {tuple(v.shape)}")
    seq_axis = 1 if layout == "BSHD" else 2
    head_axis = 2 if layout == "BSHD" else 1
    if q.shape[0] != k.shape[0] or q.shape[head_axis] != k.shape[head_axis] or q.shape[3] != k.shape[3]:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} disagree on batch, heads or head_dim ({layout})")
    if q.shape[seq_axis] == 0 or k.shape[seq_axis] == 0:
        raise ValueError("empty sequence")
    if fmt != "bf16" and q.shape[3] % 32:
        raise ValueError(f"head_dim must be a multiple of 32 for {fmt} (MX blocks of 32), got {q.shape[3]}")
    if len({q.device, k.device, v.device}) != 1:
        raise ValueError("q, k and v must be on the same device")


def attention_with_stats(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, fmt: str = "mxfp8", *,
                         impl: str = AUTO, layout: str = "BSHD",
                         **options: Any) -> tuple[torch.Tensor, AttentionStats]:
    """Non-causal attention in format `fmt`; returns the output in q's layout and dtype, and statistics.

    options (emulate, and triton where supported): rowsum_gemm, frozen_max, schraudolph, proxy
    ("u32" | "u16" | "u16fp16" | "u8"), gate_doublings (None disables the gate), hadamard,
    sm_scale (default 1/sqrt(head_dim)).
    """
    out, stats = _dispatch(q, k, v, fmt, impl, layout, True, options)
    assert stats is not None  # asked for: every implementation returns them then
    return out, stats


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, fmt: str = "mxfp8", *,
              impl: str = AUTO, layout: str = "BSHD", **options: Any) -> torch.Tensor:
    """Non-causal attention in format `fmt` (see `attention_with_stats`); the statistics are not gathered,
    so the call never waits for the GPU."""
    return _dispatch(q, k, v, fmt, impl, layout, False, options)[0]


def _dispatch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, fmt: str, impl: str, layout: str,
              want_stats: bool, options: dict[str, Any]) -> tuple[torch.Tensor, AttentionStats | None]:
    _check_inputs(q, k, v, fmt, impl, layout)
    entry = registry.get(resolve_impl(fmt, impl, q.device, q.shape[-1]))
    unmet = entry.unmet(fmt, q.device, q.shape[-1])
    if unmet:
        raise ValueError(unmet)
    if layout == "BSHD":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    out, stats = entry.run(q, k, v, fmt, want_stats, options)
    if layout == "BSHD":
        out = out.transpose(1, 2)
    return out, stats


def attention_prologue(xq: torch.Tensor, xk: torch.Tensor, v: torch.Tensor, prologue: Prologue,
                       fmt: str = "mxfp8", *, impl: str = AUTO, **options: Any) -> torch.Tensor:
    """`attention` of q, k = `prologue.apply(xq, xk, prologue)` and v, all BSHD (B, S, H, D), output in xq's
    dtype, from the raw projections xq, xk. On a GPU with Triton, 16-bit projections are normed and rotated in one
    Triton pass (`launch.norm_rope`) before the kernel (SDPA, or the Hopper prepass and kernel); the emulator, the
    CPU and float32 projections take the torch reference."""
    _check_inputs(xq, xk, v, fmt, impl, "BSHD")  # the prologue's shapes: `apply` and `norm_rope` check them
    name = resolve_impl(fmt, impl, xq.device, xq.shape[-1])
    entry = registry.get(name)
    unmet = entry.unmet(fmt, xq.device, xq.shape[-1])
    if unmet:
        raise ValueError(unmet)
    sixteen_bits = xq.dtype in (torch.bfloat16, torch.float16) and xk.dtype == xq.dtype
    if (entry.hopper is not None or name in (registry.SDPA, registry.FA3)) and xq.device.type == "cuda" \
            and sixteen_bits and importlib.util.find_spec("triton"):
        from fsbench.kernels.hopper import launch

        q, k = launch.norm_rope(xq, xk, prologue)
    else:
        q, k = apply(xq, xk, prologue)
    return attention(q, k, v, fmt, impl=name, layout="BSHD", **options)
