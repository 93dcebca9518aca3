#!/usr/bin/env python3
"""Render results/README.md from benchmarks/front_page.md and the raw files under results/, so that every figure
in a headline table comes from a committed JSON and carries its command, commit, device and date.

The template holds the page's prose; a line `{{ name }}` stands for the table of that name in TABLES, rendered with
the provenance of each of its sources under it. Adding a figure is adding its JSON under results/ and one line to
TABLES (a kind below or in baseline_tables.py, and the JSON's path relative to results/). Written by hand because
the kinds are this project's own JSON layouts; a template engine would add nothing to a one-line placeholder.

`--from DIR` first publishes what `benchmarks/front_page.sh --out DIR` measured: each step's files are copied
under results/<card>/ and become the sources of the tables they feed, in results/figures.json, in place of that
card's older sources (another card's stay).

usage: python benchmarks/render.py [--check | --from DIR]   (--check: exit 1 where the committed page differs)
"""
from __future__ import annotations

import argparse
import difflib
import json
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# the table kinds beside this file and this checkout's fsbench (their figures), also where this file is imported
sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).resolve().parents[1])]
from front_page import StateError, done_steps, read_state  # noqa: E402

from baseline_tables import calibration, headline  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = Path(__file__).with_name("front_page.md")
RESULTS = REPO / "results"
PAGE = RESULTS / "README.md"
FIGURES = "figures.json"  # under RESULTS: table name -> its sources, as `--from` published them
PLACEHOLDER = re.compile(r"^\{\{ ([\w-]+) \}\}$")
OUTPUT_OPTIONS = ("--json", "--markdown", "--out")  # machine-local paths, not part of what was measured


class RenderError(Exception):
    """A template or a source that cannot be rendered (one line saying which and why)."""


@dataclass(frozen=True)
class Run:
    """One command that produced (part of) a source: what ran, on which commit, when."""

    command: str
    commit: str
    date: str
    label: str = ""


@dataclass(frozen=True)
class Source:
    """One raw file (or run folder) under results/ and the runs it comes from (several where parts were merged)."""

    path: str
    data: Any
    device: str
    runs: tuple[Run, ...]


Rows = list[list[str]]


@dataclass(frozen=True)
class Table:
    """A headline table: its placeholder name, how it is drawn and the raw files it is drawn from."""

    name: str
    kind: Callable[..., tuple[list[str], Rows]]
    sources: tuple[str, ...]
    options: dict[str, Any] = field(default_factory=dict)
    plot: str = ""  # where given, the alt text of each source's plot (its path, .png) above the table


# ---- provenance ---------------------------------------------------------------------------------------------------

def strip_outputs(command: str) -> str:
    """The command less its output options (their paths are the measuring machine's, not part of the figure)."""
    words = command.split()
    kept, i = [], 0
    while i < len(words):
        word, following = words[i], words[i + 1] if i + 1 < len(words) else "-"
        if word in OUTPUT_OPTIONS and not following.startswith(("-", "(")):
            i += 2  # the option and its path (a bare flag, such as proxy-table's --json, stays)
            continue
        if not word.startswith(tuple(f"{o}=" for o in OUTPUT_OPTIONS)):
            kept.append(word)
        i += 1
    return " ".join(kept)


def short_date(stamp: str) -> str:
    """'2026-12-03T19:07:38+00:00' -> '2026-12-03 19:07 UTC' (a date alone stays as it is)."""
    match = re.match(r"(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2})", stamp)
    return f"{match.group(1)} {match.group(2)} UTC" if match else stamp


def short_commit(commit: str) -> str:
    sha, _, dirty = commit.partition("+")
    return sha[:7] + (f"+{dirty}" if dirty else "")


def load(path: str) -> Source:
    """A JSON file with top-level provenance, or a run folder (manifest.json, profile.json and fsbench.log)."""
    full = RESULTS / path
    if full.is_dir():
        return _run_folder(path, full)
    try:
        data = json.loads(full.read_text())
    except FileNotFoundError:
        raise RenderError(f"results/{path} not found") from None
    except json.JSONDecodeError as e:
        raise RenderError(f"results/{path} is not JSON: {e}") from None
    parts = _parts(data)
    if not data.get("device") or not parts or any(not (p.get("command") and p.get("commit") and p.get("date"))
                                                  for _, p in parts):
        raise RenderError(f"results/{path} lacks its command, commit, device or date: a published figure names them")
    runs = tuple(Run(strip_outputs(p["command"]), short_commit(p["commit"]), short_date(p["date"]), label)
                 for label, p in parts)
    return Source(path, data, data["device"], runs)


def _parts(data: dict) -> list[tuple[str, dict]]:
    """The runs a JSON names: its own top-level command, or those under `provenance` (label: run, or label: {parts:
    [run, ...]}) where it merges several."""
    if "command" in data:
        return [("", {"command": data["command"], "commit": data.get("git_commit"), "date": data.get("date")})]
    parts = []
    for label, entry in (data.get("provenance") or {}).items():
        for i, part in enumerate(entry.get("parts", [entry])):
            first, end = part.get("seed_range", (0, 0))
            seeds = "" if end == first else f", seed {first}" if end == first + 1 else f", seeds {first}-{end - 1}"
            parts.append((f"{label}{seeds}" if i or seeds else label, part))
    return parts


def _run_folder(path: str, full: Path) -> Source:
    try:
        manifest = json.loads((full / "manifest.json").read_text())
        profile = json.loads((full / "profile.json").read_text())
        log = (full / "fsbench.log").read_text()
    except FileNotFoundError as e:
        raise RenderError(f"results/{path} is not a run folder with a profile: {e.filename} not found") from None
    command = re.search(r"fsbench: command: (.+)", log)
    if command is None:
        raise RenderError(f"results/{path}/fsbench.log does not name its command")
    data = {"manifest": manifest, "profile": profile["summary"]}
    run = Run(strip_outputs(command.group(1)), short_commit(manifest["git_commit"]), short_date(manifest["date"]),
              manifest["schedule"]["name"])
    return Source(path, data, manifest["device"]["name"], (run,))


def provenance(sources: list[Source]) -> list[str]:
    """One line per run of each source: its command, commit, device, date and a link to the raw file."""
    lines = []
    for s in sources:
        for r in s.runs:
            name = f"{r.label}: " if r.label else ""
            lines.append(f"- {name}`{r.command}`; commit `{r.commit}`; {s.device}; {r.date}; "
                         f"raw: [{s.path}]({s.path})")
    return lines


# ---- the kinds of table -------------------------------------------------------------------------------------------

def _f(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _shape(shape: list[int]) -> str:
    return f"({','.join(map(str, shape))})"


def _b2b(row: dict) -> str:
    b = row.get("back_to_back") or {}
    if not b:
        return "-"
    return f"{b['tflops']:.1f}, {b['clock_mhz']:.0f}, {b['power_w']:.0f}, {b['tflop_per_j']:.3f}"


def _error(row: dict) -> str:
    return "-" if row["row"].startswith("skeleton") else _f(row.get("rel_err_pct"), 3)


def bench_by_kernel(sources: list[Source]) -> tuple[list[str], Rows]:
    """`fsbench kernels bench` JSON (one per card), one line per card and kernel, a group of columns per shape."""
    shapes = list(dict.fromkeys(tuple(r["shape"]) for s in sources for r in s.data["rows"]))
    header = ["card", "row"]
    for shape in shapes:
        header += [f"TFLOP/s {_shape(list(shape))}", "x cuDNN FP8", "error %", "back to back: TFLOP/s, MHz, W, TFLOP/J"]
    rows = []
    for s in sources:
        for name in dict.fromkeys(r["row"] for r in s.data["rows"]):
            line = [s.device, f"`{name}`"]
            for shape in shapes:
                r = next((r for r in s.data["rows"] if r["row"] == name and tuple(r["shape"]) == shape), None)
                line += ["-"] * 4 if r is None else [_f(r["tflops"]), f"{_f(r.get('x_cudnn_fp8'), 2)}x", _error(r),
                                                     _b2b(r)]
            rows.append(line)
    return header, rows


def bench_by_shape(sources: list[Source]) -> tuple[list[str], Rows]:
    """`fsbench kernels bench` JSON (one or several), one line per shape and kernel."""
    header = ["shape", "row", "TFLOP/s", "x cuDNN FP8", "error %", "back to back: TFLOP/s, MHz, W, TFLOP/J"]
    rows = [[_shape(r["shape"]), f"`{r['row']}`", _f(r["tflops"]), f"{_f(r.get('x_cudnn_fp8'), 2)}x", _error(r),
             _b2b(r)] for s in sources for r in s.data["rows"]]
    return header, rows


def sweep(sources: list[Source]) -> tuple[list[str], Rows]:
    """`fsbench kernels bench --sweep` JSON (one per card): per shape, the fused kernel against cuDNN FP8 and BF16."""
    header = ["card", "keys", "heads", "fused mxfp8 TFLOP/s", "cuDNN FP8 TFLOP/s", "fused / cuDNN FP8",
              "cuDNN BF16 TFLOP/s", "TFLOP/J fused / cuDNN FP8"]
    rows = []
    for s in sources:
        data = s.data
        by = {(r["row"], tuple(r["shape"])): r for r in data["rows"]}
        for seq in data["sweep"]["seq_lens"]:
            for heads in data["sweep"]["heads"]:
                shape = next(k[1] for k in by if k[1][1] == heads and k[1][2] == seq)
                fused, fp8, bf16 = (by[(name, shape)] for name in ("gluon-fused-mxfp8", "cudnn-fp8",
                                                                    "sdpa-cudnn-bf16"))
                ratio = fused["tflops"] / fp8["tflops"]
                joules = [(r.get("back_to_back") or {}).get("tflop_per_j") for r in (fused, fp8)]
                rows.append([s.device, str(seq), str(heads), _f(fused["tflops"]), _f(fp8["tflops"]),
                             f"**{ratio:.2f}x**" if ratio < 1 else f"{ratio:.2f}x", _f(bf16["tflops"]),
                             " / ".join(_f(j, 3) for j in joules)])
    return header, rows


def row_kernels(sources: list[Source]) -> tuple[list[str], Rows]:
    """benchmarks/row_kernels.py JSON, one per shape: each row's attention kernel apart from the rest of its call."""
    names = list(dict.fromkeys(n for s in sources for n in s.data["rows"]))
    header = ["shape", *(f"`{n}`" for n in names)]
    rows = []
    for s in sources:
        cells = []
        for n in names:
            r = s.data["rows"].get(n)
            clock = (r or {}).get("clock") or {}
            cells.append("-" if r is None else f"{r['attention_ms']:.2f} ms, {r['attention_tflops']:.1f} TFLOP/s at "
                         f"{clock.get('clock_mhz', 0):.0f} MHz; rest {r['other_kernels_ms']:.2f} ms")
        rows.append([_shape(s.data["shape"]), *cells])
    return header, rows


def ab(sources: list[Source]) -> tuple[list[str], Rows]:
    """benchmarks/lab A/B JSON: a kernel variant against the committed kernel timed before and after it."""
    header = ["variant", "shape", "kernel", "committed TFLOP/s (before, after)", "variant TFLOP/s",
              "variant / mean committed", "bit-identical"]
    rows = []
    for s in sources:
        for shape, configs in s.data["shapes"].items():
            for config, runs in configs.items():
                (variant,) = [k for k in runs if not k.startswith("committed")]
                before, after = runs["committed"]["tflops"], runs["committed-again"]["tflops"]
                change = runs[variant]["tflops"] / ((before + after) / 2) - 1
                rows.append([variant, f"({shape})", config, f"{before:.1f}, {after:.1f}",
                             f"{runs[variant]['tflops']:.1f}", f"{change:+.1%}",
                             "yes" if all(r["bit_identical"] for r in runs.values()) else "no"])
    return header, rows


def check(sources: list[Source]) -> tuple[list[str], Rows]:
    """`fsbench kernels check --json` (one per kernel): each case against float32 SDPA, kernel and emulator."""
    header = ["kernel", "case", "(b,h,s,d)", "format", "softmax", "kernel error %", "emulator error %",
              "kernel vs emulator", "rollbacks kernel / emulator"]
    rows = []
    for r in (r for s in sources for r in s.data["rows"]):
        finite = r.get("finite", True)
        rows.append([r["impl"], r["case"], _shape(r["shape"]), r["fmt"], r["softmax"],
                     _f(r["rel_err_kernel_pct"], 3) if finite else "NaN",
                     _f(r["rel_err_emulator_pct"], 3) if finite else "NaN",
                     f"{r['rel_diff_vs_emulator']:.2e}" if finite else "-",
                     f"{r['rollbacks']} / {r['rollbacks_emulator']}"])
    return header, rows


def queries(sources: list[Source]) -> tuple[list[str], Rows]:
    """Run folders of real SingleStream queries: latency, energy, the denoising step's split and the clocks; the
    speedup and energy are over the first run where it is bf16."""
    header = ["query", "query s", "speedup", "J per video", "step s", "self-attention s / step", "rest s / step",
              "ms per attention call", "MHz / W during attention", "MHz / W rest of loop", "peak GPU GiB"]
    def latency_s(run: dict) -> float:
        return run["manifest"]["results"]["SingleStream"]["performance"]["latency_p90_ns"] / 1e9

    base = sources[0].data if sources[0].data["manifest"]["schedule"].get("name") == "bf16" else None
    rows = []
    for s in sources:
        p, m = s.data["profile"], s.data["manifest"]
        latency, joules = latency_s(s.data), p["energy"]["joules_per_video"]
        speed, energy = "-", ""
        if base:
            speed = f"{latency_s(base) / latency:.2f}x"
            energy = f" ({joules / base['profile']['energy']['joules_per_video']:.2f}x)"
        steps = p["step_by_format"].values()
        clock = p["clock"]
        impl = ((m["results"]["SingleStream"]["performance"].get("speed") or {}).get("bf16_impl") or "auto")
        label = m["schedule"]["name"] + ("" if impl == "auto" else f", bf16 through {impl}")
        rows.append([f"[{label}]({s.path})", f"{latency:.2f}", speed, f"{joules:.0f}{energy}",
                     " / ".join(_f(f["total_s"], 2) for f in steps),
                     " / ".join(_f(f["self_attention_s"], 2) for f in steps),
                     " / ".join(_f(f["rest_s"], 3) for f in steps),
                     " / ".join(_f(f["self_attention_call_ms"], 1) for f in steps),
                     f"{clock['self_attention']['clock_mhz']:.0f} / {clock['self_attention']['power_w']:.0f}",
                     f"{clock['rest_of_loop']['clock_mhz']:.0f} / {clock['rest_of_loop']['power_w']:.0f}",
                     f"{p['peak_gpu_memory_bytes'] / 2**30:.1f}"])
    return header, rows


def step_pairs(sources: list[Source]) -> tuple[list[str], Rows]:
    """benchmarks/step_pairs.py JSON: the denoising step of bf16 and mxfp8 in each GEMM configuration, and the
    ratio of the pair's step times."""
    header = ["card", "GEMMs", "schedule", "step s", "self-attention s", "rest s", "ms per attention call",
              "MHz / W during attention", "MHz / W rest of loop", "J per step", "bf16 step / this step"]
    rows = []
    for s in sources:
        base = {r["gemm"]: r["step_s"] for r in s.data["rows"] if r["schedule"] == "bf16"}
        for r in s.data["rows"]:
            ratio = base.get(r["gemm"])
            rows.append([s.device, r["gemm"].upper(), r["schedule"], _f(r["step_s"], 2), _f(r["self_attention_s"], 2),
                         _f(r["rest_s"], 2), _f(r["self_attention_call_ms"], 1),
                         f"{_f(r['attention_mhz'], 0)} / {_f(r['attention_w'], 0)}",
                         f"{_f(r['rest_mhz'], 0)} / {_f(r['rest_w'], 0)}", _f(r["joules_per_step"], 0),
                         "-" if ratio is None else f"**{ratio / r['step_s']:.2f}x**" if r["schedule"] != "bf16"
                         else "1.00x"])
    return header, rows


def tune(sources: list[Source]) -> tuple[list[str], Rows]:
    """benchmarks/tune.sh JSON (`fsbench tune`'s tune.json with its wall time): each validated candidate, its
    predicted attention time and measured fidelity, and the chosen one."""
    header = ["candidate", "kind", "low-precision cells", "predicted attention ms/query", "measured",
              "meets budgets"]
    rows = []
    for s in sources:
        tuned = s.data["tune"]
        chosen = (tuned.get("chosen") or {}).get("name")
        metrics = list(dict.fromkeys(re.split(r"[<>]=", b)[0] for b in tuned["budgets"]))
        for r in sorted(tuned["candidates"], key=lambda r: r["predicted_attention_ms"]):
            values = [(m, r["measured"].get(m)) for m in metrics]
            measured = ", ".join(f"{m} {v:.4g}" if isinstance(v, float) else f"{m} {v}" for m, v in values
                                 if v is not None)
            rows.append([f"**{r['name']}** (chosen)" if r["name"] == chosen else r["name"], r["kind"],
                         str(r["low_precision_cells"]), f"{r['predicted_attention_ms']:.4g}", measured or "-",
                         "yes" if r["meets_budgets"] else "no"])
        rows.append([f"whole tune: {s.data['wall_s'] / 60:.1f} min wall", "-", "-", "-", "-", "-"])
    return header, rows


def table4(sources: list[Source]) -> tuple[list[str], Rows]:
    """Paper Table 4 (`fsbench kernels ablation`): error % [paper's] and cosine per component and format."""
    (data,) = [s.data for s in sources]
    header = ["components", *(f.upper() for f in data["formats"])]
    rows = []
    for r in data["rows"]:
        cells = []
        for f in data["formats"]:
            c = r[f]
            paper = "" if c["paper_err_pct"] is None else f" [{c['paper_err_pct']}]"
            cells.append("reference" if c["err_pct"] == 0 else f"{c['err_pct']:.3f}{paper} {c['cos']:.5f}")
        rows.append([r["components"], *cells])
    return header, rows


def table8(sources: list[Source]) -> tuple[list[str], Rows]:
    """Paper Table 8 (`fsbench kernels proxy-table --json`): each proxy's error over one doubling [paper's]."""
    (data,) = [s.data for s in sources]
    header = ["proxy", "M", "E", "reach", "min %", "max %", "RMS %", "added by the pattern %"]
    rows = []
    for r in data["rows"]:
        paper = r.get("paper") or {}
        cells = [("-" if r[k] is None else f"{r[k]:.3f}") + (f" [{paper[k]:.3f}]" if k in paper else "")
                 for k in ("min_pct", "max_pct", "rms_pct", "added_pct")]
        rows.append([r["proxy"], *("-" if r[k] is None else str(r[k]) for k in ("M", "E")),
                     "-" if r["reach_log2"] is None else f"2^{r['reach_log2']}", *cells])
    return header, rows


# ---- the tables on the page, in the template's order --------------------------------------------------------------

QUERIES_OPTIMIZED = ("h200/e2e/queries_97f8d2f/bf16", "h200/e2e/queries_97f8d2f/mxfp8",
                     "h200/e2e/queries_75fd5c3/mxfp6", "h200/e2e/queries_75fd5c3/mxfp4",
                     "h200/e2e/queries_75fd5c3/hybrid")
TABLES = (
    Table("peers", bench_by_kernel, ("h200/kernels/bench_peers_f338843.json",)),
    Table("sweep", sweep, ("h200/kernels/sweep_f338843.json",),
          plot="TFLOP/s and TFLOP/J against sequence length"),
    Table("row-kernels", row_kernels, ("h200/kernels/row_kernels_08f9136_75600.json",
                                       "h200/kernels/row_kernels_08f9136_32768.json")),
    Table("h100-bench", bench_by_shape, ("h100/kernels/bench_25611d1.json",)),
    Table("headline", headline, ("h200/kernels/bench_peers_f338843.json", "h100/kernels/bench_25611d1.json")),
    Table("calibration", calibration, ("h200/kernels/calibrate_9ba88b2.json",)),
    Table("ab", ab, ("h100/kernels/ab_rowsum_cabfdf5.json", "h100/kernels/ab_persistent_a2aebba.json",
                     "h200/kernels/ab_q_registers_f7255aa.json", "h100/kernels/ab_frozen_codes_358cf33.json")),
    Table("energy", bench_by_shape, ("h100/kernels/energy_rows_358cf33.json",
                                     "h100/kernels/energy_rows_sweep_4187a65.json")),
    Table("check", check, ("h100/kernels/check_gluon_358cf33.json",)),
    Table("queries-optimized", queries, QUERIES_OPTIMIZED),
    Table("queries-bf16-gemm", queries, ("h200/e2e/queries_dd6e460/mxfp8",)),
    Table("offload", queries, ("h100/offload_275c0eb/bf16-gemm-mxfp8",)),
    Table("step-pairs", step_pairs, ("h200/e2e/step_9ba88b2/step_pairs.json",)),
    Table("kernels-lengths", bench_by_shape, ("h200/kernels/bench_9ba88b2.json",
                                              "h200/kernels/bench_lengths_9ba88b2.json")),
    Table("tune", tune, ()),
    Table("table4", table4, ("h200/ablation/table4.json",)),
    Table("table8", table8, ("cpu/table8.json",)),
)


def _markdown(header: list[str], rows: Rows) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *("| " + " | ".join(r) + " |" for r in rows)]


def published() -> dict[str, list[str]]:
    """results/figures.json: each table's published sources, by `--from` or by hand (else TABLES')."""
    path = RESULTS / FIGURES
    return json.loads(path.read_text()) if path.exists() else {}


def render_table(table: Table) -> list[str]:
    sources = [load(path) for path in published().get(table.name, table.sources)]
    if not sources:
        return ["Not measured yet: `benchmarks/front_page.sh` runs it."]
    header, rows = table.kind(sources, **table.options)
    figures = [(s.device, Path(s.path).with_suffix(".png").as_posix()) for s in sources] if table.plot else []
    plot = [line for device, figure in figures if (RESULTS / figure).is_file()
            for line in (f"![{table.plot}, {device}]({figure})", "")]
    return [*plot, *_markdown(header, rows), "", *provenance(sources)]


def render(template: str, tables: tuple[Table, ...] | None = None) -> str:
    """The page: the template with each `{{ name }}` line replaced by its table and provenance."""
    by_name = {t.name: t for t in (TABLES if tables is None else tables)}
    used, out = set(), []
    for number, line in enumerate(template.splitlines(), 1):
        match = PLACEHOLDER.match(line)
        if not match:
            out.append(line)
            continue
        name = match.group(1)
        if name not in by_name:
            raise RenderError(f"template line {number}: no table named {name!r} (known: {', '.join(by_name)})")
        used.add(name)
        out += render_table(by_name[name])
    unused = [n for n in by_name if n not in used]
    if unused:
        raise RenderError(f"tables not placed in the template: {', '.join(unused)}")
    return "\n".join(out) + "\n"


def card(device: str) -> str:
    """The results/ folder of a card: 'NVIDIA H200' -> 'h200', 'NVIDIA H100 80GB HBM3' -> 'h100'."""
    match = re.search(r"\b([A-Z]\d{2,3})\b", device)
    return match.group(1).lower() if match else re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")


def _device_of(path: Path) -> str:
    """The device a step's output names: a JSON's `device`, a run folder's manifest."""
    try:
        if path.is_dir():
            return json.loads((path / "manifest.json").read_text())["device"]["name"]
        return json.loads(path.read_text())["device"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise RenderError(f"{path} does not name its device ({e})") from None


def publish(out: Path) -> list[str]:
    """Copy what DIR holds for its commit under results/<card>/ and make each table's sources the newest of each
    card (results/figures.json); returns the paths written, relative to results/."""
    try:
        state = read_state(out)
    except StateError as e:
        raise RenderError(str(e)) from None
    steps = done_steps(out, state, state.get("commit", ""))
    if not steps:
        raise RenderError(f"{out} holds no finished step of benchmarks/front_page.sh")
    sha = short_commit(state["commit"]).split("+")[0]
    figures = published()
    fresh: dict[str, list[str]] = {}
    written = []
    for step in steps:
        primary = next(out / step.name / o.path for o in step.outputs if o.tables)
        folder = card(_device_of(primary))
        for o in step.outputs:
            source, dest = out / step.name / o.path, f"{folder}/{o.dest.format(commit=sha)}"
            target = RESULTS / dest
            target.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.rmtree(target, ignore_errors=True)
                shutil.copytree(source, target, ignore=shutil.ignore_patterns("*.mp4", "videos"))
            else:
                shutil.copyfile(source, target)
            written.append(dest)
            for name in o.tables:
                fresh.setdefault(name, [])
                if dest not in fresh[name]:
                    fresh[name].append(dest)
    defaults = {t.name: list(t.sources) for t in TABLES}
    for name, paths in fresh.items():
        cards = {p.split("/")[0] for p in paths}
        kept = [p for p in figures.get(name, defaults.get(name, [])) if p.split("/")[0] not in cards]
        figures[name] = paths + kept
    (RESULTS / FIGURES).write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Render results/README.md from its template and the raw JSON.")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--check", action="store_true", help="exit 1 where results/README.md differs from the render")
    action.add_argument("--from", dest="source", type=Path, metavar="DIR",
                        help="first publish what benchmarks/front_page.sh --out DIR measured")
    args = parser.parse_args(argv)
    try:
        if args.source:
            for path in publish(args.source):
                print(f"published results/{path}")
        page = render(TEMPLATE.read_text())
    except RenderError as e:
        print(f"fsbench: {e}", file=sys.stderr)
        return 2
    if args.check:
        committed = PAGE.read_text() if PAGE.exists() else ""
        if committed != page:
            sys.stdout.writelines(difflib.unified_diff(committed.splitlines(True), page.splitlines(True),
                                                       "results/README.md", "render"))
            print("results/README.md differs from the render: run python benchmarks/render.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
