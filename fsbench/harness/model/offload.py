"""`--offload`: the text encoder and the expert that is not running wait in pinned host memory, and each moves
onto the GPU when its forward starts.

With every weight on the GPU, a 720p A14B video with BF16 GEMMs and the fp32 VAE decode peaks above what an 80 GB
card holds (results/README.md), and runs out of memory in the VAE decode. The weights are constant, so taking a
component off the GPU frees its memory without a copy, and bringing it back is one host-to-device copy from pinned
memory: per video the text encoder and both experts. Written here because diffusers' model CPU offload (through
accelerate) also copies every component back to host memory, unpinned, each time it leaves.

Each component's host copy is one buffer pinned with cudaHostRegister, as torch's own checkpoint stager does: the
pinned caching allocator rounds every block up to a power of two, which would cost up to twice the host memory.
The buffers are kept out of forked children: Linux (5.9 on, `page_needs_cow_for_dma`) copies a DMA-pinned page
into the child at fork, and every video forks (ffmpeg through imageio-ffmpeg, whose `preexec_fn` rules out vfork),
which copied every pinned weight before the child could exec and could exhaust the host's memory.
"""
from __future__ import annotations

import mmap
from typing import Any

import psutil
import torch
from torch import nn

from fsbench.errors import FsbenchError

PARTS = ("text_encoder", "transformer", "transformer_2")  # what waits on the host; the VAE stays on the GPU
EXPERTS = PARTS[1:]
ALIGN = 64  # bytes between host copies, so each is aligned for its dtype and for DMA


def host_buffer(size: int) -> torch.Tensor:
    """`size` bytes of page-aligned anonymous memory that no forked child inherits (MADV_DONTFORK)."""
    region = mmap.mmap(-1, max(size, mmap.PAGESIZE))
    region.madvise(mmap.MADV_DONTFORK)
    return torch.frombuffer(region, dtype=torch.uint8)[:size]  # the tensor keeps the mapping alive


def check_host_memory(needed: int) -> None:
    """Refuse, with one line, what the kernel's OOM killer would otherwise end mid-run. Available memory counts
    what the kernel can reclaim, the page cache of loaded weights included."""
    available = psutil.virtual_memory().available
    if needed > available:
        raise FsbenchError(f"--offload pins {needed / 1e9:.1f} GB of host memory and {available / 1e9:.1f} GB is "
                           "available: free host memory or leave --offload out")


class HostOffload:
    """Pinned host copies of the `PARTS` a pipeline has, and the forward pre-hooks that move them: an expert's forward
    takes the text encoder and the other expert off the GPU; the text encoder's forward brings only itself."""

    def __init__(self, pipe: Any, device: torch.device):
        self.device = device
        self.modules: dict[str, nn.Module] = {name: module for name in PARTS
                                              if (module := getattr(pipe, name, None)) is not None}
        self._tensors: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {}
        self.resident = set(self.modules)
        self._hooks: list[Any] = []
        self._buffers: list[torch.Tensor] = []
        weights = {name: [*module.parameters(), *module.buffers()] for name, module in self.modules.items()}
        check_host_memory(sum(t.nbytes for tensors in weights.values() for t in tensors))
        for name, module in self.modules.items():
            self._tensors[name] = self._pin(weights[name])
            self._hooks.append(module.register_forward_pre_hook(self._pre_hook(name), with_kwargs=True))
        for name in list(self.modules)[:-1]:  # the last expert stays: every video then moves the same components
            self.leave(name)

    def _pin(self, tensors: list[torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(tensor, its host copy) for each tensor; the copies are views of one registered host buffer."""
        offsets, total = [], 0
        for tensor in tensors:
            offsets.append(total)
            total += -(-tensor.nbytes // ALIGN) * ALIGN
        buffer = host_buffer(total)
        error = int(torch.cuda.cudart().cudaHostRegister(buffer.data_ptr(), total, 0))
        if error:
            raise RuntimeError(f"cudaHostRegister of {total / 2**30:.1f} GiB failed with cudaError {error}")
        self._buffers.append(buffer)
        pairs = []
        for tensor, offset in zip(tensors, offsets):
            host = buffer[offset:offset + tensor.nbytes].view(tensor.dtype).view(tensor.shape)
            pairs.append((tensor, host.copy_(tensor)))
        return pairs

    def _pre_hook(self, name: str) -> Any:
        def pre(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
            if name in EXPERTS:
                for other in self.modules:
                    if other != name:
                        self.leave(other)
            self.enter(name)
            return tuple(map(self._on_device, args)), {key: self._on_device(v) for key, v in kwargs.items()}

        return pre

    def _on_device(self, value: Any) -> Any:
        """diffusers sends the text encoder's inputs to the device its weights are on, the host while it waits."""
        return value.to(self.device, non_blocking=True) if isinstance(value, torch.Tensor) else value

    def enter(self, name: str) -> None:
        """Onto the GPU (stream-ordered: the forward's kernels queue after the copy)."""
        if name not in self.resident:
            for tensor, host in self._tensors[name]:
                tensor.data = host.to(self.device, non_blocking=True)
            self.resident.add(name)

    def leave(self, name: str) -> None:
        """Off the GPU: the tensors point at their host copies, and the GPU memory returns to the allocator."""
        if name in self.resident:
            for tensor, host in self._tensors[name]:
                tensor.data = host
            self.resident.discard(name)

    def host_bytes(self) -> int:
        return sum(buffer.numel() for buffer in self._buffers)

    def remove(self) -> None:
        """Everything back on the GPU, hooks removed, host buffers unregistered."""
        for hook in self._hooks:
            hook.remove()
        for name in self.modules:
            self.enter(name)
        torch.cuda.synchronize(self.device)
        for buffer in self._buffers:
            torch.cuda.cudart().cudaHostUnregister(buffer.data_ptr())
        self._buffers.clear()


def install(pipe: Any) -> HostOffload:
    """Offload `pipe` (on a CUDA device); the hooks keep the returned object alive with the pipeline."""
    return HostOffload(pipe, pipe.device)
