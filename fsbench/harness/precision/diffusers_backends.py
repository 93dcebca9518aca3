"""The MX kernels as diffusers attention backends: `model.set_attention_backend("fsbench_mxfp8")`.

Recent diffusers dispatch every attention of a model through `attention_dispatch`'s backend registry.
A registered backend receives q, k and v in BSHD after the processor's projections, norms and RoPE, so it runs the
plain kernel (`fsbench.kernels.attention`, no fused prepass) with one format for every call: self- and
cross-attention, every step and layer. For a per-step, per-layer schedule use `fsbench.apply`.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from fsbench import kernels
from fsbench.kernels.constants import MX_FORMATS

PREFIX = "fsbench_"


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
        if attn_mask is not None or is_causal or dropout_p or enable_gqa:
            raise ValueError(f"attention backend {PREFIX}{fmt} computes non-causal attention without a mask, dropout "
                             "or grouped heads; set it only on models whose attention has none")
        options: dict[str, Any] = {} if scale is None else {"sm_scale": scale}
        return kernels.attention(query, key, value, fmt, layout="BSHD", **options)

    attend.__name__ = f"{PREFIX}{fmt}_attention"
    return attend
