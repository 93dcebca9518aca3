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


def test_an_installed_core_runs_in_the_op_body_also_inside_a_compiled_graph():
    seen = []

    def core(q, k, v, fmt, impl):
        seen.append((fmt, impl))
        return q  # an alias of an input: the op hands back a copy

    q, k, v = _qkv(torch.float32)
    compiled = torch.compile(lambda q, k, v, fmt: op.attention_op()(q, k, v, fmt, "emulate") * 2,
                             backend="eager", fullgraph=True)
    previous = op.set_core(core)
    try:
        out = compiled(q, k, v, "mxfp4")
    finally:
        assert op.set_core(previous) is core
    assert seen == [("mxfp4", "emulate")] and torch.equal(out, 2 * q)


def test_importing_the_op_module_neither_imports_torch_nor_registers_the_op():
    code = ("import sys, fsbench.kernels.op as op; "
            "assert 'torch' not in sys.modules and op._op is None; print('ok')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.stdout.strip() == "ok", result.stderr
