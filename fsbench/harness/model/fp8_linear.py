"""FP8 GEMMs for the transformer blocks' linear layers (`--gemm fp8`), the paper's "quantized GEMMs" column.

Weights are quantized once to float8_e4m3fn with one scale per output row; activations are quantized on the
fly with one scale per token row (scale = row amax / 448, round-to-nearest-even, saturating). On a CUDA GPU
the product runs through `torch._scaled_mm` (row-wise scales, bias fused, FP8 tensor cores on Hopper); on a
CPU it is emulated exactly: quantize, dequantize in float32, matmul, so the tiny model tests the numerics.
Only the blocks' linears change (attn1, attn2, FFN); embeddings and the output projection stay BF16.
"""
from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn

E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0
# torch._scaled_mm needs both GEMM dimensions of the weight to be multiples of 16.
ALIGN = 16


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(E4M3 values, float32 scale per row) of a 2-D tensor: x ~= values * scale, row amax -> 448."""
    amax = x.abs().amax(dim=-1, keepdim=True).float()
    scale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    values = (x.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)
    return values, scale


class Fp8Linear(nn.Module):
    """A drop-in for `nn.Linear` (inference only) computing y = x W^T + b with FP8 operands and row scales."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.out_dtype = linear.weight.dtype
        weight, scale = quantize_rows(linear.weight.detach())
        self.register_buffer("weight", weight)                  # (out, in) E4M3, row-major
        self.register_buffer("weight_scale", scale.reshape(1, -1))  # (1, out) float32
        bias = linear.bias.detach().to(self.out_dtype) if linear.bias is not None else None
        self.register_buffer("bias", bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        if x.is_cuda:
            quantize = quantize_rows if torch.compiler.is_compiling() else _fused_quantize_rows()
            values, scale = quantize(x.reshape(-1, self.in_features))
            out = torch._scaled_mm(values, self.weight.t(), scale_a=scale, scale_b=self.weight_scale,
                                   bias=self.bias, out_dtype=self.out_dtype, use_fast_accum=True)
        else:
            values, scale = quantize_rows(x.reshape(-1, self.in_features))
            out = emulated_mm(values, scale, self.weight, self.weight_scale, self.bias).to(self.out_dtype)
        return out.reshape(*shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, e4m3 row-scaled"


@functools.cache
def _fused_quantize_rows() -> Any:
    """`quantize_rows` as one fused GPU kernel (amax and cast; eager it is five passes over the activation,
    as much memory traffic as the GEMM saves). Inside compiled blocks dynamo inlines it."""
    return torch.compile(quantize_rows, dynamic=False)


def emulated_mm(a: torch.Tensor, a_scale: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor,
                bias: torch.Tensor | None) -> torch.Tensor:
    """What `_scaled_mm` computes, in float32: (a * a_scale) @ (w * w_scale^T)^T + bias."""
    out = (a.float() * a_scale) @ (w.float() * w_scale.reshape(-1, 1)).t()
    return out + bias.float() if bias is not None else out


def convert(experts: list[nn.Module]) -> dict[str, Any]:
    """Replace every eligible `nn.Linear` inside the experts' transformer blocks; returns what changed."""
    converted, skipped = 0, []
    for expert in experts:
        for block in expert.blocks:
            for name, module in list(block.named_modules()):
                if type(module) is not nn.Linear:
                    continue
                if module.in_features % ALIGN or module.out_features % ALIGN:
                    skipped.append(f"{name} ({module.in_features}x{module.out_features})")
                    continue
                parent, _, leaf = name.rpartition(".")
                setattr(block.get_submodule(parent) if parent else block, leaf, Fp8Linear(module))
                converted += 1
    return {"gemm": "fp8", "scaling": "e4m3, weight per output row, activation per token row",
            "kernel": ("torch._scaled_mm (use_fast_accum), activations quantized by a torch.compile'd kernel"
                       if _on_cuda(experts) else "emulated (float32)"),
            "linears_converted": converted, "linears_skipped": sorted(set(skipped))}


def _on_cuda(experts: list[nn.Module]) -> bool:
    return any(p.is_cuda for e in experts for p in e.parameters())
