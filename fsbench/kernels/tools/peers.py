"""The quantized attention kernels a user would pick instead of ours: the bench rows `sage2-fp8` and `fa3-fp8`.

- `sage2-fp8`: SageAttention2's sm90 kernel (`sageattn_qk_int8_pv_fp8_cuda_sm90`): Q and K in INT8 (per-thread
  scales, K smoothed by its mean over the keys), P and V in FP8 with FP32 accumulation, its own quantization
  kernels included in the call.
- `fa3-fp8`: FlashAttention-3's FP8 forward (`flash_attn_interface.flash_attn_func` on E4M3 q, k, v), with one
  scale per (batch, head) of each tensor from its own max |x| (the descale granularity its API takes); the
  reductions and casts from BF16 are part of the timed call.

Neither ships a wheel for the H200 node: scripts/peer_sources.sh and scripts/build_peers.sh build them from their
source releases into wheelhouse/. Where one is not installed its row is left out with a note; it is never
replaced by another kernel under its name.
"""
from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import torch

E4M3_MAX = 448.0
BUILD_HINT = "build it with scripts/build_peers.sh and install its wheel from wheelhouse/"


def sage2_missing() -> str | None:
    """Why `sage2-fp8` cannot run here (SageAttention or its sm90 extension absent), None if it can. Looks for
    the extension's file without importing the package (its import compiles nothing, but loads Triton)."""
    spec = importlib.util.find_spec("sageattention")
    if spec is None:
        return f"needs SageAttention with its sm90 kernel ({BUILD_HINT})"
    folders = spec.submodule_search_locations or []
    if not any(next(Path(f).glob("_qattn_sm90*.so"), None) for f in folders):
        return f"needs SageAttention's sm90 kernel, which the installed sageattention lacks ({BUILD_HINT})"
    return None


def fa3_missing() -> str | None:
    """Why `fa3-fp8` cannot run here (FlashAttention-3's hopper package absent), None if it can."""
    if importlib.util.find_spec("flash_attn_interface") is None or importlib.util.find_spec("flash_attn_3") is None:
        return f"needs FlashAttention-3 (flash_attn_3, {BUILD_HINT})"
    return None


def _bhsd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, row: str) -> None:
    """The inputs both peers take here: BF16 or FP16, BHSD, one shape, on a CUDA device."""
    if q.dim() != 4 or q.shape != k.shape or k.shape != v.shape:
        raise ValueError(f"{row} takes three BHSD tensors of one shape, got {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    if q.dtype not in (torch.bfloat16, torch.float16) or not q.is_cuda:
        raise ValueError(f"{row} takes BF16 or FP16 tensors on a CUDA device, got {q.dtype} on {q.device}")


def sage2_fp8_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v by SageAttention2's sm90 kernel, BHSD in and out (its "HND" layout), with its
    defaults for sm90: per-thread INT8 Q and K, K smoothed, FP8 PV accumulated in FP32 and FP32 again."""
    _bhsd(q, k, v, "sage2-fp8")
    from sageattention import sageattn_qk_int8_pv_fp8_cuda_sm90

    return sageattn_qk_int8_pv_fp8_cuda_sm90(q, k, v, tensor_layout="HND", is_causal=False,
                                             qk_quant_gran="per_thread", pv_accum_dtype="fp32+fp32", smooth_k=True)


@functools.cache
def _quantize_per_head():
    """x (BHSD) -> (E4M3(x / descale) as BSHD view, descale (B, H) float32), descale = max |x| / 448 per head
    (1 for an all-zero head): compiled, so the reduction and the cast are two passes over x, not five."""
    def quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        amax = x.abs().amax(dim=(2, 3), keepdim=True).float()
        descale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
        x8 = (x.float() / descale).to(torch.float8_e4m3fn)
        return x8.transpose(1, 2), descale.flatten(2).squeeze(-1)
    return torch.compile(quantize, dynamic=False)


def fa3_fp8_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v by FlashAttention-3's FP8 forward, BHSD in and out (a view of its BSHD BF16
    output), each of q, k, v cast to E4M3 with one scale per (batch, head)."""
    _bhsd(q, k, v, "fa3-fp8")
    from flash_attn_interface import flash_attn_func

    quantize = _quantize_per_head()
    (q8, dq), (k8, dk), (v8, dv) = quantize(q), quantize(k), quantize(v)
    out = flash_attn_func(q8, k8, v8, softmax_scale=q.shape[-1] ** -0.5, causal=False,
                          q_descale=dq, k_descale=dk, v_descale=dv)
    return (out[0] if isinstance(out, tuple) else out).transpose(1, 2)
