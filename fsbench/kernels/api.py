"""`kernels.attention`: validate inputs, pick an implementation, return the output (and statistics)."""
from __future__ import annotations

import functools
import re
from typing import Any

import torch

from fsbench.kernels.stats import AttentionStats

FORMATS = ("bf16", "mxfp8", "mxfp6", "mxfp4")
IMPLS = ("auto", "emulate", "triton", "gluon", "sdpa")
LAYOUTS = ("BSHD", "BHSD")
GLUON_TRITON = (3, 6)  # the Triton release the Gluon kernel was tested on (results/h200, setup.cfg's gpu extra)


def _check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, fmt: str, impl: str, layout: str) -> None:
    if fmt not in FORMATS:
        raise ValueError(f"unknown attention format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if impl not in IMPLS:
        raise ValueError(f"unknown attention impl {impl!r}; expected one of {', '.join(IMPLS)}")
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; expected one of {', '.join(LAYOUTS)}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D ({layout}), got shape {tuple(t.shape)}")
        if t.dtype not in (torch.bfloat16, torch.float16, torch.float32):
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


def resolve_impl(fmt: str, impl: str, device: torch.device, head_dim: int) -> str:
    """What "auto" runs: SDPA for bf16; on Hopper the Gluon kernel where it applies (head_dim 128; the
    faster one, results/h200/kernels_bench.md), else the Triton kernel; elsewhere the emulator."""
    if impl != "auto":
        return impl
    if fmt == "bf16":
        return "sdpa"
    if not _triton_supported(device):
        return "emulate"
    return "gluon" if gluon_fallback(fmt, impl, device, head_dim) is None and _gluon_shape(head_dim) else "triton"


def _gluon_shape(head_dim: int) -> bool:
    from fsbench.kernels.tiling import GLUON_HEAD_DIM

    return head_dim == GLUON_HEAD_DIM


def gluon_fallback(fmt: str, impl: str, device: torch.device, head_dim: int) -> str | None:
    """Why "auto" runs the Triton kernel where it would run Gluon (an older Triton without Gluon), else None."""
    if impl != "auto" or fmt == "bf16" or not _gluon_shape(head_dim) or not _triton_supported(device):
        return None
    return gluon_missing()


@functools.lru_cache(maxsize=None)
def gluon_missing() -> str | None:
    """None where this Triton has the Gluon kernel's language, else what is missing and how to get it."""
    import triton

    need = ".".join(map(str, GLUON_TRITON))
    found = tuple(int(part) for part in re.findall(r"\d+", triton.__version__)[:2])
    if found < GLUON_TRITON:
        return f"triton {triton.__version__} is older than {need}, the Gluon kernel's: pip install 'triton>={need}'"
    try:
        import triton.experimental.gluon.language.nvidia.hopper  # noqa: F401
    except ImportError as exc:
        return f"triton {triton.__version__} has no Gluon for Hopper ({exc}): pip install 'triton>={need}'"
    return None


def _triton_supported(device: torch.device) -> bool:
    """The Triton kernels target Hopper (sm_90) FP8 wgmma; elsewhere the emulator runs."""
    import importlib.util

    return (device.type == "cuda" and importlib.util.find_spec("triton") is not None
            and torch.cuda.get_device_capability(device) == (9, 0))


def attention_with_stats(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, fmt: str = "mxfp8", *,
                         impl: str = "auto", layout: str = "BSHD",
                         **options: Any) -> tuple[torch.Tensor, AttentionStats]:
    """Non-causal attention in format `fmt`; returns the output in q's layout and dtype, and statistics.

    options (emulate, and triton where supported): rowsum_gemm, frozen_max, schraudolph, proxy
    ("u32" | "u16" | "u16fp16" | "u8"), gate_doublings (None disables the gate), hadamard,
    sm_scale (default 1/sqrt(head_dim)).
    """
    out, stats = _dispatch(q, k, v, fmt, impl, layout, True, options)
    return out, stats


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, fmt: str = "mxfp8", *,
              impl: str = "auto", layout: str = "BSHD", **options: Any) -> torch.Tensor:
    """Non-causal attention in format `fmt` (see `attention_with_stats`); the statistics are not gathered,
    so the call never waits for the GPU."""
    return _dispatch(q, k, v, fmt, impl, layout, False, options)[0]


def _dispatch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, fmt: str, impl: str, layout: str,
              want_stats: bool, options: dict[str, Any]) -> tuple[torch.Tensor, AttentionStats | None]:
    _check_inputs(q, k, v, fmt, impl, layout)
    impl = resolve_impl(fmt, impl, q.device, q.shape[-1])
    if layout == "BSHD":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    if impl == "sdpa":
        if fmt != "bf16":
            raise ValueError(f"impl='sdpa' computes bf16 attention only, not {fmt}")
        out, stats = _sdpa(q, k, v, options), AttentionStats()
    elif impl == "emulate":
        from fsbench.kernels.emulator import emulate

        out, stats = emulate(q, k, v, fmt, **options)
    else:
        from fsbench.kernels.triton_attention import triton_attention

        out, stats = triton_attention(q, k, v, fmt, stats=want_stats, engine=impl, **options)
    if layout == "BSHD":
        out = out.transpose(1, 2)
    return out, stats


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, options: dict[str, Any]) -> torch.Tensor:
    unknown = set(options) - {"sm_scale"}
    if unknown:
        raise ValueError(f"impl='sdpa' takes no options {sorted(unknown)}")
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=options.get("sm_scale"))
