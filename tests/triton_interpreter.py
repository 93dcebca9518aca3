"""Triton kernels on the CPU (TRITON_INTERPRET=1) for the tests: a runner and the cast patches that make the
interpreter round as the GPU does."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def run_in_interpreter(tmp_path, script: str, *args: str) -> dict:
    """Run `script` with TRITON_INTERPRET=1 (Triton kernels on the CPU) and return the JSON of its last line;
    skip where Triton is not installed, fail on any error of the script (a broken script must not pass as a
    missing interpreter)."""
    pytest.importorskip("triton")
    path = tmp_path / "interpreted.py"
    path.write_text(script)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True, env=env, timeout=600)
    if run.returncode:
        pytest.fail(f"the script failed in the Triton interpreter: {run.stderr[-1500:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


RNE_FP8 = '''
import numpy as np, torch
import triton, triton.language as tl
from triton.runtime import interpreter

_convert = interpreter._convert_float


def _convert_rne(data, src, dst, rounding):
    """The interpreter's own FP8 cast is not RNE and does not saturate: use torch's for e4m3."""
    if dst == tl.float8e4nv and src in (tl.float32, tl.float16):
        x = torch.from_numpy(np.frombuffer(data.tobytes(), dtype=np.float32 if src == tl.float32 else np.float16)
                             .astype(np.float32))
        return x.clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8).numpy().reshape(data.shape)
    if src == tl.float8e4nv and dst in (tl.float32, tl.float16):
        x = torch.from_numpy(np.frombuffer(data.tobytes(), dtype=np.uint8).copy()).view(torch.float8_e4m3fn)
        x = x.float() if dst == tl.float32 else x.half()
        return x.numpy().view(np.uint32 if dst == tl.float32 else np.uint16).reshape(data.shape)
    return _convert(data, src, dst, rounding)


interpreter._convert_float = _convert_rne
'''

# After RNE_FP8: float32 -> bfloat16 rounds to nearest even, as the GPU's cvt.rn.bf16.f32 (the interpreter truncates)
RNE_BF16 = '''
_convert_fp8 = interpreter._convert_float


def _convert_rne_bf16(data, src, dst, rounding):
    if src == tl.float32 and dst == tl.bfloat16:
        x = torch.from_numpy(np.frombuffer(data.tobytes(), dtype=np.float32).copy())
        return x.to(torch.bfloat16).view(torch.uint16).numpy().reshape(data.shape)
    return _convert_fp8(data, src, dst, rounding)


interpreter._convert_float = _convert_rne_bf16
'''
