"""Number formats of the attention operands: FP8 E4M3, FP6 E2M3, FP4 E2M1 elements with OCP MX v1.0
E8M0 block scales, plus the per-row power-of-two FP8 (P in mxfp8) and the per-tensor FP8 (V in mxfp8).

All quantizers return the dequantized values in float32, which is what the emulator computes with.
Rounding is round-to-nearest-even, magnitudes above the largest normal saturate, subnormals are kept.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from fsbench.kernels.constants import E4M3_MAX


@dataclass(frozen=True)
class ElementFormat:
    """A sign-magnitude floating-point element format with subnormals and no infinities."""

    name: str
    ebits: int
    mbits: int
    bias: int
    max_normal: float

    @property
    def emax(self) -> int:
        """Exponent of the largest normal: the `emax_elem` of the OCP MX scale rule."""
        return math.floor(math.log2(self.max_normal))

    @property
    def min_exponent(self) -> int:
        """Exponent of the smallest normal; subnormals share its step."""
        return 1 - self.bias


E4M3 = ElementFormat("e4m3", ebits=4, mbits=3, bias=7, max_normal=E4M3_MAX)
E2M3 = ElementFormat("e2m3", ebits=2, mbits=3, bias=1, max_normal=7.5)
E2M1 = ElementFormat("e2m1", ebits=2, mbits=1, bias=1, max_normal=6.0)
BF16 = ElementFormat("bf16", ebits=8, mbits=7, bias=127, max_normal=float(torch.finfo(torch.bfloat16).max))

MX_BLOCK = 32
E8M0_MIN, E8M0_MAX = -127, 127


def floor_log2(x: torch.Tensor) -> torch.Tensor:
    """Exact floor(log2|x|) of non-zero finite values, as an int32 tensor (zeros give a large negative)."""
    _, exponent = torch.frexp(x)
    return torch.where(x == 0, torch.full_like(exponent, -1 << 20), exponent - 1)


def quantize_elements(x: torch.Tensor, fmt: ElementFormat) -> torch.Tensor:
    """Round float32 `x` to the nearest value of `fmt` (ties to even), saturating at +-max_normal."""
    x = x.float()
    mag = x.abs()
    exponent = floor_log2(mag).clamp(min=fmt.min_exponent)
    step = torch.ldexp(torch.ones_like(mag), exponent - fmt.mbits)
    rounded = torch.round(mag / step) * step
    return torch.copysign(rounded.clamp(max=fmt.max_normal), x)


def pow2_scale_exponent(amax: torch.Tensor, fmt: ElementFormat) -> torch.Tensor:
    """OCP MX shared exponent floor(log2(amax)) - emax_elem, clamped to the E8M0 range; zero blocks get
    the smallest scale (their elements are zero under any scale)."""
    return (floor_log2(amax.float()) - fmt.emax).clamp(E8M0_MIN, E8M0_MAX)


def quantize_scaled(x: torch.Tensor, fmt: ElementFormat, amax: torch.Tensor) -> torch.Tensor:
    """Quantize `x` with the power-of-two scale derived from `amax` (broadcastable to `x`)."""
    scale = torch.ldexp(torch.ones_like(amax, dtype=torch.float32), pow2_scale_exponent(amax, fmt))
    return quantize_elements(x.float() / scale, fmt) * scale


def quantize_mx(x: torch.Tensor, fmt: ElementFormat, axis: int = -1, block: int = MX_BLOCK) -> torch.Tensor:
    """MX quantization: blocks of `block` consecutive elements along `axis` share one E8M0 scale.

    A length that is not a multiple of `block` ends in a short block (as if zero-padded)."""
    x = x.float().movedim(axis, -1)
    n = x.shape[-1]
    pad = (-n) % block
    if pad:
        x = torch.nn.functional.pad(x, (0, pad))
    blocks = x.unflatten(-1, (-1, block))
    amax = blocks.abs().amax(dim=-1, keepdim=True)
    out = quantize_scaled(blocks, fmt, amax).flatten(-2)
    if pad:
        out = out[..., :n]
    return out.movedim(-1, axis)


def quantize_p_fp8(p: torch.Tensor) -> torch.Tensor:
    """P of mxfp8: FP8 E4M3 with one power-of-two scale per row and key tile (the last axis).

    The scale exponent is floor(log2(rowmax)) - 7, one below the MX rule, so the row's largest
    probability lands in [128, 256) and is never saturated (the MX rule clips maxima in (448, 512))."""
    amax = p.float().abs().amax(dim=-1, keepdim=True)
    exponent = (floor_log2(amax) - (E4M3.emax - 1)).clamp(E8M0_MIN, E8M0_MAX)
    scale = torch.ldexp(torch.ones_like(amax), exponent)
    return quantize_elements(p.float() / scale, E4M3) * scale


def quantize_per_tensor_fp8(x: torch.Tensor) -> torch.Tensor:
    """Per-tensor FP8 E4M3 with one float32 scale amax/448 (V of mxfp8)."""
    x = x.float()
    amax = x.abs().amax()
    if amax == 0:
        return torch.zeros_like(x)
    scale = amax / E4M3.max_normal
    return quantize_elements(x / scale, E4M3) * scale


def representable_values(fmt: ElementFormat) -> torch.Tensor:
    """Every non-negative finite value of `fmt`, ascending (for tests and re-encoding checks)."""
    values = [m * 2.0 ** (fmt.min_exponent - fmt.mbits) for m in range(1 << fmt.mbits)]
    for e in range(fmt.min_exponent, fmt.emax + 1):
        values += [(1 + m / (1 << fmt.mbits)) * 2.0 ** e for m in range(1 << fmt.mbits)]
    return torch.tensor(sorted(v for v in values if v <= fmt.max_normal), dtype=torch.float32)
