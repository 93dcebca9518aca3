"""The bytes of a module's weights, as the GPU tests count what a phase or the host must hold."""
from __future__ import annotations

import torch


def weight_bytes(*modules: torch.nn.Module) -> int:
    """Parameters and buffers of `modules`, in bytes."""
    return sum(t.nbytes for module in modules for t in (*module.parameters(), *module.buffers()))
