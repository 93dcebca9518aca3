"""`torch.ops.fsbench.attention`: the custom op that puts `kernels.attention` inside compiled graphs."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from fsbench import kernels
from fsbench.kernels import op


def _qkv(dtype: torch.dtype, seq: int = 64, heads: int = 2, dim: int = 32) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(0)
    return tuple(torch.randn(1, seq, heads, dim, generator=generator).to(dtype) for _ in range(3))


@pytest.mark.parametrize(("fmt", "impl", "dtype"), [("mxfp8", "emulate", torch.float32),
                                                    ("mxfp4", "emulate", torch.bfloat16),
                                                    ("bf16", "auto", torch.bfloat16)])
def test_opcheck_passes_schema_fake_and_aot_dispatch(fmt, impl, dtype):
    torch.library.opcheck(op.attention_op().default, (*_qkv(dtype), fmt, impl))


@pytest.mark.parametrize("fmt", ["mxfp6", "bf16"])
def test_op_returns_the_kernels_output_as_contiguous_bshd(fmt):
    q, k, v = _qkv(torch.bfloat16)
    out = op.attention_op()(q, k, v, fmt, "auto")
    assert out.is_contiguous() and out.dtype == q.dtype
    assert torch.equal(out, kernels.attention(q, k, v, fmt, layout="BSHD"))


def _prologue_args(dtype: torch.dtype, seq: int = 64, heads: int = 2, dim: int = 32) -> tuple:
    """xq, xk, v and the prologue's tensors (RMSNorm weights, eps, RoPE tables) for `self_attention`."""
    generator = torch.Generator().manual_seed(1)
    xq, xk, v = _qkv(dtype, seq, heads, dim)
    wq, wk = (1 + 0.1 * torch.randn(heads * dim, generator=generator).to(dtype) for _ in range(2))
    angles = torch.randn(1, seq, 1, dim // 2, generator=generator).repeat_interleave(2, -1)
    return xq, xk, v, wq, wk, 1e-6, angles.cos(), angles.sin()


@pytest.mark.parametrize(("fmt", "impl", "dtype"), [("mxfp8", "emulate", torch.bfloat16),
                                                    ("bf16", "auto", torch.bfloat16),
                                                    ("mxfp6", "emulate", torch.float32)])
def test_self_attention_op_passes_opcheck_and_equals_attention_of_the_reference_prologue(fmt, impl, dtype):
    from fsbench.kernels.prologue import Prologue, apply

    args = _prologue_args(dtype)
    torch.library.opcheck(op.self_attention_op().default, (*args, fmt, impl))
    xq, xk, v, wq, wk, eps, cos, sin = args
    q, k = apply(xq, xk, Prologue(wq, wk, eps, cos, sin))
    out = op.self_attention_op()(*args, fmt, impl)
    assert out.is_contiguous() and out.dtype == dtype
    assert torch.equal(out, kernels.attention(q, k, v, fmt, impl=impl, layout="BSHD").contiguous())


def test_self_attention_op_without_rope_norms_only():
    from fsbench.kernels.prologue import Prologue, apply

    xq, xk, v, wq, wk, eps, _, _ = _prologue_args(torch.bfloat16)
    q, k = apply(xq, xk, Prologue(wq, wk, eps))
    out = op.self_attention_op()(xq, xk, v, wq, wk, eps, None, None, "mxfp4", "emulate")
    assert torch.equal(out, kernels.attention(q, k, v, "mxfp4", impl="emulate", layout="BSHD").contiguous())
    assert not torch.equal(out, kernels.attention(xq, xk, v, "mxfp4", impl="emulate", layout="BSHD").contiguous())


def test_an_installed_core_runs_in_the_op_body_also_inside_a_compiled_graph():
    seen = []

    def core(q, k, v, fmt, impl, prologue):
        seen.append((fmt, impl, prologue))
        return q  # an alias of an input: the op hands back a copy

    q, k, v = _qkv(torch.float32)
    compiled = torch.compile(lambda q, k, v, fmt: op.attention_op()(q, k, v, fmt, "emulate") * 2,
                             backend="eager", fullgraph=True)
    previous = op.set_core(core)
    try:
        out = compiled(q, k, v, "mxfp4")
    finally:
        assert op.set_core(previous) is core
    assert seen == [("mxfp4", "emulate", None)] and torch.equal(out, 2 * q)


def test_importing_the_op_module_neither_imports_torch_nor_registers_the_op():
    code = ("import sys, fsbench.kernels.op as op; "
            "assert 'torch' not in sys.modules and not op._ops; print('ok')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.stdout.strip() == "ok", result.stderr
