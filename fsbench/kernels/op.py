"""`torch.ops.fsbench.attention`: `kernels.attention` as a torch.library custom op, so a compiled graph
(`torch.compile(..., fullgraph=True)`) holds the attention call instead of breaking around it.

The op takes q, k, v in BSHD layout, the format and the implementation as strings, and returns the output as a
contiguous BSHD tensor of q's dtype: the layout the output projection reads, so the caller's `flatten(2, 3)` is a
view. The Hopper kernels write a BSHD output for BSHD inputs, so no copy is made for them; an output in another
layout is copied here. Dynamo specializes a graph on the value of
a string argument, so a compiled block holds one graph per format of the schedule, never one per step or layer.

The op's body runs eagerly at every call, also inside a compiled graph (inductor calls it as an opaque kernel).
A caller that must see every call (timers, statistics, the step and layer of the call) installs a core with
`set_core`; the body then calls the core instead of `kernels.attention`. Registered on the first
`attention_op()`, so importing `fsbench.kernels` stays free of torch.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

NAMESPACE, NAME = "fsbench", "attention"
Core = Callable[["torch.Tensor", "torch.Tensor", "torch.Tensor", str, str], "torch.Tensor"]

SCHEMA = "(Tensor q, Tensor k, Tensor v, str fmt, str impl) -> Tensor"

_op: Any = None
_core: Core | None = None


def attention_op() -> Any:
    """`torch.ops.fsbench.attention` (q, k, v, fmt, impl) -> out, registered on first use."""
    global _op
    if _op is None:
        _register()
        import torch

        _op = getattr(getattr(torch.ops, NAMESPACE), NAME)
    return _op


def set_core(core: Core | None) -> Core | None:
    """Make `core(q, k, v, fmt, impl)` the op's body (None: `kernels.attention`); returns the previous core."""
    global _core
    previous, _core = _core, core
    return previous


def _register() -> None:
    import torch

    from fsbench.kernels.api import attention

    # The schema is spelled out: this module's annotations are strings (`from __future__ import annotations`).
    @torch.library.custom_op(f"{NAMESPACE}::{NAME}", mutates_args=(), schema=SCHEMA)
    def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, fmt: str, impl: str) -> torch.Tensor:
        if _core is not None:
            out = _core(q, k, v, fmt, impl)
        else:
            out = attention(q, k, v, fmt, impl=impl, layout="BSHD")
        out = out.to(q.dtype).contiguous()
        # An op's output may not alias its inputs (a no-op core hands q back).
        inputs = {t.untyped_storage().data_ptr() for t in (q, k, v)}
        return out.clone() if out.untyped_storage().data_ptr() in inputs else out

    @_attention.register_fake
    def _(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, fmt: str, impl: str) -> torch.Tensor:
        return q.new_empty((*q.shape[:-1], v.shape[-1]))
