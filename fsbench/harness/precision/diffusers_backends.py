"""The MX kernels as diffusers attention backends: `model.set_attention_backend("fsbench_mxfp8")`.

Recent diffusers dispatch every attention of a model through `attention_dispatch`'s backend registry.
A registered backend receives q, k and v in BSHD after the processor's projections, norms and RoPE, so it runs the
plain kernel (`fsbench.sdpa` on BHSD views: no fused prepass, torch's SDPA gradient backward) with one format for
every call: self- and cross-attention, every step and layer. A call it cannot compute is a ValueError, except inside
`fsbench.patch`, which hands such calls to torch's SDPA. For a per-step, per-layer schedule use `fsbench.apply`.
"""
from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any

import torch

from fsbench.kernels import dropin, registry
from fsbench.kernels.constants import MX_FORMATS

PREFIX = "fsbench_"
_patched: contextvars.ContextVar[str | None] = contextvars.ContextVar("fsbench_patch_impl", default=None)


@contextlib.contextmanager
def patched(impl: str) -> Iterator[None]:
    """For the block (`fsbench.patch`), the backends run `impl` and hand the calls they cannot compute to torch."""
    token = _patched.set(impl)
    try:
        yield
    finally:
        _patched.reset(token)


def names() -> list[str]:
    """The backend names this module registers: fsbench_mxfp8, fsbench_mxfp6, fsbench_mxfp4."""
    return [PREFIX + fmt for fmt in MX_FORMATS]


def available() -> bool:
    """Whether the installed diffusers has the attention-backend registry."""
    try:
        from diffusers.models.attention_dispatch import AttentionBackendName, _AttentionBackendRegistry  # noqa: F401
    except ImportError:
        return False
    return True


def register() -> list[str]:
    """Register the MX formats as attention backends (idempotent); the names registered, [] without a registry."""
    if not available():
        return []
    from diffusers.models.attention_dispatch import AttentionBackendName, _AttentionBackendRegistry

    for fmt in MX_FORMATS:
        member = _backend_name(AttentionBackendName, PREFIX + fmt)
        if member not in _AttentionBackendRegistry._backends:
            _AttentionBackendRegistry.register(member)(_backend(fmt))
    return names()


def _backend_name(enum: Any, value: str) -> Any:
    """`value` as a member of diffusers' AttentionBackendName, added if absent (the registry is keyed by it and
    `set_attention_backend` accepts only its values; diffusers offers no public way to extend it)."""
    if value in enum._value2member_map_:
        return enum(value)
    member = str.__new__(enum, value)
    member._name_, member._value_ = value.upper(), value
    member._sort_order_ = len(enum._member_names_)
    enum._member_map_[member._name_] = member
    enum._value2member_map_[value] = member
    enum._member_names_.append(member._name_)
    return member


def _backend(fmt: str) -> Callable[..., torch.Tensor]:
    def attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None = None,
               dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
               enable_gqa: bool = False) -> torch.Tensor:
        q, k, v = (t.transpose(1, 2) for t in (query, key, value))  # BHSD views, as SDPA takes them
        impl = _patched.get()
        if impl is not None and not dropin.computes(q, k, v, attn_mask, dropout_p, is_causal, enable_gqa, fmt, impl):
            gqa = {"enable_gqa": True} if enable_gqa else {}  # only where given: older torch has no such argument
            return dropin.torch_sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale=scale, **gqa).transpose(1, 2)
        refused = dropin.unsupported(q, k, v, attn_mask, dropout_p, is_causal, enable_gqa, fmt)
        if refused:
            raise ValueError(f"attention backend {PREFIX}{fmt} computes attention without {refused}; set it only on "
                             "models whose attention has none")
        return dropin.sdpa(q, k, v, scale=scale, fmt=fmt, impl=impl or registry.AUTO).transpose(1, 2)

    attend.__name__ = f"{PREFIX}{fmt}_attention"
    return attend
