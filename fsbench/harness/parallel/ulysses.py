"""Ulysses sequence parallelism for both Wan experts: every rank of a group holds S/N tokens through all blocks;
self-attention swaps to N full-sequence head shards, runs `kernels.attention` on its H/N heads, swaps back.

The sequence split and gather are diffusers' own context-parallel hooks (`apply_context_parallel` with Wan's
`_cp_plan`: RoPE tables and `blocks.0` input split on dim 1, `proj_out` output all-gathered). We call them through
`ParallelConfig.setup` + `apply_context_parallel` rather than `ModelMixin.enable_parallelism`, which picks its device
as `rank % torch.accelerator.device_count()` and so divides by zero on a CPU-only host; the hooks themselves are
device-agnostic, so the gloo tests on CPU run the same code as NCCL on the GPUs. diffusers' own Ulysses
(`TemplatedUlyssesAttention`) only calls registered attention backends, so the all-to-all around our kernel is ours:
`torch.distributed.all_to_all_single` on the mesh's "ulysses" group. Cross-attention (attn2) keeps diffusers'
processor with `_parallel_config` set, which attends locally (the local query shard against all 512 text tokens).

Numerics: Q, K (MX blocks along head_dim), MX V blocks (32 keys of one head column) and P are per head, so bf16,
mxfp6, mxfp4 and hybrid see exactly the operands of one process. mxfp8's V is per-tensor FP8: under Ulysses its
scale comes from the rank's H/N heads, a finer scale than the whole tensor's.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from fsbench.harness.precision.router import SelfAttentionCall, SelfAttentionRouter
from fsbench.harness.precision.schedule import ResolvedSchedule


def seq_to_heads(x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """(B, S/N, H, D) sequence shard -> (B, S, H/N, D) head shard; rank j of the group gets heads j*H/N.."""
    n = dist.get_world_size(group)
    b, s, h, d = x.shape
    send = x.reshape(b, s, n, h // n, d).permute(2, 0, 1, 3, 4).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    return recv.permute(1, 0, 2, 3, 4).reshape(b, n * s, h // n, d)


def heads_to_seq(x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """(B, S, H/N, D) head shard -> (B, S/N, H, D) sequence shard: the inverse of `seq_to_heads`."""
    n = dist.get_world_size(group)
    b, s, h, d = x.shape
    send = x.reshape(b, n, s // n, h, d).permute(1, 0, 2, 3, 4).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    return recv.permute(1, 2, 0, 3, 4).reshape(b, s // n, n * h, d)


class UlyssesRouter(SelfAttentionRouter):
    """The schedule's router whose attention core sees full-sequence head shards (the Ulysses all-to-all)."""

    def __init__(self, schedule: ResolvedSchedule, group: dist.ProcessGroup, parallel_config: Any, *,
                 impl: str = "auto", bf16_impl: str = "auto"):
        super().__init__(schedule, impl=impl, bf16_impl=bf16_impl)
        self.group, self.parallel_config = group, parallel_config
        self._pipe: Any = None

    def install(self, pipe: Any) -> None:
        super().install(pipe)
        self._pipe = pipe

    @torch.compiler.disable  # collectives stay outside compiled blocks
    def attend(self, layer: int, call: SelfAttentionCall) -> torch.Tensor:
        """RMSNorm and RoPE on this rank's tokens by the torch reference (the norm spans every head, which only the
        sequence shard holds), then the head shard's attention."""
        q, k, v = (seq_to_heads(t.contiguous(), self.group) for t in call.qkv())
        shard = SelfAttentionCall(q, k, v, call.fmt, call.impl)
        return heads_to_seq(super().attend(layer, shard).contiguous(), self.group)

    def uninstall(self) -> None:
        """diffusers' processors come back with the parallel config, so they keep attending across ranks."""
        super().uninstall()
        if self._pipe is not None:
            for model in (self._pipe.transformer, self._pipe.transformer_2):
                for block in model.blocks:
                    block.attn1.processor._parallel_config = self.parallel_config
            self._pipe = None


def shard_sequence(pipe: Any, mesh: Any, rank: int, world: int, device: torch.device) -> Any:
    """Install diffusers' context-parallel split/gather hooks (Ulysses over `mesh["ulysses"]`) on both experts;
    returns the shared `ParallelConfig`. `mesh` has dims ("cfg", "ring", "ulysses")."""
    from diffusers import ContextParallelConfig, ParallelConfig
    from diffusers.hooks.context_parallel import apply_context_parallel

    config = ParallelConfig(context_parallel_config=ContextParallelConfig(ulysses_degree=mesh["ulysses"].size(),
                                                                          mesh=mesh))
    config.setup(rank, world, device, mesh=mesh)
    for model in (pipe.transformer, pipe.transformer_2):
        model._parallel_config = config
        for block in model.blocks:
            for attn in (block.attn1, block.attn2):
                attn.processor._parallel_config = config
        apply_context_parallel(model, config.context_parallel_config, model._cp_plan)
    return config
