"""`fsbench kernels check`: the Triton (or Gluon) kernels against the emulator on random and adversarial inputs.

Cases: standard-normal inputs at a moderate shape and with a tail tile (s=4000 = 31*128+32, its masked keys); a
late sink (one key 40 doublings above tile 0's maximum, in the last tile); a staircase (maxima rising by 36
doublings every few tiles); the edge cases of the pattern grid (`docs/pattern-grid.md`): a key at the gate's
threshold (32 doublings), one at an integer overshoot (33), a first tile some 120 doublings above every other
(the tiles far below their reference) and a key 400 doublings above (a large overshoot); and the late sink and
staircase with the gate disabled. For each case and format the output difference to the emulator and both
statistics are reported.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from fsbench.kernels import registry
from fsbench.kernels.constants import LOG2E, MX_FORMATS


@dataclass(frozen=True)
class Case:
    """One input family at one shape, with the attention options it runs under."""

    name: str
    shape: tuple[int, int, int, int]
    options: dict[str, Any]
    spikes: tuple[tuple[int, float], ...] = ()  # (key index, doublings above the typical tile-0 max)


def make_inputs(case: Case, seed: int, device: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """BHSD bf16 inputs. Spiked keys point along a direction every query shares, so their scores sit
    the requested number of doublings above the rest for nearly every row."""
    b, h, s, d = case.shape
    g = torch.Generator(device="cpu").manual_seed(seed)
    q, k, v = (torch.randn(b, h, s, d, generator=g) for _ in range(3))
    if case.spikes:
        u = torch.nn.functional.normalize(torch.randn(d, generator=g), dim=0)
        q = q + 3.0 * u
        unit = d ** -0.5 * LOG2E * 3.0  # doublings per unit of k along u
        for index, doublings in case.spikes:
            k[:, :, index] = u * (doublings + 4.0) / unit
    return tuple(t.to(device=device, dtype=torch.bfloat16) for t in (q, k, v))


def cases() -> list[Case]:
    shape, tail = (1, 4, 4096, 128), (1, 4, 4000, 128)
    late = ((3990, 40.0),)
    stair = tuple((512 * i + 7, 36.0 * i) for i in range(1, 4))
    out = [Case("random", shape, {}), Case("random-tail", tail, {}),
           Case("late-sink", tail, {}, late), Case("staircase", shape, {}, stair),
           Case("gate-threshold", tail, {}, ((2000, 32.0),)), Case("integer-overshoot", tail, {}, ((2000, 33.0),)),
           Case("far-below", tail, {}, ((5, 120.0),)), Case("large-overshoot", tail, {}, ((3990, 400.0),)),
           Case("late-sink-no-gate", tail, {"gate_doublings": None}, late),
           Case("staircase-no-gate", shape, {"gate_doublings": None}, stair)]
    return out


def compare(case: Case, fmt: str, softmax: str, seed: int = 0, device: str = "cuda",
            impl: str = registry.TRITON) -> dict[str, Any]:
    """Run the Hopper kernel the registry calls `impl` and the emulator on one case; returns differences and
    statistics."""
    from fsbench.kernels.hopper.launch import triton_attention
    from fsbench.kernels.reference.emulator import emulate

    q, k, v = make_inputs(case, seed, device)
    options = dict(case.options)
    emu_options = dict(options)
    if softmax == "conventional":
        options["softmax"] = "conventional"
        emu_options.update(frozen_max=False, schraudolph=False, rowsum_gemm=False)
    out, stats = triton_attention(q, k, v, fmt, kernel=registry.get(impl).hopper, **options)
    assert stats is not None  # triton_attention returns them unless stats=False
    ref, ref_stats = emulate(q, k, v, fmt, **emu_options)
    exact = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float())
    diff = (out.float() - ref.float())
    return {"case": case.name, "shape": list(case.shape), "fmt": fmt, "softmax": softmax, "impl": impl,
            "rel_diff_vs_emulator": (diff.norm() / ref.float().norm()).item(),
            "max_abs_diff_vs_emulator": diff.abs().max().item(),
            "rel_err_kernel_pct": 100 * ((out.float() - exact).norm() / exact.norm()).item(),
            "rel_err_emulator_pct": 100 * ((ref.float() - exact).norm() / exact.norm()).item(),
            "finite": bool(torch.isfinite(out).all()),
            "rollbacks": stats.rollbacks, "rollbacks_emulator": ref_stats.rollbacks,
            "gate_trips": stats.gate_trips, "gate_trips_emulator": ref_stats.gate_trips}


def run_checks(formats: tuple[str, ...] = MX_FORMATS, device: str = "cuda",
               impl: str = registry.TRITON) -> list[dict[str, Any]]:
    """Every case in every format (fused), plus the conventional baseline in mxfp8 on the plain cases."""
    rows = []
    for case in cases():
        for fmt in formats:
            rows.append(compare(case, fmt, "fused", device=device, impl=impl))
        if not case.spikes:
            rows.append(compare(case, "mxfp8", "conventional", device=device, impl=impl))
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'case':<18} {'fmt':<6} {'softmax':<12} {'rel diff':>9} {'max abs':>9} {'err% kern':>9} "
            f"{'err% emu':>9} {'finite':>6} {'rollbk k/e':>11} {'trips k/e':>10}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['case']:<18} {r['fmt']:<6} {r['softmax']:<12} {r['rel_diff_vs_emulator']:>9.2e} "
                     f"{r['max_abs_diff_vs_emulator']:>9.2e} {r['rel_err_kernel_pct']:>9.3f} "
                     f"{r['rel_err_emulator_pct']:>9.3f} {str(r['finite']):>6} "
                     f"{r['rollbacks']:>5}/{r['rollbacks_emulator']:<5} "
                     f"{r['gate_trips']:>4}/{r['gate_trips_emulator']:<5}")
    return "\n".join(lines)
