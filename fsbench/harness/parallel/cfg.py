"""Classifier-free-guidance parallelism: the two ranks of a "cfg" group compute the conditional and the
unconditional expert forward of a denoising step at the same time, then swap results.

WanPipeline calls each expert twice per step (cond, then uncond) and only combines them after the second call.
A diffusers `ModelHook` (outermost on the expert, around the context-parallel hooks) defers the first call: it
returns a placeholder, and on the second call rank g of the group runs pass g with the arguments of that pass,
all-gathers both outputs over the group and fills the placeholder in place before the pipeline reads it. Each pass
stays a batch-1 forward with the same inputs as in one process, so the result is the one-process result.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from diffusers.hooks import HookRegistry, ModelHook


class CfgParallelHook(ModelHook):
    """Defers the cond forward and runs one pass per rank of `group` (size 2: rank 0 cond, rank 1 uncond)."""

    def __init__(self, group: dist.ProcessGroup):
        super().__init__()
        self.group, self.index = group, dist.get_rank(group)
        self._pending: tuple[dict[str, Any], torch.Tensor] | None = None

    def new_forward(self, module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs.get("return_dict", True):
            raise ValueError("CFG parallelism expects WanPipeline's keyword-only, return_dict=False expert calls")
        if self._pending is None:
            placeholder = torch.empty_like(kwargs["hidden_states"])
            self._pending = (kwargs, placeholder)
            return (placeholder,)
        cond_kwargs, placeholder = self._pending
        self._pending = None
        mine = self.fn_ref.original_forward(**(cond_kwargs if self.index == 0 else kwargs))[0].contiguous()
        both = [torch.empty_like(mine) for _ in range(2)]
        dist.all_gather(both, mine, group=self.group)
        if (mine.shape, mine.dtype) != (placeholder.shape, placeholder.dtype):
            raise RuntimeError(f"expert output {tuple(mine.shape)} {mine.dtype} does not match its input "
                               f"{tuple(placeholder.shape)} {placeholder.dtype}; CFG parallelism needs them equal")
        placeholder.copy_(both[0])
        return (both[1],)


def install(pipe: Any, group: dist.ProcessGroup) -> None:
    """Put the hook outermost on both experts (after any context-parallel hooks)."""
    for model in (pipe.transformer, pipe.transformer_2):
        HookRegistry.check_if_exists_or_initialize(model).register_hook(CfgParallelHook(group), "fsbench_cfg")
