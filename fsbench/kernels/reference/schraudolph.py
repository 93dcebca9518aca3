"""Schraudolph's exponential: 2^x written as a bit pattern (exponent field = integer part, mantissa field
= fractional part, linear in between) and read back as a float of the proxy's width (paper Section 4.2,
Appendix B).

pattern = round_half_even(2^M * (x + bias - epsilon)); the pattern is clamped at 0 from below (a kernel
clamps the score) and wraps above, as an integer written into a 16-bit field would, so an overshoot
climbs into the sign bit and the Inf/NaN codes exactly as it does in hardware.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from fsbench.kernels.constants import GRID_STEP, SCHRAUDOLPH_EPSILON as EPSILON


@dataclass(frozen=True)
class Proxy:
    """An unsigned integer of `bits` bits whose pattern is read as the float type `view_dtype`."""

    key: str
    label: str
    mbits: int
    ebits: int
    view_dtype: torch.dtype

    @property
    def bits(self) -> int:
        return 1 + self.ebits + self.mbits

    @property
    def bias(self) -> int:
        return (1 << (self.ebits - 1)) - 1

    @property
    def reach_log2(self) -> int:
        """log2 of the exponent-scale reach of P, about 2^(2^(E-1)) (paper Table 8)."""
        return 1 << (self.ebits - 1)


PROXIES = {
    "u32": Proxy("u32", "U32 / FP32", mbits=23, ebits=8, view_dtype=torch.float32),
    "u16fp16": Proxy("u16fp16", "U16 / FP16", mbits=10, ebits=5, view_dtype=torch.float16),
    "u16": Proxy("u16", "U16 / BF16", mbits=7, ebits=8, view_dtype=torch.bfloat16),
    "u8": Proxy("u8", "U8 / E4M3", mbits=3, ebits=4, view_dtype=torch.float8_e4m3fn),
}
_SIGNED = {32: torch.int32, 16: torch.int16, 8: torch.int8}


def get_proxy(key: str) -> Proxy:
    try:
        return PROXIES[key]
    except KeyError:
        raise ValueError(f"unknown Schraudolph proxy {key!r}; expected one of {', '.join(PROXIES)}") from None


def pattern(x: torch.Tensor, proxy: Proxy, epsilon: float = EPSILON) -> torch.Tensor:
    """The proxy's integer bit pattern for 2^x (int64, before wrapping to the proxy width).

    x * 2^M + 2^M (bias - epsilon) is evaluated in float64 (exact for float32 x) and rounded to the
    nearest integer, ties to even. A kernel evaluating it in float32 may differ by one unit on the rare
    near-ties."""
    scale = float(1 << proxy.mbits)
    p = torch.round(x.double() * scale + scale * (proxy.bias - epsilon))
    return p.clamp(min=0).to(torch.int64)


def read_pattern(p: torch.Tensor, proxy: Proxy) -> torch.Tensor:
    """A non-negative integer pattern written into the proxy's field (wrapping above) and read as its float."""
    bits = proxy.bits
    p = p & ((1 << bits) - 1)
    p = torch.where(p >= 1 << (bits - 1), p - (1 << bits), p)
    return p.to(_SIGNED[bits]).view(proxy.view_dtype).float()


def stage_a(x: torch.Tensor, proxy: Proxy, epsilon: float = EPSILON) -> torch.Tensor:
    """Stage-A: approximate 2^x by reading the pattern as the proxy float; returns float32."""
    return read_pattern(pattern(x, proxy, epsilon), proxy)


# The frozen reference on the pattern grid. A row's reference m is speculative (it only scales the row's
# probabilities, which the row sum undoes), so it is chosen where the pattern offset 2^M (bias - eps) - 2^M m
# is an integer c: the pattern of a score x is then round(2^M x + c), one rounding of an exact product and sum
# (one saturating FMA in a kernel), and a rollback by delta doublings is the exact integer shift c -= 2^M delta.


def pattern_bias(proxy: Proxy, epsilon: float = EPSILON) -> float:
    """D = 2^M (bias - epsilon) as the float32 a kernel holds it (the pattern of the reference itself)."""
    return float(torch.tensor((1 << proxy.mbits) * (proxy.bias - epsilon), dtype=torch.float32))


def grid_offset(m0: torch.Tensor, proxy: Proxy, epsilon: float = EPSILON) -> torch.Tensor:
    """The integer pattern offset c = round(D - 2^M m0) of rows whose first tile's maximum is m0 (float32).

    Computed as a kernel computes it: D - 2^M m0 rounded once to float32, then to an integer, ties to even.
    Returned as float64 (exact integers). The reference it stands for, (D - c) / 2^M, is within half a pattern
    (1 / 2^(M+1) doubling) of m0. A row without a key in its first tile (m0 = -inf) takes c = 0."""
    scaled = torch.tensor(pattern_bias(proxy, epsilon), dtype=torch.float32) - m0.float() * float(1 << proxy.mbits)
    return torch.where(torch.isfinite(m0), torch.round(scaled), 0.0).double()


def held_offset(c: torch.Tensor) -> torch.Tensor:
    """The offset c as a kernel holds it: in the float32 K = 1 - c 2^-24 its Stage-A FMA adds (`constants.GRID_STEP`).
    That is c itself for 0 <= c <= 2^24; a negative c (a first-tile maximum above bias - epsilon doublings) rounds
    to an even integer, ties to a multiple of 4, which moves the reference by at most one more pattern."""
    k = (1.0 - c.double() * GRID_STEP).float().double()
    return (1.0 - k) / GRID_STEP


def grid_pattern(x: torch.Tensor, c: torch.Tensor, proxy: Proxy) -> torch.Tensor:
    """The pattern round(2^M x + c) of float32 scores x on the grid of the integer offset c (broadcast to x, taken
    as `held_offset` holds it), ties to even, clamped at 0 from below (-inf scores give 0); int64, before wrapping
    to the proxy width. 2^M x + c is exact in float64, so this is the single rounding of a kernel's FMA."""
    p = torch.round(x.double() * float(1 << proxy.mbits) + held_offset(c))
    return p.clamp(min=0).to(torch.int64)


def grid_reference(c: torch.Tensor, proxy: Proxy, epsilon: float = EPSILON) -> torch.Tensor:
    """The reference m = (D - c) / 2^M (float64) that the offset c stands for."""
    return (pattern_bias(proxy, epsilon) - c) / float(1 << proxy.mbits)


def gate_pattern(doublings: float, proxy: Proxy, epsilon: float = EPSILON) -> int:
    """The largest tile-maximum pattern the gate lets through: floor(D + 2^M doublings). A tile fires when its
    maximum pattern exceeds it, i.e. when the maximum lies more than `doublings` above the reference."""
    return math.floor(pattern_bias(proxy, epsilon) + (1 << proxy.mbits) * doublings)


def rollback_shift(top: torch.Tensor, proxy: Proxy, epsilon: float = EPSILON) -> torch.Tensor:
    """delta = ceil((top - D) / 2^M) for integer maximum patterns `top`, in integers: the fewest whole doublings
    that bring the maximum pattern back to at most D (equal to ceil((top - floor(D)) / 2^M) for any D)."""
    scale = 1 << proxy.mbits
    return torch.div(top - math.floor(pattern_bias(proxy, epsilon)) + scale - 1, scale, rounding_mode="floor")


def continuous(x: torch.Tensor, epsilon: float = EPSILON) -> torch.Tensor:
    """The unquantized Schraudolph ramp 2^floor(y) * (1 + frac(y)), y = x - epsilon (infinite mantissa)."""
    y = x.double() - epsilon
    e = torch.floor(y)
    return torch.ldexp(1 + (y - e), e.to(torch.int32))


def proxy_table(samples: int = 1 << 17, epsilon: float = EPSILON) -> list[dict]:
    """Paper Table 8, computed: relative error of each proxy's 2^x over one doubling of x, sampled at
    `samples` evenly spaced midpoints (2^17 reproduces every printed digit of the table); the last column
    separates the proxy's pattern rounding from the ramp error in quadrature."""
    x = (torch.arange(samples, dtype=torch.float64) + 0.5) / samples
    exact = torch.exp2(x)

    def stats(approx: torch.Tensor) -> dict:
        err = approx.double() / exact - 1
        return {"min_pct": 100 * err.min().item(), "max_pct": 100 * err.max().item(),
                "rms_pct": 100 * err.square().mean().sqrt().item()}

    ramp = stats(continuous(x, epsilon))
    rows = [{"proxy": "continuous", "M": None, "E": None, "reach_log2": None, **ramp, "added_pct": None}]
    for proxy in (PROXIES["u32"], PROXIES["u16fp16"], PROXIES["u16"], PROXIES["u8"]):
        row = stats(stage_a(x, proxy, epsilon))
        added = math.sqrt(max(row["rms_pct"] ** 2 - ramp["rms_pct"] ** 2, 0.0))
        rows.append({"proxy": proxy.label, "M": proxy.mbits, "E": proxy.ebits, "reach_log2": proxy.reach_log2,
                     **row, "added_pct": added})
    return rows
