"""`fsbench.sdpa`: the attention kernels behind the signature of `torch.nn.functional.scaled_dot_product_attention`,
so a user's script swaps one call; and `computes`, the test `fsbench.patch` routes each SDPA call by.

Where no GPU kernel fits the call (no CUDA device, another GPU than sm_90, an unsupported head dim), `impl="auto"`
runs the emulator: the numerical definition, far slower than a kernel. The first such call warns, once per process.
"""
from __future__ import annotations

import threading
import warnings
from typing import Any

import torch

from fsbench.kernels import api, registry
from fsbench.kernels.reference.formats import MX_BLOCK

# torch's own SDPA, taken when fsbench loads (before any `fsbench.patch`): what the backward and the calls handed
# back to torch run
torch_sdpa = torch.nn.functional.scaled_dot_product_attention
_warned: list[str] = []  # the first call that ran the emulator under impl="auto"
_running = threading.local()  # set while the kernels run a call: an SDPA they call themselves is torch's


def sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None = None,
         dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False, *,
         fmt: str = "mxfp8", impl: str = registry.AUTO) -> torch.Tensor:
    """Attention in precision `fmt` with the arguments of `torch.nn.functional.scaled_dot_product_attention`.

    query (..., L, D), key (..., S, D), value (..., S, D): 3-D or more, the leading dims broadcast as in torch's
    SDPA ((B, H, S, D) is the usual layout); bfloat16, float16 or float32; the output is (..., L, D) in query's
    dtype. `scale` defaults to 1/sqrt(D). `fmt` is bf16, mxfp8, mxfp6 or mxfp4 (MX formats need D a multiple of
    32); `impl` picks the kernel ("auto": the Hopper kernels on an sm_90 GPU, else the emulator, with one warning
    per process). An unknown format or impl is a ValueError naming the known ones.

    What the kernels do not compute is a one-line ValueError, never computed otherwise: attn_mask, dropout_p,
    is_causal, enable_gqa, a value head dim other than D, float64 and other dtypes, fewer than 3 dims.
    `fsbench.patch` hands these calls to torch's SDPA instead. An empty call (batch 0, no queries or no keys) returns
    torch's SDPA result.

    NaN and inf spread as in torch's SDPA and no further: each (batch, head) whose query, key or value holds one is
    computed by torch's SDPA (so a NaN row stays a NaN row, and an inf in q or k gives NaN where torch gives NaN);
    the other heads run the kernels. Finding them costs one pass over the inputs and one wait for the GPU per call.

    Autograd: the backward is the straight-through gradient of full-precision attention, i.e. torch's SDPA
    backward on the same inputs and `scale` (the quantization's rounding has no useful gradient of its own); the
    forward is the kernels' output. Not differentiable twice.
    """
    registry.check_format(fmt)
    refused = unsupported(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa, fmt)
    if refused:
        raise ValueError(f"fsbench.sdpa's kernels do not take {refused}; call "
                         "torch.nn.functional.scaled_dot_product_attention for it")
    if _empty(query, key, value):
        return torch_sdpa(query, key, value, scale=scale)
    warn_if_emulated(fmt, impl, query.device, query.shape[-1], stacklevel=4)  # the caller of fsbench.sdpa
    out: torch.Tensor = _StraightThrough.apply(query, key, value, scale, fmt, impl)
    return out


def computes(query: Any, key: Any, value: Any, attn_mask: Any, dropout_p: float, is_causal: bool,
             enable_gqa: bool, fmt: str, impl: str) -> bool:
    """Whether `sdpa(..., fmt=fmt, impl=impl)` runs the kernels on this SDPA call: not refused, not empty, and the
    kernel `impl` names runs here (`fsbench.patch` hands every other call to torch's SDPA)."""
    if unsupported(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa, fmt) or _empty(query, key, value):
        return False
    head_dim = query.shape[-1]
    return registry.get(registry.resolve_impl(fmt, impl, query.device, head_dim)).unmet(
        fmt, query.device, head_dim) is None


def running() -> bool:
    """Whether this thread is inside the kernels' forward of an `sdpa` call."""
    return getattr(_running, "active", False)


def unsupported(query: Any, key: Any, value: Any, attn_mask: Any, dropout_p: float, is_causal: bool,
                enable_gqa: bool, fmt: str) -> str:
    """What of an SDPA call the kernels do not take, in words ('' when they take all of it)."""
    named = [what for what, given in (("a mask (attn_mask)", attn_mask is not None), ("dropout (dropout_p)", dropout_p),
                                      ("causal masking (is_causal)", is_causal),
                                      ("grouped-query heads (enable_gqa)", enable_gqa)) if given]
    tensors = (query, key, value)
    if not all(isinstance(t, torch.Tensor) and t.layout == torch.strided and not t.is_nested for t in tensors):
        return ", ".join([*named, "inputs other than dense tensors"])
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) > 1:
        named.append("inputs of different dtypes")
    elif not dtypes <= set(api.DTYPES):
        named.append(f"{query.dtype} inputs")
    if len({t.device for t in tensors}) > 1:
        named.append("inputs on different devices")
    if min(t.dim() for t in tensors) < 3:
        named.append("inputs of fewer than 3 dims")
        return ", ".join(named)
    if key.shape[-1] != query.shape[-1] or key.shape[-2] != value.shape[-2]:
        named.append(f"key {tuple(key.shape)} beside query {tuple(query.shape)} and value {tuple(value.shape)}")
    elif value.shape[-1] != query.shape[-1]:
        named.append(f"a value head dim ({value.shape[-1]}) other than the query's ({query.shape[-1]})")
    if fmt != "bf16" and query.shape[-1] % MX_BLOCK:
        named.append(f"head dim {query.shape[-1]} in {fmt} (a multiple of the MX block, {MX_BLOCK})")
    try:
        torch.broadcast_shapes(*(t.shape[:-2] for t in tensors))
    except RuntimeError:
        named.append(f"leading dims that do not broadcast ({', '.join(str(tuple(t.shape)) for t in tensors)})")
    return ", ".join(named)


def _empty(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> bool:
    return any(t.numel() == 0 for t in (query, key, value))


class _StraightThrough(torch.autograd.Function):
    """The kernels' attention forward; backward, torch's SDPA gradient of the same inputs (straight-through)."""

    @staticmethod
    def forward(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float | None, fmt: str,
                impl: str) -> torch.Tensor:
        return _attend(query, key, value, scale, fmt, impl)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        query, key, value, scale, _, _ = inputs
        ctx.save_for_backward(query, key, value)
        ctx.scale = scale

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        needs = ctx.needs_input_grad[:3]
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_(need) for t, need in zip(ctx.saved_tensors, needs)]
            out = torch_sdpa(*leaves, scale=ctx.scale)
            grads = iter(torch.autograd.grad(out, [t for t, need in zip(leaves, needs) if need], grad))
        return (*(next(grads) if need else None for need in needs), None, None, None)


def _attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float | None, fmt: str,
            impl: str) -> torch.Tensor:
    """The kernels' attention of a call `unsupported` passes; heads with a NaN or inf input get torch's SDPA."""
    lead = torch.broadcast_shapes(*(t.shape[:-2] for t in (query, key, value)))
    q, k, v = query, key, value
    if not all(t.dim() == 4 and t.shape[:-2] == lead for t in (q, k, v)):  # one batch of (broadcast) heads
        q, k, v = (t.expand(*lead, *t.shape[-2:]).reshape(1, -1, *t.shape[-2:]) for t in (q, k, v))
    finite = _finite(q) & _finite(k) & _finite(v)  # (B, H)
    options: dict[str, Any] = {} if scale is None else {"sm_scale": scale}
    _running.active = True
    try:
        if bool(finite.all()):
            out = api.attention(q, k, v, fmt, impl=impl, layout="BHSD", **options)
        else:
            out = q.new_empty(*q.shape[:-1], v.shape[-1])
            bad = ~finite
            out[bad] = torch_sdpa(q[bad], k[bad], v[bad], scale=scale)
            if bool(finite.any()):
                out[finite] = api.attention(q[finite][None], k[finite][None], v[finite][None], fmt, impl=impl,
                                            layout="BHSD", **options)[0]
    finally:
        _running.active = False
    return out.reshape(*lead, *out.shape[-2:])


def _finite(t: torch.Tensor) -> torch.Tensor:
    """Per (batch, head) of a BHSD tensor, whether every value is finite (max |x| propagates NaN and inf)."""
    return torch.linalg.vector_norm(t, float("inf"), dim=(-2, -1)).isfinite()


def warn_if_emulated(fmt: str, impl: str, device: torch.device, head_dim: int, stacklevel: int = 3) -> None:
    """One warning per process when `impl="auto"` leaves an MX format to the emulator; `stacklevel` names the
    user's line as `warnings.warn` counts it from here."""
    if _warned or impl != registry.AUTO or fmt == "bf16":
        return
    if registry.resolve_impl(fmt, impl, device, head_dim) == registry.EMULATE:
        _warned.append(fmt)
        warnings.warn(f"fsbench: no GPU kernel runs {fmt} attention on {device} at head dim {head_dim}, so the "
                      "emulator runs it (exact but slow: seconds per call at thousands of tokens); a Hopper GPU "
                      "runs the kernels, and impl='emulate' asks for the emulator without this warning",
                      RuntimeWarning, stacklevel=stacklevel)
