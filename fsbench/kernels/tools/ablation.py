"""The component ablation of the paper's Table 4, run on the emulator: global relative error and cosine
similarity against BF16 attention with the conventional softmax, on standard-normal inputs."""
from __future__ import annotations

from collections.abc import Callable

import torch

from fsbench.kernels.constants import FORMATS
from fsbench.kernels.reference.emulator import emulate

CONVENTIONAL = {"rowsum_gemm": False, "frozen_max": False, "schraudolph": False}

# (label, emulator options), in the paper's row order.
ROWS: tuple[tuple[str, dict], ...] = (
    ("conventional softmax", CONVENTIONAL),
    ("l as GEMM", {**CONVENTIONAL, "rowsum_gemm": True}),
    ("l as GEMM + frozen max", {**CONVENTIONAL, "rowsum_gemm": True, "frozen_max": True}),
    ("+ Schraudolph, proxy U16 (complete)", {"proxy": "u16"}),
    ("+ Schraudolph, proxy U32", {"proxy": "u32"}),
    ("+ Schraudolph, proxy U8", {"proxy": "u8"}),
)

# Table 4 of Wu, Korhonen, Carabano Bravo, "Fused-Softmax for efficient quantized attention"
# (arXiv 2611.09225v1): (err %, cosine) per row and format; None is the reference itself.
PAPER_TABLE4: dict[str, list[tuple[float, float] | None]] = {
    "bf16": [None, (0.026, 1.00000), (0.310, 1.00000), (1.798, 0.99984), (1.798, 0.99984), (3.69, 0.99934)],
    "mxfp8": [(5.39, 0.99855), (5.39, 0.99855), (5.42, 0.99853), (5.69, 0.99838), (5.69, 0.99838), (5.99, 0.99822)],
    "mxfp6": [(6.17, 0.99810), (6.17, 0.99810), (6.17, 0.99810), (6.46, 0.99791), (6.46, 0.99791), (6.71, 0.99775)],
    "mxfp4": [(20.45, 0.97890), (20.45, 0.97890), (20.45, 0.97890), (20.53, 0.97872), (20.53, 0.97872),
              (20.64, 0.97854)],
}


def relative_error_pct(out: torch.Tensor, ref: torch.Tensor) -> float:
    return 100 * ((out.double() - ref.double()).norm() / ref.double().norm()).item()


def cosine(out: torch.Tensor, ref: torch.Tensor) -> float:
    return torch.nn.functional.cosine_similarity(out.double().flatten(), ref.double().flatten(), dim=0).item()


def normal_inputs(shape: tuple[int, int, int, int], seed: int, device: str) -> tuple[torch.Tensor, ...]:
    """Standard-normal q, k, v (BHSD) in bf16, the precision attention receives them in."""
    gen = torch.Generator(device=device).manual_seed(seed)
    return tuple(torch.randn(shape, generator=gen, device=device).to(torch.bfloat16) for _ in range(3))


def run_ablation(shape: tuple[int, int, int, int] = (1, 1, 1024, 128), seeds: int = 1, device: str = "cpu",
                 formats: tuple[str, ...] = FORMATS, progress: Callable[[str], None] | None = None,
                 on_seed: Callable[[dict], None] | None = None, first_seed: int = 0) -> dict:
    """Every row of Table 4 for every format, averaged over the inputs of seeds first_seed ..
    first_seed + seeds - 1; returns a JSON-able dict.

    `on_seed` receives the average over the seeds finished so far after each one, so a long run that
    is stopped keeps what it finished (and `first_seed` lets another run add the missing seeds, see
    `merge_ablations`)."""
    b, h, s, d = shape
    if min(shape) < 1 or d % 32:
        raise ValueError(f"ablation shape must be positive with head_dim a multiple of 32, got {shape}")
    chunk = 1 << 28 if torch.device(device).type == "cuda" else 1 << 26
    sums = {(fmt, r): [0.0, 0.0] for fmt in formats for r in range(len(ROWS))}
    result: dict = {}
    for seed in range(first_seed, first_seed + seeds):
        q, k, v = normal_inputs(shape, seed, device)
        ref, _ = emulate(q, k, v, "bf16", chunk_elements=chunk, **CONVENTIONAL)
        for fmt in formats:
            for r, (label, options) in enumerate(ROWS):
                out, _ = emulate(q, k, v, fmt, chunk_elements=chunk, **options)
                sums[fmt, r][0] += relative_error_pct(out, ref)
                sums[fmt, r][1] += cosine(out, ref)
                if progress:
                    progress(f"seed {seed} {fmt:>5} {label}")
        result = _summary(shape, (first_seed, seed + 1), device, formats, sums)
        if on_seed:
            on_seed(result)
    return result


def _summary(shape: tuple[int, ...], seed_range: tuple[int, int], device: str, formats: tuple[str, ...],
             sums: dict) -> dict:
    seeds = seed_range[1] - seed_range[0]
    rows = []
    for r, (label, options) in enumerate(ROWS):
        row = {"components": label, "options": options}
        for fmt in formats:
            err, cos = (x / seeds for x in sums[fmt, r])
            paper = PAPER_TABLE4[fmt][r]
            row[fmt] = {"err_pct": err, "cos": cos, "paper_err_pct": paper[0] if paper else None,
                        "paper_cos": paper[1] if paper else None}
        rows.append(row)
    return {"shape": list(shape), "seeds": seeds, "seed_range": list(seed_range), "device": device,
            "formats": list(formats), "reference": "bf16 emulator, conventional softmax", "rows": rows}


def seed_range(result: dict) -> tuple[int, int]:
    """[first, end) of the seeds a result averages (results from before `seed_range` start at 0)."""
    first, end = result.get("seed_range", (0, result["seeds"]))
    return int(first), int(end)


def merge_ablations(results: list[dict]) -> dict:
    """One result averaging every seed of `results`: runs of the same shape and formats over disjoint
    seed ranges, weighted by their seed counts (so 9 seeds + 1 seed equals the 10-seed mean)."""
    if not results:
        raise ValueError("nothing to merge")
    first = results[0]
    for r in results[1:]:
        if r["shape"] != first["shape"] or r["formats"] != first["formats"]:
            raise ValueError(f"cannot merge shape {r['shape']} / formats {r['formats']} into "
                             f"shape {first['shape']} / formats {first['formats']}")
    ranges = sorted(seed_range(r) for r in results)
    for (_, end), (start, _) in zip(ranges, ranges[1:]):
        if start != end:
            raise ValueError(f"seed ranges must follow each other without overlap or gap: {ranges}")
    total = sum(r["seeds"] for r in results)
    rows = []
    for i, row in enumerate(first["rows"]):
        merged = dict(row)
        for fmt in first["formats"]:
            cell = dict(row[fmt])
            for key in ("err_pct", "cos"):
                cell[key] = sum(r["rows"][i][fmt][key] * r["seeds"] for r in results) / total
            merged[fmt] = cell
        rows.append(merged)
    return {**first, "seeds": total, "seed_range": [ranges[0][0], ranges[-1][1]],
            "device": "; ".join(dict.fromkeys(r["device"] for r in results)), "rows": rows}


def format_ablation(result: dict) -> str:
    """Table 4 as text: per format the error in %, the paper's error in brackets, and the cosine."""
    fmts = result["formats"]
    first, end = seed_range(result)
    seeds = f"{result['seeds']} seed(s)" + (f" ({first}..{end - 1})" if first else "")
    lines = [f"shape {tuple(result['shape'])}, {seeds}, device {result['device']}; "
             "error % [paper] and cosine against bf16 attention with the conventional softmax",
             f"{'components':<37}" + "".join(f"{f:>27}" for f in fmts)]
    for row in result["rows"]:
        cells = []
        for f in fmts:
            c = row[f]
            paper = "ref" if c["paper_err_pct"] is None else f"{c['paper_err_pct']:g}"
            cells.append(f"{c['err_pct']:8.3f} [{paper:>6}] {c['cos']:.5f}")
        lines.append(f"{row['components']:<37}" + "".join(f"{c:>27}" for c in cells))
    return "\n".join(lines)
