"""`fsbench.sdpa`: the attention kernels behind the signature of `torch.nn.functional.scaled_dot_product_attention`
(BHSD, like SDPA), so a user's script swaps one call. What the kernels do not compute (a mask, causal attention,
dropout, grouped heads) is refused in one line rather than computed differently.

Where no GPU kernel fits the call (no CUDA device, another GPU than sm_90, an unsupported head dim), `impl="auto"`
runs the emulator: the numerical definition, far slower than a kernel. The first such call warns, once per process.
"""
from __future__ import annotations

import warnings

import torch

from fsbench.kernels import api, registry

_warned: list[str] = []  # the first call that ran the emulator under impl="auto"


def sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None = None,
         dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False, *,
         fmt: str = "mxfp8", impl: str = registry.AUTO) -> torch.Tensor:
    """Non-causal attention of (B, H, S, D) `query`, `key`, `value` in precision `fmt` (bf16, mxfp8, mxfp6,
    mxfp4); `scale` defaults to 1/sqrt(D) as in SDPA. ValueError for what SDPA takes and the kernels do not."""
    refused = unsupported(attn_mask, dropout_p, is_causal, enable_gqa)
    if refused:
        raise ValueError(f"fsbench.sdpa computes attention without {refused}; call "
                         "torch.nn.functional.scaled_dot_product_attention for it")
    warn_if_emulated(fmt, impl, query.device, query.shape[-1], stacklevel=4)  # the caller of fsbench.sdpa
    options = {} if scale is None else {"sm_scale": scale}
    return api.attention(query, key, value, fmt, impl=impl, layout="BHSD", **options)


def unsupported(attn_mask: torch.Tensor | None, dropout_p: float, is_causal: bool, enable_gqa: bool) -> str:
    """The SDPA arguments of a call that the kernels do not compute, in words ('' when none)."""
    named = [what for what, given in (("a mask (attn_mask)", attn_mask is not None), ("dropout (dropout_p)", dropout_p),
                                      ("causal masking (is_causal)", is_causal),
                                      ("grouped-query heads (enable_gqa)", enable_gqa)) if given]
    return ", ".join(named)


def warn_if_emulated(fmt: str, impl: str, device: torch.device, head_dim: int, stacklevel: int = 3) -> None:
    """One warning per process when `impl="auto"` leaves an MX format to the emulator; `stacklevel` names the
    user's line as `warnings.warn` counts it from here."""
    if _warned or impl != registry.AUTO or fmt == "bf16":
        return
    if registry.resolve_impl(fmt, impl, device, head_dim) == registry.EMULATE:
        _warned.append(fmt)
        warnings.warn(f"fsbench: no GPU kernel runs {fmt} attention on {device} at head dim {head_dim}, so the "
                      "emulator runs it (exact but slow: seconds per call at thousands of tokens); a Hopper GPU "
                      "runs the kernels, and impl='emulate' asks for the emulator without this warning",
                      RuntimeWarning, stacklevel=stacklevel)
