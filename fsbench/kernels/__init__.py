"""Attention numerics for fsbench: MX formats, Hadamard rotation, Schraudolph proxies, the reference
emulator of Fused-Softmax attention and the Triton kernels.

Importing this package does no work: no CUDA initialisation, no compilation, no heavy imports. The
public entry points load their modules on first call.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from fsbench.kernels.dropin import sdpa
    from fsbench.kernels.prologue import Prologue
    from fsbench.kernels.stats import AttentionStats


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, fmt: str = "mxfp8", *,
              impl: str = "auto", layout: str = "BSHD", **options: Any) -> torch.Tensor:
    """Non-causal attention of `q, k, v` (layout BSHD or BHSD) in precision `fmt`; see `kernels.api`. Warns once
    when `impl="auto"` finds no GPU kernel for the call and runs the emulator."""
    from fsbench.kernels.api import attention as _attention
    from fsbench.kernels.dropin import warn_if_emulated

    warn_if_emulated(fmt, impl, q.device, q.shape[-1])
    return _attention(q, k, v, fmt, impl=impl, layout=layout, **options)


def attention_with_stats(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, fmt: str = "mxfp8", *,
                         impl: str = "auto", layout: str = "BSHD",
                         **options: Any) -> tuple[torch.Tensor, AttentionStats]:
    """Like `attention`, and also returns the call's `AttentionStats` (key tiles, rollbacks, overflow)."""
    from fsbench.kernels.api import attention_with_stats as _attention_with_stats

    return _attention_with_stats(q, k, v, fmt, impl=impl, layout=layout, **options)


def attention_prologue(xq: torch.Tensor, xk: torch.Tensor, v: torch.Tensor, prologue: Prologue,
                       fmt: str = "mxfp8", *, impl: str = "auto", **options: Any) -> torch.Tensor:
    """`attention` of Wan's normed and rotated q, k (`kernels.prologue`) from the raw projections xq, xk, all BSHD;
    on a GPU one Triton pass norms and rotates them before the kernel. See `kernels.api`."""
    from fsbench.kernels.api import attention_prologue as _attention_prologue

    return _attention_prologue(xq, xk, v, prologue, fmt, impl=impl, **options)


def resolve_impl(fmt: str, impl: str, device: torch.device, head_dim: int) -> str:
    """The implementation `attention(..., impl=impl)` runs for `fmt` on `device` at `head_dim`."""
    from fsbench.kernels.api import resolve_impl as _resolve_impl

    return _resolve_impl(fmt, impl, device, head_dim)


def auto_fallback(fmt: str, device: torch.device, head_dim: int) -> str | None:
    """Why `impl="auto"` passed over a kernel that takes this call but whose software is missing (an older Triton
    without Gluon runs the Triton kernel), else None."""
    from fsbench.kernels.registry import auto_fallback as _auto_fallback

    return _auto_fallback(fmt, device, head_dim)


_LAZY = {"sdpa": ("fsbench.kernels.dropin", "sdpa")}  # the function itself, so that `help` shows its docstring


def __getattr__(name: str) -> Any:
    """The entry points of `_LAZY`, imported on first access (PEP 562)."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    module, attr = _LAZY[name]
    return getattr(importlib.import_module(module), attr)


__all__ = ["attention", "attention_prologue", "attention_with_stats", "auto_fallback", "resolve_impl", "sdpa"]
