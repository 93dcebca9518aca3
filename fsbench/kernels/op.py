"""`torch.ops.fsbench.attention` and `torch.ops.fsbench.self_attention`: `kernels.attention` and
`kernels.attention_prologue` as torch.library custom ops, so a compiled graph (`torch.compile(..., fullgraph=True)`)
holds the attention call instead of breaking around it.

`attention` takes q, k, v in BSHD layout; `self_attention` takes the raw projections xq, xk, v in BSHD layout and the
prologue's tensors (the two RMSNorm weights, eps, RoPE's cos and sin: `kernels.prologue`), applied before the
kernel (`kernels.attention_prologue`). Both take the format and the implementation as strings and return the output as a
contiguous BSHD tensor of the input's dtype: the layout the output projection reads, so the caller's
`flatten(2, 3)` is a view. The Hopper kernels write a BSHD output for BSHD inputs, so no copy is made for them; an
output in another layout is copied here. Dynamo specializes a graph on the value of a string argument, so a
compiled block holds one graph per format of the schedule, never one per step or layer.

The ops' bodies run eagerly at every call, also inside a compiled graph (inductor calls them as opaque kernels).
A caller that must see every call (timers, statistics, the step and layer of the call) installs a core with
`set_core`; the bodies then call `core(q, k, v, fmt, impl, prologue)` (prologue None for `attention`) instead of
the kernels. Registered on first use, so importing `fsbench.kernels` stays free of torch.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from fsbench.kernels.prologue import Prologue

NAMESPACE = "fsbench"
Core = Callable[["torch.Tensor", "torch.Tensor", "torch.Tensor", str, str, "Prologue | None"], "torch.Tensor"]

SCHEMAS = {"attention": "(Tensor q, Tensor k, Tensor v, str fmt, str impl) -> Tensor",
           "self_attention": "(Tensor xq, Tensor xk, Tensor v, Tensor wq, Tensor wk, float eps, Tensor? cos, "
                             "Tensor? sin, str fmt, str impl) -> Tensor"}

_ops: dict[str, Any] = {}
_core: Core | None = None


def attention_op() -> Any:
    """`torch.ops.fsbench.attention` (q, k, v, fmt, impl) -> out, registered on first use."""
    return _op("attention")


def self_attention_op() -> Any:
    """`torch.ops.fsbench.self_attention` (xq, xk, v, wq, wk, eps, cos, sin, fmt, impl) -> out: Wan's RMSNorm and
    RoPE of the projections xq, xk, then attention; registered on first use."""
    return _op("self_attention")


def set_core(core: Core | None) -> Core | None:
    """Make `core(q, k, v, fmt, impl, prologue)` the ops' body (None: the kernels); returns the previous core."""
    global _core
    previous, _core = _core, core
    return previous


def _op(name: str) -> Any:
    if not _ops:
        _register()
        import torch

        _ops.update({n: getattr(getattr(torch.ops, NAMESPACE), n) for n in SCHEMAS})
    return _ops[name]


def _register() -> None:
    import torch

    from fsbench.kernels.api import attention, attention_prologue
    from fsbench.kernels.prologue import Prologue

    def finish(out: torch.Tensor, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """A contiguous output in the inputs' dtype that aliases none of them (a no-op core hands q back)."""
        out = out.to(inputs[0].dtype).contiguous()
        return out.clone() if out.untyped_storage().data_ptr() in {t.untyped_storage().data_ptr() for t in inputs} \
            else out

    # The schemas are spelled out: this module's annotations are strings (`from __future__ import annotations`).
    @torch.library.custom_op(f"{NAMESPACE}::attention", mutates_args=(), schema=SCHEMAS["attention"])
    def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, fmt: str, impl: str) -> torch.Tensor:
        out = (_core(q, k, v, fmt, impl, None) if _core is not None
               else attention(q, k, v, fmt, impl=impl, layout="BSHD"))
        return finish(out, (q, k, v))

    @_attention.register_fake
    def _(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, fmt: str, impl: str) -> torch.Tensor:
        return q.new_empty((*q.shape[:-1], v.shape[-1]))

    @torch.library.custom_op(f"{NAMESPACE}::self_attention", mutates_args=(), schema=SCHEMAS["self_attention"])
    def _self_attention(xq: torch.Tensor, xk: torch.Tensor, v: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor,
                        eps: float, cos: torch.Tensor | None, sin: torch.Tensor | None, fmt: str,
                        impl: str) -> torch.Tensor:
        prologue = Prologue(wq, wk, eps, cos, sin)
        out = (_core(xq, xk, v, fmt, impl, prologue) if _core is not None
               else attention_prologue(xq, xk, v, prologue, fmt, impl=impl))
        return finish(out, (xq, xk, v))

    @_self_attention.register_fake
    def _(xq: torch.Tensor, xk: torch.Tensor, v: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, eps: float,
          cos: torch.Tensor | None, sin: torch.Tensor | None, fmt: str, impl: str) -> torch.Tensor:
        return xq.new_empty((*xq.shape[:-1], v.shape[-1]))
