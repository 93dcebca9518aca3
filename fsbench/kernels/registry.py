"""The attention implementations, one entry each: the name `kernels.attention(impl=...)` takes, the function that
runs it and what it needs (formats, GPU capability, head dims, packages).

`IMPLS`, `resolve_impl`, the CLI's `--impl` choices (of a run and of the kernel check), the check before a call and
the run manifest's record of which kernel ran are all read from this table, and no other module spells an
implementation's name: adding a kernel is one more entry. `auto` takes the first entry, in table order, that can
run the call.
"""
from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from fsbench.kernels.constants import FORMATS, MX_FORMATS
from fsbench.kernels.hopper import launch
from fsbench.kernels.stats import AttentionStats

AUTO = "auto"  # let the table choose

Runner = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, str, bool, dict[str, Any]],
                  tuple[torch.Tensor, "AttentionStats | None"]]


@dataclass(frozen=True)
class Impl:
    """One implementation: `run(q, k, v, fmt, want_stats, options)` on BHSD tensors returns (out, stats or None)."""

    name: str
    run: Runner
    formats: tuple[str, ...]
    capability: tuple[int, int] | None = None  # the CUDA compute capability it needs; None runs anywhere
    head_dims: tuple[int, ...] | None = None  # None: any
    package: str | None = None  # a module it imports
    hopper: launch.HopperKernel | None = None  # the Hopper kernel behind it, for the tools that launch it directly
    requires: Callable[[], str | None] | None = None  # what its package must offer beyond importing: why not, or None

    def unmet(self, fmt: str, device: torch.device, head_dim: int) -> str | None:
        """Why this implementation cannot run `fmt` at `head_dim` on `device`; None when it can."""
        return self._unfit(fmt, device, head_dim) or self._missing()

    def unmet_on(self, fmt: str, device: torch.device) -> str | None:
        """Why this implementation cannot run `fmt` on `device` at any head dim (checked before a run loads its
        model); None when it can at some."""
        return self.unmet(fmt, device, self.head_dims[0] if self.head_dims else 0)

    def _unfit(self, fmt: str, device: torch.device, head_dim: int) -> str | None:
        """What of the call (format, head dim, GPU) this implementation does not take."""
        if fmt not in self.formats:
            return f"impl={self.name!r} computes {', '.join(self.formats)}, not {fmt}"
        if self.head_dims is not None and head_dim not in self.head_dims:
            return f"impl={self.name!r} supports head_dim {self.head_dims}, got {head_dim}"
        if self.capability is not None and device_capability(device) != self.capability:
            major, minor = self.capability
            return (f"impl={self.name!r} runs on a CUDA sm_{major}{minor} GPU, not {device}; "
                    f"use impl={EMULATE!r}")
        return None

    def _missing(self) -> str | None:
        """What of the software this implementation needs is missing here."""
        if self.package is not None and importlib.util.find_spec(self.package) is None:
            return f"impl={self.name!r} needs the {self.package} package"
        why = self.requires() if self.requires is not None else None
        return None if why is None else f"impl={self.name!r}: {why}"


def device_capability(device: torch.device) -> tuple[int, int] | None:
    """The CUDA compute capability of `device`; None off CUDA."""
    return torch.cuda.get_device_capability(device) if device.type == "cuda" else None


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, fmt: str, want_stats: bool,
          options: dict[str, Any]) -> tuple[torch.Tensor, AttentionStats]:
    unknown = set(options) - {"sm_scale"}
    if unknown:
        raise ValueError(f"impl={SDPA!r} takes no options {sorted(unknown)}")
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=options.get("sm_scale"))
    return out, AttentionStats()


def _fa3(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, fmt: str, want_stats: bool,
         options: dict[str, Any]) -> tuple[torch.Tensor, AttentionStats]:
    """FlashAttention-3's BF16 forward (its `flash_attn_interface`), on BSHD views of the BHSD tensors: the
    pipeline's projections are BSHD underneath, so nothing is copied."""
    unknown = set(options) - {"sm_scale"}
    if unknown:
        raise ValueError(f"impl={FA3!r} takes no options {sorted(unknown)}")
    from flash_attn_interface import flash_attn_func

    out = flash_attn_func(*(t.transpose(1, 2) for t in (q, k, v)), softmax_scale=options.get("sm_scale"),
                          causal=False)
    return (out[0] if isinstance(out, tuple) else out).transpose(1, 2), AttentionStats()


def _emulate(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, fmt: str, want_stats: bool,
             options: dict[str, Any]) -> tuple[torch.Tensor, AttentionStats]:
    from fsbench.kernels.reference.emulator import emulate

    return emulate(q, k, v, fmt, **options)


def _hopper(kernel: launch.HopperKernel) -> Runner:
    def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, fmt: str, want_stats: bool,
            options: dict[str, Any]) -> tuple[torch.Tensor, AttentionStats | None]:
        return launch.triton_attention(q, k, v, fmt, stats=want_stats, kernel=kernel, **options)
    return run


SDPA, FA3, GLUON, TRITON, EMULATE = "sdpa", "fa3", "gluon", "triton", "emulate"
_HOPPER = (9, 0)  # FP8 wgmma
TABLE = (
    Impl(SDPA, _sdpa, ("bf16",)),
    Impl(GLUON, _hopper(launch.GLUON_KERNEL), MX_FORMATS, _HOPPER, launch.GLUON_KERNEL.head_dims, "triton",
         launch.GLUON_KERNEL, launch.gluon_missing),
    Impl(TRITON, _hopper(launch.TRITON_KERNEL), MX_FORMATS, _HOPPER, launch.TRITON_KERNEL.head_dims, "triton",
         launch.TRITON_KERNEL),
    Impl(EMULATE, _emulate, FORMATS),
    # after the others, so `auto` never takes it: a BF16 run picks it by name (scripts/build_peers.sh builds it at
    # head dim 128 only)
    Impl(FA3, _fa3, ("bf16",), _HOPPER, (128,), "flash_attn_interface"),
)
BY_NAME = {impl.name: impl for impl in TABLE}
IMPLS = (AUTO,) + tuple(BY_NAME)  # every name `kernels.attention(impl=...)` takes
# what a run may choose for its quantized layers (`fsbench run --impl`); its bf16 layers take BF16_CHOICES
RUN_CHOICES = (AUTO,) + tuple(impl.name for impl in TABLE if set(impl.formats) & set(MX_FORMATS))
HOPPER = tuple(impl.name for impl in TABLE if impl.hopper is not None)  # `fsbench kernels check --impl`
# what a run may choose for its bf16 layers (`fsbench run --bf16-impl`): SDPA (auto) or another BF16 kernel
BF16_CHOICES = (AUTO,) + tuple(impl.name for impl in TABLE if "bf16" in impl.formats)


def check_format(fmt: str) -> None:
    """ValueError naming the formats when `fmt` is none of them."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown attention format {fmt!r}; expected one of {', '.join(FORMATS)}")


def get(name: str) -> Impl:
    """The entry called `name`; ValueError naming the known ones."""
    if name not in BY_NAME:
        raise ValueError(f"unknown attention impl {name!r}; expected one of {', '.join(IMPLS)}")
    return BY_NAME[name]


def resolve_impl(fmt: str, impl: str, device: torch.device, head_dim: int) -> str:
    """The implementation `impl` names, or for `auto` the first entry that can run `fmt` at `head_dim` on
    `device`: SDPA for bf16; on Hopper the Gluon kernel at head_dim 128 (the faster one,
    results/log/), else the Triton kernel; elsewhere the emulator."""
    if impl != AUTO:
        return get(impl).name
    check_format(fmt)
    return next(entry.name for entry in TABLE if entry.unmet(fmt, device, head_dim) is None)


def auto_fallback(fmt: str, device: torch.device, head_dim: int) -> str | None:
    """Why `auto` passed over an earlier entry that takes this call (format, head dim, GPU) but whose software is
    missing here (an older Triton without Gluon, say); None where it passed over none."""
    for entry in TABLE:
        if entry._unfit(fmt, device, head_dim) is None:
            return entry._missing()
    return None
