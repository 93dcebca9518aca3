"""`fsbench kernels bench`: attention throughput and accuracy on the H200.

TFLOP/s counts 4*b*h*s^2*d (both GEMMs, non-causal), timed with CUDA events around each call after a warm-up, median
of the repeats, rotating over several input sets so no call finds its inputs in L2. The Triton and Gluon rows time
the whole call: prepass (Hadamard + quantization) and attention kernel. `gluon-fused-mxfp8-op` times the call as the
pipeline makes it: the projections as BSHD tensors through the custom op `torch.ops.fsbench.self_attention`, RMSNorm
and RoPE included, BSHD output. `skeleton-fp8` runs the Gluon kernel's tiles with both FP8 GEMMs and no softmax: the
measured limit of that schedule under the power cap (no error columns: its output is not attention). "x
conventional" compares each row with the conventional FP8 kernel of its own implementation (same operands, same
schedule, only the softmax differs). `cudnn-fp8` is NVIDIA's FP8 attention (`kernels.tools.cudnn_fp8`, its scaling
and casts included), timed only where the optional cudnn-frontend package is installed; `sage2-fp8`, `fa3-fp8` and
`fa3-bf16` are SageAttention2 and FlashAttention-3 (`kernels.tools.peers`), likewise only where they are installed.
Accuracy is measured once per row against BF16 SDPA (cuDNN) on the first input set: relative error
||out - ref|| / ||ref|| in percent and the cosine similarity. At each shape the fastest of the BF16 rows
(`BF16_ROWS`) is "best BF16" and the fastest of NVIDIA's and the peers' FP8 rows (`FP8_PEERS`) "best FP8 peer";
every row is also given against both. `kernel_calls` adds each row's attention kernel alone, as the profiler's
device time (`kernels.tools.kernel_time`).
"""
from __future__ import annotations

import functools
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from fsbench.kernels import registry
from fsbench.kernels.constants import MX_FORMATS

SHAPES = ((1, 40, 75600, 128), (1, 24, 32768, 128))
BF16_ROWS = ("sdpa-cudnn-bf16", "sdpa-flash-bf16", "cudnn-bf16", "fa3-bf16")  # what "best BF16" is chosen from
FP8_PEERS = ("cudnn-fp8", "sage2-fp8", "fa3-fp8")  # what "best FP8 peer" is chosen from
EPS = 1e-6  # Wan's RMSNorm eps, for the row that times the pipeline's call


@dataclass(frozen=True)
class Row:
    """One benchmarked implementation."""

    name: str
    fn: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
    missing: str | None = None  # why the row cannot run here (an optional package absent), None if it can
    attention: bool = True  # False for the skeleton, whose output is not attention (no error is measured)
    bshd: bool = False  # True: its inputs are BSHD tensors underneath, as the pipeline's are (indexed BHSD)
    gqa: bool = False  # True: it takes k and v with fewer heads than q (grouped query heads)


def _sdpa(backend) -> Callable:
    def run(q, k, v):
        from torch.nn.attention import sdpa_kernel

        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=k.shape[1] != q.shape[1])
    return run


def _triton(fmt: str, impl: str = registry.TRITON, **options: Any) -> Callable:
    """A row of the Hopper kernel the registry calls `impl`."""
    kernel = registry.get(impl).hopper

    def run(q, k, v):
        from fsbench.kernels.hopper.launch import triton_attention

        return triton_attention(q, k, v, fmt, stats=False, kernel=kernel, **options)[0]
    return run


@functools.lru_cache(maxsize=4)
def _identity_prologue(channels: int, seq: int, head_dim: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """RMSNorm weights of one and RoPE at angle zero: the prologue's work at the values it leaves unchanged."""
    return (torch.ones(channels, device=device, dtype=torch.bfloat16),
            torch.ones(1, seq, 1, head_dim, device=device), torch.zeros(1, seq, 1, head_dim, device=device))


def _op(fmt: str, impl: str) -> Callable:
    """The call as the pipeline makes it: the projections as BSHD tensors through
    `torch.ops.fsbench.self_attention`, RMSNorm and RoPE included, BSHD output. The inputs' tokens have unit RMS
    (`make_inputs`), so the norm (weights of one) and the rotation (angle zero) leave q and k as they are, up to
    bf16 rounding, and the error column compares the same attention as the other rows'."""
    from fsbench.kernels.op import self_attention_op

    def run(q, k, v):
        xq, xk, v = (t.transpose(1, 2) for t in (q, k, v))
        b, s, h, d = xq.shape
        weights, cos, sin = _identity_prologue(h * d, s, d, xq.device)
        return self_attention_op()(xq, xk, v, weights, weights, EPS, cos, sin, fmt, impl).transpose(1, 2)
    return run


def rows() -> list[Row]:
    from torch.nn.attention import SDPBackend

    from fsbench.kernels.tools import cudnn_bf16, cudnn_fp8, peers

    frontend = None if cudnn_fp8.available() else f"needs the cudnn-frontend package (pip install {cudnn_fp8.PACKAGE})"
    return [Row("sdpa-cudnn-bf16", _sdpa(SDPBackend.CUDNN_ATTENTION), gqa=True),
            Row("sdpa-flash-bf16", _sdpa(SDPBackend.FLASH_ATTENTION), gqa=True),
            Row("cudnn-bf16", cudnn_bf16.cudnn_bf16_attention, frontend, gqa=True),
            Row("fa3-bf16", peers.fa3_bf16_attention, peers.fa3_missing(), gqa=True),
            Row("cudnn-fp8", cudnn_fp8.cudnn_fp8_attention, frontend, gqa=True),
            Row("sage2-fp8", peers.sage2_fp8_attention, peers.sage2_missing()),
            Row("fa3-fp8", peers.fa3_fp8_attention, peers.fa3_missing(), gqa=True),
            Row("triton-conventional-fp8", _triton("mxfp8", softmax="conventional")),
            Row("triton-fused-mxfp8", _triton("mxfp8")),
            Row("triton-fused-mxfp8-nogate", _triton("mxfp8", gate_doublings=None)),
            Row("triton-fused-mxfp6", _triton("mxfp6")),
            Row("triton-fused-mxfp4", _triton("mxfp4")),
            Row("triton-fused-mxfp6-rowscale", _triton("mxfp6", mx_p_scale="row")),
            Row("triton-fused-mxfp4-rowscale", _triton("mxfp4", mx_p_scale="row")),
            Row("gluon-conventional-fp8", _triton("mxfp8", registry.GLUON, softmax="conventional")),
            Row("gluon-fused-mxfp8", _triton("mxfp8", registry.GLUON)),
            Row("gluon-fused-mxfp8-op", _op("mxfp8", registry.GLUON), bshd=True),
            Row("gluon-fused-mxfp8-nogate", _triton("mxfp8", registry.GLUON, gate_doublings=None)),
            Row("gluon-fused-mxfp6", _triton("mxfp6", registry.GLUON)),
            Row("gluon-fused-mxfp4", _triton("mxfp4", registry.GLUON)),
            Row("gluon-fused-mxfp6-rowscale", _triton("mxfp6", registry.GLUON, mx_p_scale="row")),
            Row("gluon-fused-mxfp4-rowscale", _triton("mxfp4", registry.GLUON, mx_p_scale="row")),
            Row("skeleton-fp8", _skeleton, attention=False)]


def _skeleton(q, k, v):
    """The Gluon kernel's tiles with both FP8 GEMMs and no softmax: the limit under the power cap."""
    from fsbench.kernels.hopper.launch import skeleton

    return skeleton(q, k, v)


def select_rows(names: list[str] | None, among: list[Row] | None = None) -> tuple[list[Row], list[Row]]:
    """(rows to run, rows left out): the rows named, in the bench's order, or, for None, every row that can run
    here and those that cannot (an optional package absent), out of `among` (default: every bench row). Raises
    ValueError naming a row the bench lacks, or a named row that cannot run here."""
    every = rows() if among is None else among
    if names is None:
        return [r for r in every if not r.missing], [r for r in every if r.missing]
    unknown = sorted(set(names) - {r.name for r in every})
    if unknown:
        raise ValueError(f"unknown row(s) {', '.join(unknown)}; known: {', '.join(r.name for r in every)}")
    chosen = [r for r in every if r.name in names]
    for row in chosen:
        if row.missing:
            raise ValueError(f"row {row.name} {row.missing}")
    return chosen, []


def impl_of(row_name: str) -> str | None:
    """The registry's name of the Hopper kernel a row runs (its first word), None for the other rows."""
    impl = row_name.split("-", 1)[0]
    return impl if impl in registry.HOPPER else None


def time_ms(fn: Callable, inputs: list[tuple[torch.Tensor, ...]], warmup: int, repeats: int) -> list[float]:
    """Per-call milliseconds (CUDA events), cycling through the input sets."""
    for i in range(warmup):
        fn(*inputs[i % len(inputs)])
    torch.cuda.synchronize()
    times = []
    for i in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        args = inputs[i % len(inputs)]
        start.record()
        fn(*args)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def row_inputs(selected: list[Row], inputs: list[tuple[torch.Tensor, ...]]) -> list[list[tuple[torch.Tensor, ...]]]:
    """Each row's input sets: `inputs` itself, or for a `bshd` row the same values as BSHD tensors indexed BHSD
    (one copy made here, outside the timing, shared by every such row)."""
    bshd = ([tuple(t.transpose(1, 2).contiguous().transpose(1, 2) for t in triple) for triple in inputs]
            if any(row.bshd for row in selected) else [])
    return [bshd if row.bshd else inputs for row in selected]


def accuracy(out: torch.Tensor, ref: torch.Tensor) -> dict[str, float]:
    o, r = out.float().flatten(), ref.float().flatten()
    return {"rel_err_pct": 100 * ((o - r).norm() / r.norm()).item(),
            "cosine": torch.nn.functional.cosine_similarity(o, r, dim=0).item()}


def make_inputs(shape: tuple[int, int, int, int], sets: int) -> list[tuple[torch.Tensor, ...]]:
    """`sets` (q, k, v) triples of standard normal BF16 on the GPU, the same for every row (seed 0), each token
    scaled to unit RMS over its heads, as Wan's RMSNorm leaves q and k."""
    g = torch.Generator(device="cuda").manual_seed(0)

    def unit_rms(x: torch.Tensor) -> torch.Tensor:
        return (x * x.square().mean(dim=(1, 3), keepdim=True).rsqrt()).to(torch.bfloat16)

    return [tuple(unit_rms(torch.randn(shape, device="cuda", generator=g)) for _ in range(3)) for _ in range(sets)]


def bench_shape(shape: tuple[int, int, int, int], selected: list[Row], warmup: int = 2, repeats: int = 7,
                input_sets: int = 3, emulate: bool = False,
                progress: Callable[[dict[str, Any]], None] | None = None,
                hold: Callable[[Callable, tuple, int], dict[str, Any]] | None = None,
                kernel_calls: int = 0) -> list[dict[str, Any]]:
    """Benchmark every row at one BHSD shape; `emulate` adds the emulator's error for the fused rows.
    `progress` receives each row's result as soon as it is measured (the ratios are filled in at the end).
    `hold(fn, inputs, flops)`, when given, runs each row back to back and returns its clock and power for the
    result's "back_to_back" (the harness samples them; this module knows nothing of how). `kernel_calls` > 0
    profiles that many calls of each row for its attention kernel alone (`kernel_time`)."""
    b, h, s, d = shape
    flops = 4 * b * h * s * s * d
    inputs = make_inputs(shape, input_sets)
    from torch.nn.attention import SDPBackend

    ref = _sdpa(SDPBackend.CUDNN_ATTENTION)(*inputs[0])
    results = []
    for row, own in zip(selected, row_inputs(selected, inputs)):
        ms = time_ms(row.fn, own, warmup, repeats)
        med = statistics.median(ms)
        result: dict[str, Any] = {
            "row": row.name, "shape": list(shape), "median_ms": med, "min_ms": min(ms), "max_ms": max(ms),
            "tflops": flops / med / 1e9,
            **(accuracy(row.fn(*own[0]), ref) if row.attention else {"rel_err_pct": None, "cosine": None})}
        if impl_of(row.name) == registry.TRITON:
            from fsbench.kernels.hopper.triton_fused import attention_kernel

            result["launch"] = str(attention_kernel.best_config)  # the autotuner's pick for this row
        elif impl_of(row.name) == registry.GLUON:
            from fsbench.kernels.hopper.tiling import GLUON

            result["launch"] = str(GLUON)
        fmt = row.name.split("-fused-", 1)[-1]
        if emulate and fmt in MX_FORMATS:
            from fsbench.kernels.reference.emulator import emulate as run_emulator

            q, k, v = inputs[0]
            emu = run_emulator(q, k, v, fmt)[0]
            result["emulator_rel_err_pct"] = accuracy(emu, ref)["rel_err_pct"]
            del emu
        if kernel_calls:
            from fsbench.kernels.tools.kernel_time import kernel_alone

            result.update(kernel_alone(row.fn, own, kernel_calls, flops))
        if hold:
            result["back_to_back"] = hold(row.fn, own[0], flops)
        results.append(result)
        if progress:
            progress(result)
        torch.cuda.empty_cache()
    return add_ratios(results)


def add_ratios(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """x_cudnn against the SDPA cuDNN (BF16) row, x_cudnn_fp8 against the cudnn-fp8 row and x_conventional
    against the conventional FP8 row of the same implementation, each at the same shape (None where that baseline
    was not measured); x_best_bf16 and x_best_fp8_peer against the fastest BF16 row and FP8 peer at that shape
    (`best_rows`), named in best_bf16 and best_fp8_peer."""
    tflops = {(r["row"], tuple(r.get("shape") or ())): r["tflops"] for r in results}
    best = {tuple(b["shape"]): b for b in best_rows(results)}
    for r in results:
        shape, impl = tuple(r.get("shape") or ()), impl_of(r["row"])
        conventional = f"{impl}-conventional-fp8" if impl else None
        for key, baseline in (("x_cudnn", "sdpa-cudnn-bf16"), ("x_cudnn_fp8", "cudnn-fp8"),
                              ("x_conventional", conventional)):
            own = tflops.get((baseline, shape))
            r[key] = r["tflops"] / own if own else None
        for kind in ("best_bf16", "best_fp8_peer"):
            chosen = best.get(shape, {}).get(kind)
            r[kind] = chosen["row"] if chosen else None
            r[f"x_{kind}"] = r["tflops"] / chosen["tflops"] if chosen else None
    return results


def best_rows(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """At each shape, the fastest BF16 row and the fastest FP8 peer by the call's TFLOP/s ("best_bf16",
    "best_fp8_peer": {"row", "tflops"}, None where none was measured), and by the kernel alone where it was
    profiled ("best_bf16_kernel", "best_fp8_peer_kernel"). A row run under another cuDNN (`name@version`) competes
    under its own name."""
    shapes: dict[tuple, list[dict[str, Any]]] = {}
    for r in results:
        shapes.setdefault(tuple(r.get("shape") or ()), []).append(r)
    summary = []
    for shape, rows_here in shapes.items():
        entry: dict[str, Any] = {"shape": list(shape)}
        for kind, names in (("best_bf16", BF16_ROWS), ("best_fp8_peer", FP8_PEERS)):
            for suffix, key in (("", "tflops"), ("_kernel", "kernel_tflops")):
                candidates = [r for r in rows_here if r["row"].split("@", 1)[0] in names and r.get(key)]
                top = max(candidates, key=lambda r: r[key], default=None)
                entry[kind + suffix] = {"row": top["row"], "tflops": top[key]} if top else None
        summary.append(entry)
    return summary


def format_best(results: list[dict[str, Any]]) -> str:
    """One line per shape naming the best BF16 row and the best FP8 peer, as the call and as the kernel alone."""
    def name(chosen: dict[str, Any] | None) -> str:
        return "none measured" if chosen is None else f"{chosen['row']} {chosen['tflops']:.1f}"

    lines = []
    for b in best_rows(results):
        line = (f"{str(tuple(b['shape'])):<20} best BF16: {name(b['best_bf16'])}; "
                f"best FP8 peer: {name(b['best_fp8_peer'])}")
        if b["best_bf16_kernel"] or b["best_fp8_peer_kernel"]:
            line += f" (kernel alone: {name(b['best_bf16_kernel'])}; {name(b['best_fp8_peer_kernel'])})"
        lines.append(line + " TFLOP/s")
    return "\n".join(lines)


def _ratio(value: float | None) -> str:
    """A speed ratio, blank when its baseline row was not measured (rather than a misleading 0.00)."""
    return "" if value is None else f"{value:.2f}"


def _num(value: float | None, digits: int) -> str:
    """An error column, blank for a row that is not attention."""
    return "" if value is None else f"{value:.{digits}f}"


# the columns a table grows where some row has them: (header, result key, digits)
_EXTRA = (("x best bf16", "x_best_bf16", 2), ("x best fp8", "x_best_fp8_peer", 2),
          ("kernel ms", "kernel_ms", 2), ("kernel TFLOP/s", "kernel_tflops", 1),
          ("NVIDIA TFLOP/s", "published_tflops", 0), ("x NVIDIA", "x_published", 2))


def _extra(results: list[dict[str, Any]]) -> list[tuple[str, str, int]]:
    """The optional columns some row of `results` has a value for."""
    return [c for c in _EXTRA if any(r.get(c[1]) is not None for r in results)]


def format_table(results: list[dict[str, Any]]) -> str:
    extra = _extra(results)
    head = (f"{'shape':<20} {'row':<24} {'ms':>8} {'TFLOP/s':>8} {'x bf16':>7} {'x fp8':>6} {'x conv':>7} "
            f"{'err %':>7} {'cosine':>8} {'emu err %':>9}" + "".join(f" {h:>{max(len(h), 7)}}" for h, _, _ in extra))
    lines = [head, "-" * len(head)]
    for r in results:
        emu = r.get("emulator_rel_err_pct")
        lines.append(f"{str(tuple(r['shape'])):<20} {r['row']:<24} {r['median_ms']:>8.2f} {r['tflops']:>8.1f} "
                     f"{_ratio(r.get('x_cudnn')):>7} {_ratio(r.get('x_cudnn_fp8')):>6} "
                     f"{_ratio(r.get('x_conventional')):>7} {_num(r['rel_err_pct'], 3):>7} "
                     f"{_num(r['cosine'], 5):>8} {'' if emu is None else f'{emu:.3f}':>9}"
                     + "".join(f" {_num(r.get(k), n):>{max(len(h), 7)}}" for h, k, n in extra))
    return "\n".join(lines)


def tflop_per_joule(tflops: float | None, watts: float | None) -> float | None:
    """Energy efficiency of a row run back to back: TFLOP/s over the board's watts (J/s) is TFLOP per joule;
    None where the power was not sampled."""
    return None if tflops is None or not watts else tflops / watts


def _held(r: dict[str, Any]) -> str:
    """The back-to-back columns of one row: TFLOP/s, median SM clock and power, TFLOP/J (blank where not
    measured)."""
    held = r.get("back_to_back") or {}
    return " | ".join("" if held.get(k) is None else f"{held[k]:.{n}f}" for k, n in
                      (("tflops", 1), ("clock_mhz", 0), ("power_w", 0), ("tflop_per_j", 3)))


def format_markdown(results: list[dict[str, Any]]) -> str:
    clocks = any("back_to_back" in r for r in results)
    extra = _extra(results)
    head = ("| shape | row | median ms | TFLOP/s | x cuDNN BF16 | x cuDNN FP8 | x conventional | rel err % | cosine "
            "| emulator rel err % |" + "".join(f" {h} |" for h, _, _ in extra))
    lines = [head + (" back to back TFLOP/s | MHz | W | TFLOP/J |" if clocks else ""),
             "|---" * (head.count("|") - 1 + 4 * clocks) + "|"]
    for r in results:
        emu = r.get("emulator_rel_err_pct")
        lines.append(f"| {tuple(r['shape'])} | {r['row']} | {r['median_ms']:.2f} | {r['tflops']:.1f} | "
                     f"{_ratio(r.get('x_cudnn'))} | {_ratio(r.get('x_cudnn_fp8'))} | "
                     f"{_ratio(r.get('x_conventional'))} | {_num(r['rel_err_pct'], 3)} | "
                     f"{_num(r['cosine'], 5)} | {'' if emu is None else f'{emu:.3f}'} |"
                     + "".join(f" {_num(r.get(k), n)} |" for _, k, n in extra)
                     + (f" {_held(r)} |" if clocks else ""))
    return "\n".join(lines)


def best_markdown(results: list[dict[str, Any]]) -> str:
    """`format_best` as a markdown list, to follow the table."""
    return "\n".join(f"- {' '.join(line.split())}" for line in format_best(results).splitlines())
