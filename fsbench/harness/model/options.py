"""Speed options of a run, applied the same way to every schedule so the comparison stays fair.

Always on: SDPA tries cuDNN first on CUDA (the fastest BF16 attention on Hopper at the model's sequence
lengths, results/README.md; torch's default order lists flash first, so the choice is made explicit and
recorded), and the negative prompt's embedding is computed once per pipeline (a constant of
the benchmark, not part of a query's input; positive prompts are encoded in every query, as MLPerf asks).
Options (recorded in the manifest): `compile` (torch.compile of the repeated transformer blocks with
`fullgraph=True`: the self-attention call, its q/k RMSNorm and RoPE included, is the custom op
`torch.ops.fsbench.self_attention` inside the graphs, one graph per format of the schedule), `gemm` (bf16 |
fp8: the blocks' linears through `harness.model.fp8_linear`), `vae` (fp32 | bf16 decode), `offload` (the text encoder
and the idle expert in pinned host memory, `harness.model.offload`: the videos are the same, the GPU holds less),
`bf16_impl` (the kernel of the bf16 layers' self-attention, a name of `kernels.registry.BF16_CHOICES`: auto is
SDPA as above; another BF16 kernel makes the BF16 baseline the fastest one installed, recorded beside the kernel
that ran in the manifest's `attention_kernels`).
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import torch

from fsbench.errors import FsbenchError
from fsbench.kernels import registry
from fsbench.kernels.registry import AUTO, BF16_CHOICES

GEMMS = ("bf16", "fp8")
CUDNN_FIRST = ("CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH")
VAE_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class SpeedOptions:
    """`--compile`, `--gemm`, `--vae`, `--offload`, `--bf16-impl` of `fsbench run` / `sweep`."""

    compile: bool = False
    gemm: str = "bf16"
    vae: str = "fp32"
    offload: bool = False
    bf16_impl: str = AUTO

    def __post_init__(self) -> None:
        if self.gemm not in GEMMS:
            raise FsbenchError(f"--gemm must be one of {', '.join(GEMMS)}, got {self.gemm!r}")
        if self.vae not in VAE_DTYPES:
            raise FsbenchError(f"--vae must be one of {', '.join(VAE_DTYPES)}, got {self.vae!r}")
        if self.bf16_impl not in BF16_CHOICES:
            raise FsbenchError(f"--bf16-impl must be one of {', '.join(BF16_CHOICES)}, got {self.bf16_impl!r}")

    def check_device(self, device: torch.device) -> None:
        if self.offload and device.type != "cuda":
            raise FsbenchError("--offload moves weights between the GPU and host memory: it needs --device cuda")
        why = registry.get(self.bf16_impl).unmet_on("bf16", device) if self.bf16_impl != AUTO else None
        if why:
            raise FsbenchError(f"--bf16-impl {self.bf16_impl}: {why}")

    @property
    def slug(self) -> str:
        """Suffix of the default run folder: runs with different numerics never share a folder (offload keeps
        the numerics)."""
        parts = [f"{self.gemm}gemm"] if self.gemm != "bf16" else []
        parts += [f"vae{self.vae}"] if self.vae != "fp32" else []
        parts += [f"bf16{self.bf16_impl}"] if self.bf16_impl != AUTO else []
        return "".join(f"-{p}" for p in parts)


def apply(pipe: Any, opts: SpeedOptions) -> dict[str, Any]:
    """Transform `pipe` in place for `opts`; returns the record the manifest keeps."""
    from fsbench.harness.model import fp8_linear

    experts = [pipe.transformer, pipe.transformer_2]
    record: dict[str, Any] = {**asdict(opts), "sdpa_priority": sdpa_priority_names(pipe.device),
                              "negative_prompt_cache": True}
    if opts.gemm == "fp8":
        record["fp8"] = fp8_linear.convert(experts)
    if opts.vae != "fp32":
        pipe.vae.to(VAE_DTYPES[opts.vae])
    if opts.compile:
        for expert in experts:
            expert.compile_repeated_blocks(fullgraph=True, dynamic=False)
        record["compiled"] = ("WanTransformerBlock (regional, torch.compile default mode, fullgraph; "
                              "self-attention as the op fsbench::attention inside the graph)")
    if opts.offload:
        from fsbench.harness.model import offload

        held = offload.install(pipe)
        record["host_offload"] = {"parts": list(held.modules), "pinned_bytes": held.host_bytes()}
    cache_negative_prompt(pipe)
    return record


def sdpa_priority_names(device: torch.device) -> list[str]:
    return list(CUDNN_FIRST) if device.type == "cuda" else ["MATH (cpu)"]


@contextlib.contextmanager
def cudnn_first() -> Iterator[None]:
    """SDPA backend priority cuDNN > flash > efficient > math for the block (global torch state, so it also
    holds in LoadGen's issue thread); every backend stays enabled as a fallback."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([getattr(SDPBackend, name) for name in CUDNN_FIRST], set_priority=True):
        yield


def cache_negative_prompt(pipe: Any) -> None:
    """Wrap `pipe.encode_prompt` so the negative prompt is encoded once per (text, device, dtype, length)."""
    if getattr(pipe.encode_prompt, "caches_negative", False):
        return
    encode = pipe.encode_prompt
    cache: dict[tuple, torch.Tensor] = {}

    def encode_prompt(prompt: Any, negative_prompt: Any = None, do_classifier_free_guidance: bool = True,
                      num_videos_per_prompt: int = 1, prompt_embeds: Any = None, negative_prompt_embeds: Any = None,
                      max_sequence_length: int = 226, device: Any = None, dtype: Any = None) -> Any:
        batch = len(prompt) if isinstance(prompt, list) else 1
        key = (negative_prompt, batch, num_videos_per_prompt, max_sequence_length, str(device), str(dtype))
        if do_classifier_free_guidance and negative_prompt_embeds is None and isinstance(negative_prompt, str):
            negative_prompt_embeds = cache.get(key)
        positive, negative = encode(prompt, negative_prompt, do_classifier_free_guidance, num_videos_per_prompt,
                                    prompt_embeds, negative_prompt_embeds, max_sequence_length, device, dtype)
        if do_classifier_free_guidance and isinstance(negative_prompt, str):
            cache.setdefault(key, negative)
        return positive, negative

    encode_prompt.caches_negative = True  # type: ignore[attr-defined]
    pipe.encode_prompt = encode_prompt
