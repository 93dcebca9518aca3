"""The attention kernels a user would pick instead of ours: the bench rows `sage2-fp8`, `fa3-fp8` and `fa3-bf16`.

- `sage2-fp8`: SageAttention2's sm90 kernel (`sageattn_qk_int8_pv_fp8_cuda_sm90`): Q and K in INT8 (per-thread
  scales, K smoothed by its mean over the keys), P and V in FP8 with FP32 accumulation, its own quantization
  kernels included in the call.
- `fa3-fp8`: FlashAttention-3's FP8 forward (`flash_attn_interface.flash_attn_func` on E4M3 q, k, v), with one
  scale per (batch, head) of each tensor from its own max |x| (the descale granularity its API takes); the
  reductions and casts from BF16 are part of the timed call.
- `fa3-bf16`: FlashAttention-3's BF16 forward from the same build (`flash_attn_func` on the BF16 q, k, v as they
  are): the fastest BF16 attention a user can install beside SDPA's.

Both FlashAttention-3 rows take grouped query heads (k and v with fewer heads than q, a divisor of q's), as
FlashAttention-3 does.

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
    """Why `fa3-fp8` and `fa3-bf16` cannot run here (FlashAttention-3's hopper package absent), None if it can."""
    if importlib.util.find_spec("flash_attn_interface") is None or importlib.util.find_spec("flash_attn_3") is None:
        return f"needs FlashAttention-3 (flash_attn_3, {BUILD_HINT})"
    return None


def _bhsd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, row: str, grouped: bool = False) -> None:
    """The inputs the peers take here: BF16 or FP16, BHSD, one shape, on a CUDA device; with `grouped`, k and v
    may have fewer heads than q (a divisor of q's)."""
    same = q.dim() == k.dim() == 4 and (k.shape[0], k.shape[2], k.shape[3]) == (q.shape[0], q.shape[2], q.shape[3])
    heads_ok = same and (k.shape[1] == q.shape[1] or grouped and k.shape[1] > 0 and q.shape[1] % k.shape[1] == 0)
    if not heads_ok or k.shape != v.shape:
        raise ValueError(f"{row} takes three BHSD tensors of one shape{' (k and v may group q heads)' * grouped}, "
                         f"got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
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
    """(x (BHSD), kv_heads) -> (E4M3(x / descale) as BSHD view, descale (B, kv_heads) float32), descale =
    max |x| / 448 over each group of H / kv_heads consecutive heads (one head for k and v; the heads that share a
    KV head for q, the granularity FlashAttention-3's q_descale takes), 1 for an all-zero group: compiled, so the
    reduction and the cast are two passes over x, not five."""
    def quantize(x: torch.Tensor, kv_heads: int) -> tuple[torch.Tensor, torch.Tensor]:
        b, h, s, d = x.shape
        groups = x.unflatten(1, (kv_heads, h // kv_heads))
        amax = groups.abs().amax(dim=(2, 3, 4), keepdim=True).float()
        descale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
        x8 = (groups.float() / descale).to(torch.float8_e4m3fn).flatten(1, 2)
        return x8.transpose(1, 2), descale.flatten(1)
    return torch.compile(quantize, dynamic=False)


def fa3_fp8_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v by FlashAttention-3's FP8 forward, BHSD in and out (a view of its BSHD BF16
    output), each of q, k, v cast to E4M3 with one scale per (batch, KV head); k and v may group q's heads."""
    _bhsd(q, k, v, "fa3-fp8", grouped=True)
    from flash_attn_interface import flash_attn_func

    quantize, kv_heads = _quantize_per_head(), k.shape[1]
    (q8, dq), (k8, dk), (v8, dv) = quantize(q, kv_heads), quantize(k, kv_heads), quantize(v, kv_heads)
    out = flash_attn_func(q8, k8, v8, softmax_scale=q.shape[-1] ** -0.5, causal=False,
                          q_descale=dq, k_descale=dk, v_descale=dv)
    return (out[0] if isinstance(out, tuple) else out).transpose(1, 2)


def fa3_bf16_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v by FlashAttention-3's BF16 forward, BHSD in and out (views of its BSHD tensors:
    no copy where the inputs are BSHD underneath, as the pipeline's are); k and v may group q's heads."""
    _bhsd(q, k, v, "fa3-bf16", grouped=True)
    from flash_attn_interface import flash_attn_func

    q_, k_, v_ = (t.transpose(1, 2) for t in (q, k, v))
    out = flash_attn_func(q_, k_, v_, softmax_scale=q.shape[-1] ** -0.5, causal=False)
    return (out[0] if isinstance(out, tuple) else out).transpose(1, 2)
