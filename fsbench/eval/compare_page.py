"""`fsbench compare --html OUT`: one folder with index.html that opens from disk (no server, no network).

The page holds the comparison table (the cells and footnotes of `report`, so the page and compare.md never
disagree), a Pareto plot and the per-prompt spread of PSNR and LPIPS (matplotlib SVGs), a grid of every prompt
through every schedule that plays in sync with a per-frame difference view against the reference, and the runs'
provenance. Page copies of the videos are H.264 yuv420p with even sides (what browsers decode): the runs' own bytes
where they are that already, else a re-encode (the runs' files may be lossless RGB H.264, which browsers do not
play). The difference videos are always computed here, as |frame - reference frame| x DIFF_GAIN, because a canvas
cannot be read back from videos opened from file://; the page's script decodes only the videos on screen.
"""
from __future__ import annotations

import csv
import html
import json
import math
import textwrap
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from fsbench import files
from fsbench.eval import figures, report, store
from fsbench.eval.page_videos import DIFF_GAIN, page_videos
from fsbench.eval.runs import Run
from fsbench.folders import claim, record, recorded

# (key, label, True where higher is better) for the per-prompt metrics the grid sorts by
PROMPT_METRICS = (("lpips", "LPIPS", False), ("psnr", "PSNR (dB)", True), ("ssim", "SSIM", True))
PAGE_FILES = ("index.html", "pareto.svg", "prompt_spread.svg")  # beside videos/: all a page folder holds


def write_page(run_paths: list[Path], out: Path, link: bool = False, progress: bool = True) -> Path:
    """Write OUT/index.html, its plots and its videos (copies, or links to the runs' own with `link`); `progress`
    shows a bar over the videos, on a terminal only."""
    runs = [Run.open(p) for p in run_paths]
    rows = report.build_rows(runs)
    claim(out, "page")
    record(out, recorded(out) | set(PAGE_FILES))
    reference = next((r for r in rows if r.reference), None) or next((r for r in rows if r.run.schedule == "bf16"),
                                                                        None)
    prompts = list(dict.fromkeys(p for run in runs for p in run.prompts()))
    per_prompt = {row.label: _prompt_metrics(row) for row in rows}
    sources = {prompt: [row.run.video(prompt) for row in rows] for prompt in prompts}
    grid = page_videos(sources, rows.index(reference) if reference else None, out, _fps(runs), link, progress)
    data = {
        "fps": _fps(runs),
        "frame": _frame(runs),
        "gain": DIFF_GAIN,
        "reference": reference.label if reference else None,
        "columns": [{"label": r.label, "reference": r is reference} for r in rows],
        "metrics": [{"key": k, "label": label, "higher_better": hb} for k, label, hb in PROMPT_METRICS
                    if any(v.get(k) is not None for m in per_prompt.values() for v in m.values())],
        "prompts": [{"text": p, "index": i, "cells": grid[p],
                     "metrics": {r.label: per_prompt[r.label].get(p, {}) for r in rows if r is not reference}}
                    for i, p in enumerate(prompts)],
    }
    plot_pareto(rows, out / "pareto.svg")
    plot_prompt_spread(rows, per_prompt, out / "prompt_spread.svg")
    page = _template("index.html")
    for marker, text in {
        "STYLE": _template("page.css"),
        "SCRIPT": _template("page.js"),
        "DATA": json.dumps(store.encode(data), ensure_ascii=False).replace("</", "<\\/"),
        "TABLE": table_html(rows),
        "PROVENANCE": provenance_html(rows, out),
        "REFERENCE": html.escape(reference.label if reference else "BF16"),
        "GAIN": str(DIFF_GAIN),
    }.items():
        page = page.replace(f"<!--{marker}-->", text)
    path = out / "index.html"
    store.write_text(path, page)
    return path


def _template(name: str) -> str:
    return (resources.files("fsbench.eval") / "page" / name).read_text(encoding="utf-8")


def _fps(runs: list[Run]) -> int:
    rates = [fps for r in runs if isinstance(fps := r.settings.get("fps"), (int, float))]
    return int(rates[0]) if rates else 16


def _frame(runs: list[Run]) -> list[int] | None:
    """Width and height of the runs' frames, so the page sizes each video's box before its video loads."""
    for run in runs:
        width, height = run.settings.get("width"), run.settings.get("height")
        if isinstance(width, int) and isinstance(height, int) and width > 0 and height > 0:
            return [width, height]
    return None


def table_html(rows: list[report.Row]) -> str:
    """report's table as HTML: a missing value reads n/a with its numbered note, never an empty cell. A column no
    run has a value in is left out and named in a note instead, so the measured columns stay on screen."""
    side_by_side = {"latency_s", "speedup", "joules"} if any(row.configuration for row in rows) else set()
    columns = [c for c in report.COLUMNS
               if c[0] in side_by_side or any(_measured(row.values.get(c[0])) for row in rows)]
    numbers, marks = report._footnotes(rows, columns)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in ["Schedule"] + [h for _, h, _ in columns])
    body = []
    for i, row in enumerate(rows):
        cells = [f"<th scope='row'>{html.escape(row.label)}</th>"]
        for key, _, fmt in columns:
            text = report.cell(row, key, fmt)
            mark = marks.get((i, key))
            note = f"<sup><a href='#note-{mark}'>[{mark}]</a></sup>" if mark else ""
            gap = " class='gap'" if not text else " class='invalid'" if key in row.invalid else ""
            cells.append(f"<td{gap}>{html.escape(text) or 'n/a'}{note}</td>")
        body.append(f"<tr{' class=reference' if row.reference else ''}>{''.join(cells)}</tr>")
    notes = "".join(f"<li id='note-{n}' value='{n}'>{html.escape(note)}</li>" for note, n in numbers.items())
    return (f"<p class='caption'>{html.escape(report.caption(rows))}</p><div class='scroll'><table id='results'>"
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
            f"<ol class='notes'>{notes}</ol>{_left_out_html(rows, columns)}{_configuration_html(rows, marks)}")


def _measured(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _left_out_html(rows: list[report.Row], shown: list) -> str:
    """The columns no run has a value in, grouped by why (the rows' notes for them)."""
    groups: dict[str, list[str]] = {}
    for key, header, _ in (c for c in report.COLUMNS if c not in shown):
        why = "; ".join(dict.fromkeys(row.notes[key] for row in rows if row.notes.get(key))) or "no value recorded"
        groups.setdefault(why, []).append(header.rstrip(" ↑↓"))
    items = "".join(f"<li>{html.escape(', '.join(headers))}: {html.escape(why)}</li>"
                    for why, headers in groups.items())
    return (f"<div id='left-out'><p class='caption'>Not in the table, no run has a value:</p><ul>{items}</ul></div>"
            if items else "")


def _configuration_html(rows: list[report.Row], marks: dict[tuple[int, str], int]) -> str:
    """report's side-by-side table of the configurations, where the runs have more than one."""
    if not any(row.configuration for row in rows):
        return ""
    header, body = report.configuration_table(rows, marks)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    lines = "".join("<tr><th scope='row'>" + html.escape(cells[0]) + "</th>"
                    + "".join(f"<td>{html.escape(c)}</td>" for c in cells[1:]) + "</tr>" for cells in body)
    return (f"<p class='caption'>{html.escape(report.CONFIGURATION_CAPTION)}</p><div class='scroll'>"
            f"<table id='configurations'><thead><tr>{head}</tr></thead><tbody>{lines}</tbody></table></div>")


def provenance_html(rows: list[report.Row], out: Path) -> str:
    """Where each column came from: run folder, commit, device, preset, schedule and the commands run into it."""
    items = []
    for row in rows:
        m: dict[str, Any] = dict(row.run.manifest)  # read as found on disk: any key may be missing or odd
        schedule = m["schedule"] if isinstance(m.get("schedule"), dict) else {}
        settings = row.run.settings
        size = "x".join(str(settings.get(k, "?")) for k in ("height", "width"))
        facts = [
            ("run", report.relative_to(row.run.path, out)),
            ("commit", m.get("git_commit") or "not recorded"),
            ("device", (m.get("device") or {}).get("name") or "not recorded"),
            ("model", m.get("model")),
            ("preset", row.run.preset),
            ("settings", f"{size}, {settings.get('num_frames', '?')} frames at {settings.get('fps', '?')} fps, "
                         f"{settings.get('steps', '?')} steps"),
            ("schedule", f"{schedule.get('name', row.run.schedule)}: {schedule.get('spec', '')}"),
            ("formats by step", " ".join(schedule.get("by_step") or []) or None),
            ("written", " to ".join(str(m[k]) for k in ("created", "date") if m.get(k)) or None),
        ]
        for scenario, modes in (m.get("results") or {}).items():
            for mode, summary in (modes or {}).items():
                if isinstance(summary, dict) and summary.get("command"):
                    facts.append((f"{scenario} {mode}", summary["command"]))
        lines = "".join(f"<dt>{html.escape(k)}</dt><dd><code>{html.escape(str(v))}</code></dd>"
                        for k, v in facts if v)
        items.append(f"<section class='run'><h3>{html.escape(row.label)}</h3><dl>{lines}</dl></section>")
    return "".join(items)


def _prompt_metrics(row: report.Row) -> dict[str, dict]:
    """Per-prompt PSNR/SSIM/LPIPS of a run against the reference, from RUN/eval/fidelity.csv (empty if absent)."""
    path = row.run.eval_dir / "fidelity.csv"
    if row.reference or not path.is_file():
        return {}
    with path.open(newline="") as f:
        return {r["prompt"]: {k: store.number(r.get(k)) for k, _, _ in PROMPT_METRICS}
                for r in csv.DictReader(f) if r.get("status") == "ok"}


def plot_pareto(rows: list[report.Row], path: Path) -> Path:
    """Speedup against each quality metric that has values, with the reference as the line at 1.0 and the
    Pareto front (no other schedule both faster and closer) drawn through the points."""
    quality = figures.speedup_panels(rows)
    fig = Figure(figsize=(4.2 * max(len(quality), 1), 3.6), layout="constrained")
    axes = fig.subplots(1, max(len(quality), 1), squeeze=False)[0]
    if not quality:
        axes[0].set_axis_off()
        axes[0].text(0.5, 0.5, "nothing to plot: no run has PSNR, SSIM, LPIPS or VBench\n(see the table's notes)",
                     ha="center", va="center", fontsize=10)
    for ax, (key, xlabel, higher_better) in zip(axes, quality):
        points = [(r.values[key], r.values["speedup"], r.label) for r in rows if not r.reference
                  and "speedup" not in r.invalid and _finite(r.values.get(key)) and _finite(r.values.get("speedup"))]
        unsure = [(r.values[key], r.values["speedup"], r.label) for r in rows if not r.reference
                  and "speedup" in r.invalid and _finite(r.values.get(key)) and _finite(r.values.get("speedup"))]
        for x, y, label in unsure:  # hollow and grey: LoadGen did not mark both runs VALID
            ax.scatter(x, y, s=40, facecolors="none", edgecolors="grey", zorder=3)
            ax.annotate(f"{label} (not VALID)", (x, y), xytext=(5, 4), textcoords="offset points", fontsize=8,
                        color="grey")
        ax.axhline(1.0, color="tab:red", ls="--", lw=1)
        ax.annotate("reference = 1.0", (0.01, 1.0), xycoords=("axes fraction", "data"), color="tab:red",
                    fontsize=8, xytext=(0, 3), textcoords="offset points")
        for x, y, label in points:
            ax.scatter(x, y, s=40, color="tab:blue", zorder=3)
            ax.annotate(label, (x, y), xytext=(5, 4), textcoords="offset points", fontsize=9)
        front = _pareto_front(points, higher_better)
        if len(front) > 1:
            ax.plot([p[0] for p in front], [p[1] for p in front], color="tab:blue", alpha=0.4, drawstyle="steps-post")
        if not points and not unsure:
            ax.text(0.5, 0.5, "no run has both this metric\nand a speedup", ha="center", va="center",
                    transform=ax.transAxes, fontsize=9, color="dimgray")
        ax.margins(0.25)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("speedup over the reference")
        ax.grid(alpha=0.3)
    title = "Speed against quality (Pareto front: no other schedule is both faster and better)"
    fig.suptitle(textwrap.fill(title, int(12 * 4.2 * max(len(quality), 1))), fontsize=10)  # ~12 characters an inch
    return _save_svg(fig, path)


def _pareto_front(points: list[tuple[float, float, str]], higher_better: bool) -> list[tuple[float, float, str]]:
    """Points no other point beats on both quality and speedup, ordered by quality."""
    better = (lambda a, b: a >= b) if higher_better else (lambda a, b: a <= b)
    front = [p for p in points if not any(q is not p and better(q[0], p[0]) and q[1] >= p[1]
                                          and (q[0], q[1]) != (p[0], p[1]) for q in points)]
    return sorted(front, key=lambda p: p[0])


def plot_prompt_spread(rows: list[report.Row], per_prompt: dict[str, dict], path: Path) -> Path:
    """Every prompt's PSNR and LPIPS per schedule (dots over a box), so one bad prompt shows behind a good mean."""
    compared = [r for r in rows if not r.reference]
    fig = Figure(figsize=(9, 3.6), layout="constrained")
    for ax, (key, label, higher_better) in zip(fig.subplots(1, 2), (PROMPT_METRICS[1], PROMPT_METRICS[0])):
        series = [[v[key] for v in per_prompt[r.label].values() if _finite(v.get(key))] for r in compared]
        infinite = sum(1 for r in compared for v in per_prompt[r.label].values()
                       if isinstance(v.get(key), float) and math.isinf(v[key]))
        if not any(series):
            ax.set_axis_off()
            ax.text(0.5, 0.5, f"{label}: not computed for any run\n(see the table's notes)", ha="center",
                    va="center", fontsize=10, transform=ax.transAxes)
            continue
        positions = range(1, len(compared) + 1)
        ax.boxplot([s or [np.nan] for s in series], positions=list(positions), widths=0.5, showfliers=False)
        jitter = np.random.default_rng(0)
        for x, values in zip(positions, series):
            ax.scatter(x + jitter.uniform(-0.12, 0.12, len(values)), values, s=12, alpha=0.7, color="tab:blue")
        ax.set_xticks(list(positions), [r.label for r in compared], fontsize=9)
        ax.set_ylabel(label + (" ↑" if higher_better else " ↓"))
        ax.set_title(f"{label} per prompt" + (f" ({infinite} identical: inf, not drawn)" if infinite else ""),
                     fontsize=10)
        ax.grid(alpha=0.3, axis="y")
    return _save_svg(fig, path)


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _save_svg(fig: Figure, path: Path) -> Path:
    return files.atomic_write(path, lambda tmp: fig.savefig(tmp, format="svg"))
