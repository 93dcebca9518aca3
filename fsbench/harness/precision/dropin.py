"""`fsbench.patch(fmt)`: every attention a script runs inside the block goes through the MX kernels, and both
switches are put back on exit.

Two switches cover what a script may call: `torch.nn.functional.scaled_dot_product_attention` (the calls the
kernels compute: 4-D, head dim a multiple of the MX block, no mask, not causal, no dropout, no grouped heads; the
others keep the original SDPA, so a text encoder's masked attention is untouched), and diffusers' process-wide
active attention backend, set to `fsbench_<fmt>` (`diffusers_backends`). Leaving the block restores the SDPA
function and the backend that were active before it; a model's own `set_attention_backend` choice is left as it
was.
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch

from fsbench.errors import FsbenchError
from fsbench.harness.precision import diffusers_backends
from fsbench.kernels import registry
from fsbench.kernels.dropin import sdpa, unsupported
from fsbench.kernels.reference.formats import MX_BLOCK

_inside = threading.local()  # set while fsbench.sdpa runs: its own SDPA calls (bf16) reach the original


@contextlib.contextmanager
def patch(fmt: str = "mxfp8", impl: str = registry.AUTO) -> Iterator[None]:
    """Route SDPA and diffusers' active attention backend through `fsbench.sdpa` in `fmt` for the block."""
    if fmt not in diffusers_backends.MX_FORMATS:
        raise FsbenchError(f"fsbench.patch takes an MX format ({', '.join(diffusers_backends.MX_FORMATS)}), got "
                           f"{fmt!r}; bf16 is what SDPA computes already")
    functional = torch.nn.functional
    original = functional.scaled_dot_product_attention
    with contextlib.ExitStack() as stack:
        stack.enter_context(_diffusers_backend(fmt))
        functional.scaled_dot_product_attention = _routed(original, fmt, impl)
        stack.callback(setattr, functional, "scaled_dot_product_attention", original)
        yield


def _routed(original: Callable[..., torch.Tensor], fmt: str, impl: str) -> Callable[..., torch.Tensor]:
    def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                     attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                                     is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False,
                                     **extra: Any) -> torch.Tensor:
        if (getattr(_inside, "active", False) or extra or query.dim() != 4 or query.shape[-1] % MX_BLOCK
                or unsupported(attn_mask, dropout_p, is_causal, enable_gqa)):
            gqa = {"enable_gqa": True} if enable_gqa else {}  # only where given: older torch has no such argument
            return original(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, **gqa, **extra)
        _inside.active = True
        try:
            return sdpa(query, key, value, scale=scale, fmt=fmt, impl=impl)
        finally:
            _inside.active = False

    return scaled_dot_product_attention


@contextlib.contextmanager
def _diffusers_backend(fmt: str) -> Iterator[None]:
    """diffusers' active backend is fsbench_<fmt> for the block (nothing where diffusers has no registry)."""
    if not diffusers_backends.register():
        yield
        return
    from diffusers.models.attention_dispatch import AttentionBackendName, _AttentionBackendRegistry

    before = _AttentionBackendRegistry._active_backend
    _AttentionBackendRegistry.set_active_backend(AttentionBackendName(diffusers_backends.PREFIX + fmt))
    try:
        yield
    finally:
        _AttentionBackendRegistry.set_active_backend(before)
