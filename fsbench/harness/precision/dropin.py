"""`fsbench.patch(fmt)`: every attention a script runs inside the block goes through the MX kernels, and both
switches are put back on exit.

Two switches cover what a script may call: `torch.nn.functional.scaled_dot_product_attention`, and diffusers'
process-wide active attention backend, set to `fsbench_<fmt>` (`diffusers_backends`). Either runs `fsbench.sdpa`
(the kernels' forward, torch's SDPA gradient backward) on every call the kernels compute, and hands every other
call to torch's SDPA unchanged (`kernels.dropin.computes`): a mask, causal masking, dropout, grouped heads, a value
head dim other than the query's, float64, fewer than 3 dims, an empty batch or sequence; so a text encoder's
masked attention is untouched. Leaving the block restores the SDPA function and the backend that were active
before it; a model's own `set_attention_backend` choice is left as it was.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from fsbench.harness.precision import diffusers_backends
from fsbench.kernels import registry
from fsbench.kernels.dropin import computes, running, sdpa


@contextlib.contextmanager
def patch(fmt: str = "mxfp8", impl: str = registry.AUTO) -> Iterator[None]:
    """Route SDPA and diffusers' active attention backend through `fsbench.sdpa` in `fmt` for the block; a
    ValueError, as `fsbench.sdpa` gives, for a format other than mxfp8, mxfp6 and mxfp4 or an unknown impl."""
    if fmt not in diffusers_backends.MX_FORMATS:
        why = "; bf16 is what SDPA computes already" if fmt == "bf16" else ""
        raise ValueError(f"fsbench.patch takes an MX format ({', '.join(diffusers_backends.MX_FORMATS)}), got "
                         f"{fmt!r}{why}")
    if impl != registry.AUTO:
        registry.get(impl)  # an unknown impl: a ValueError naming the known ones before anything is switched
    functional = torch.nn.functional
    original = functional.scaled_dot_product_attention
    with contextlib.ExitStack() as stack:
        stack.enter_context(_diffusers_backend(fmt, impl))
        functional.scaled_dot_product_attention = _routed(original, fmt, impl)
        stack.callback(setattr, functional, "scaled_dot_product_attention", original)
        yield


def _routed(original: Callable[..., torch.Tensor], fmt: str, impl: str) -> Callable[..., torch.Tensor]:
    def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                     attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                                     is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False,
                                     **extra: Any) -> torch.Tensor:
        if running() or extra or not computes(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa, fmt,
                                              impl):
            gqa = {"enable_gqa": True} if enable_gqa else {}  # only where given: older torch has no such argument
            return original(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, **gqa, **extra)
        return sdpa(query, key, value, scale=scale, fmt=fmt, impl=impl)

    return scaled_dot_product_attention


@contextlib.contextmanager
def _diffusers_backend(fmt: str, impl: str) -> Iterator[None]:
    """diffusers' active backend is fsbench_<fmt> for the block, running `impl` and handing what the kernels do not
    compute to torch (nothing where diffusers has no registry)."""
    if not diffusers_backends.register():
        yield
        return
    from diffusers.models.attention_dispatch import AttentionBackendName, _AttentionBackendRegistry

    before = _AttentionBackendRegistry._active_backend
    _AttentionBackendRegistry.set_active_backend(AttentionBackendName(diffusers_backends.PREFIX + fmt))
    try:
        with diffusers_backends.patched(impl):
            yield
    finally:
        _AttentionBackendRegistry.set_active_backend(before)
