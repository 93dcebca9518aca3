"""fsbench: an MLPerf-style benchmark harness for text-to-video diffusion with quantized Fused-Softmax attention.

Importing the package does no work (no torch, no CUDA); the public entry points load their modules on first use:
`fsbench.kernels.attention` (the attention kernels), `fsbench.attention` (the same function), `fsbench.sdpa` (the
kernels with the signature of torch's scaled_dot_product_attention), `fsbench.patch` (every SDPA call and diffusers
attention of a block through them), `fsbench.apply` (a precision schedule on a diffusers Wan pipeline) and
`fsbench.register_attention_backends` (the MX kernels as diffusers attention backends).
"""
from __future__ import annotations

from typing import Any

__version__ = "0.2.0"

_LAZY = {"attention": ("fsbench.kernels", "attention"),
         "attention_with_stats": ("fsbench.kernels", "attention_with_stats"),
         "sdpa": ("fsbench.kernels", "sdpa"),
         "patch": ("fsbench.harness.precision.dropin", "patch"),
         "apply": ("fsbench.harness.precision.apply", "apply"),
         "register_attention_backends": ("fsbench.harness.precision.diffusers_backends", "register")}


def __getattr__(name: str) -> Any:
    """Public entry points, imported on first access (PEP 562)."""
    if name not in _LAZY:
        raise AttributeError(f"module 'fsbench' has no attribute {name!r}")
    import importlib

    module, attr = _LAZY[name]
    return getattr(importlib.import_module(module), attr)


__all__ = ["__version__", *_LAZY]
