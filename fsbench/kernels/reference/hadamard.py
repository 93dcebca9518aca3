"""Normalized Walsh-Hadamard rotation over the head dimension (QuaRot/FA3-style incoherent processing).

H H^T = I, so (QH)(KH)^T = QK^T while every rotated element mixes the whole row, spreading outliers
across the 32-element MX blocks.
"""
from __future__ import annotations

import functools

import torch


@functools.lru_cache(maxsize=8)
def _sylvester(n: int) -> torch.Tensor:
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h / n ** 0.5


def hadamard_matrix(n: int, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The n x n normalized Sylvester Hadamard matrix; n must be a power of two."""
    if n < 1 or n & (n - 1):
        raise ValueError(f"Hadamard size must be a power of two, got {n}")
    return _sylvester(n).to(device=device, dtype=dtype)


def rotate(x: torch.Tensor) -> torch.Tensor:
    """x @ H over the last axis, in float32. A head_dim that is not a power of two is rotated in
    block-diagonal Hadamard blocks of its largest power-of-two divisor."""
    d = x.shape[-1]
    block = d & -d
    h = hadamard_matrix(block, x.device)
    return (x.float().unflatten(-1, (-1, block)) @ h).flatten(-2)
