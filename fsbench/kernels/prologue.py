"""What Wan does to q and k between their projections and attention, as one value and its torch reference.

The `norm_rope` Triton kernel (`kernels.hopper.norm_rope`) computes the same values on the GPU in one pass over
the projections; `apply` is the definition it is checked against.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Prologue:
    """RMSNorm of q and k over all heads, then interleaved RoPE, as Wan applies them before attention.

    `wq`, `wk`: the two RMSNorm weights, shape (H*D,); `cos`, `sin`: float32 (1, S, 1, D) tables of the
    rotation (channel pair (2i, 2i+1) turns by cos[2i], sin[2i+1]), or None where there is no RoPE."""

    wq: torch.Tensor
    wk: torch.Tensor
    eps: float
    cos: torch.Tensor | None = None
    sin: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if (self.cos is None) != (self.sin is None):
            raise ValueError("a prologue's RoPE needs both cos and sin (or neither)")
        if self.wq.dim() != 1 or self.wq.shape != self.wk.shape:
            raise ValueError(f"wq {tuple(self.wq.shape)} and wk {tuple(self.wk.shape)} must be two (H*D,) vectors")

    @property
    def rope(self) -> bool:
        """Whether the prologue rotates (has cos and sin)."""
        return self.cos is not None

    @property
    def tables(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(cos, sin) of the rotation, or None where the prologue does not rotate."""
        return None if self.cos is None or self.sin is None else (self.cos, self.sin)


def check_prologue(xq: torch.Tensor, xk: torch.Tensor, prologue: Prologue) -> None:
    """ValueError unless xq, xk are (B, S, H, D) projections with H*D channels of the weights and, with RoPE,
    (1, S, 1, D) tables."""
    for name, x in (("xq", xq), ("xk", xk)):
        if x.dim() != 4 or x.shape[2] * x.shape[3] != prologue.wq.shape[0]:
            raise ValueError(f"{name} {tuple(x.shape)} is not (B, S, H, D) with H*D = {prologue.wq.shape[0]} "
                             "channels, the RMSNorm weights' size")
        for table in prologue.tables or ():
            if tuple(table.shape) != (1, x.shape[1], 1, x.shape[3]):
                raise ValueError(f"RoPE tables {tuple(table.shape)} are not (1, S, 1, D) for {name} {tuple(x.shape)}")


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Wan's RoPE on interleaved (even, odd) channel pairs of x (B, S, H, D); cos/sin are (1, S, 1, D).
    The rotation runs in float32 (x times the float32 tables) and rounds once to x's dtype."""
    even, odd = x.unflatten(-1, (-1, 2)).unbind(-1)
    c, s = cos[..., 0::2], sin[..., 1::2]
    return torch.stack((even * c - odd * s, even * s + odd * c), dim=-1).flatten(-2).type_as(x)


def apply(xq: torch.Tensor, xk: torch.Tensor, prologue: Prologue) -> tuple[torch.Tensor, torch.Tensor]:
    """q and k (B, S, H, D) in xq's dtype from the projections xq, xk given as (B, S, H, D) (views of the
    (B, S, H*D) projection are fine): `torch.nn.functional.rms_norm` over each token's H*D channels, then `rope`."""
    check_prologue(xq, xk, prologue)
    out = []
    for x, w in ((xq, prologue.wq), (xk, prologue.wk)):
        y = torch.nn.functional.rms_norm(x.flatten(2), (w.shape[0],), w, prologue.eps).unflatten(2, x.shape[2:])
        out.append(rope(y, prologue.cos, prologue.sin) if prologue.rope else y)
    return out[0], out[1]
