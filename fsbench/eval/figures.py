"""The figures of `fsbench compare`: speedup over BF16 against the quality metrics the runs have, and the paper's
Figure 4 frame grid (a frame of each prompt through each run), drawn with matplotlib's object API (no global
pyplot state)."""
from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from fsbench import files
from fsbench.errors import FsbenchError
from fsbench.eval.report import Row, labels
from fsbench.eval.runs import Run
from fsbench.eval.vbench_adapter import PASS_MARK
from fsbench.eval.video_io import read_frame

PAPER_PROMPTS = ("a cat grooming itself meticulously with its tongue", "a motorcycle cruising along a coastal highway")


# (metric, axis label, True where higher is closer or better): the quality axes of every speed-quality plot
QUALITY = (("psnr", "PSNR vs BF16 (dB, higher is closer)", True), ("ssim", "SSIM vs BF16 (higher is closer)", True),
           ("lpips", "LPIPS vs BF16 (lower is closer)", False), ("vbench", "VBench overall (higher is better)", True))


def speedup_panels(rows: list[Row]) -> list[tuple[str, str, bool]]:
    """QUALITY's rows of each quality metric some compared run has a finite value of, in QUALITY's order."""
    return [(k, label, higher) for k, label, higher in QUALITY
            if any(not r.reference and isinstance(v := r.values.get(k), (int, float)) and math.isfinite(v)
                   for r in rows)]


def plot_speedup(rows: list[Row], path: Path) -> Path:
    """Speedup over BF16 against each quality metric some run has, every point labelled where it lies (no
    legend); a speedup of runs LoadGen did not mark VALID is drawn hollow and grey."""
    panels = speedup_panels(rows)
    fig = Figure(figsize=(5.5 * max(len(panels), 1), 4.5), layout="constrained")
    axes = fig.subplots(1, max(len(panels), 1), squeeze=False)[0]
    if not panels:
        axes[0].set_axis_off()
        axes[0].text(0.5, 0.5, "nothing to plot: no run has PSNR, SSIM, LPIPS or VBench\n(see the table's notes)",
                     ha="center", va="center", fontsize=11)
    reference_labels = {r.label for r in rows if r.reference}
    for ax, (key, xlabel, _) in zip(axes, panels):
        points, left_out = [], []
        for row in rows:
            x = row.values.get(key)
            if row.reference and key in ("psnr", "ssim", "lpips"):
                x = None if key == "psnr" else (1.0 if key == "ssim" else 0.0)  # identical to itself
            y = row.values.get("speedup")
            if isinstance(x, (int, float)) and y is not None:
                points.append((x, y, row.label, "speedup" in row.invalid))
            elif not (row.reference and key == "psnr"):
                left_out.append(row.label)
        for x, y, label, invalid in points:
            colour = "tab:red" if label in reference_labels else "tab:blue"
            ax.scatter(x, y, s=60, zorder=3, **({"facecolors": "none", "edgecolors": "grey"} if invalid
                                                 else {"color": colour}))
            ax.annotate(label + (" (not VALID)" if invalid else ""), (x, y), xytext=(6, 6),
                        textcoords="offset points", fontsize=11, color="grey" if invalid else "black")
        if key == "vbench" and points:
            ax.axvline(PASS_MARK, color="grey", ls="--", lw=1)
            ax.annotate(f"MLPerf pass mark {PASS_MARK}", (PASS_MARK, 0.5), xycoords=("data", "axes fraction"),
                        rotation=90, fontsize=9, color="grey", xytext=(4, 0), textcoords="offset points",
                        va="center")
        measured = [p for p in points if p[2] not in reference_labels]
        if measured:
            marks = [PASS_MARK] if key == "vbench" else []
            _pad(ax, [p[0] for p in points] + marks, [p[1] for p in points] + [1.0])
        else:
            ax.text(0.5, 0.5, f"nothing to plot: no run has both\n{xlabel.split(' (')[0]} and a speedup",
                    ha="center", va="center", transform=ax.transAxes, fontsize=11)
        if left_out:
            ax.text(0.01, 0.01, textwrap.fill("not plotted (value missing): " + "; ".join(left_out), 70),
                    transform=ax.transAxes, fontsize=8, color="dimgray", va="bottom")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("speedup over BF16 (SingleStream p90 latency)")
        ax.grid(alpha=0.3)
    fig.suptitle("Speed against quality, per attention schedule")
    path.parent.mkdir(parents=True, exist_ok=True)
    _save(fig, path)
    return path


def _pad(ax, xs: list[float], ys: list[float]) -> None:
    for values, setter in ((xs, ax.set_xlim), (ys, ax.set_ylim)):
        lo, hi = min(values), max(values)
        span = (hi - lo) or max(abs(hi), 1.0) * 0.1
        setter(lo - 0.15 * span, hi + 0.3 * span)


def default_frame(runs: list[Run]) -> int:
    """Frame 40 as in the paper's Figure 4, or the middle frame of shorter videos."""
    frames = [n for r in runs if isinstance(n := r.settings.get("num_frames"), int)]
    shortest = min(frames) if frames else 81
    return 40 if shortest > 40 else shortest // 2


def default_prompts(runs: list[Run]) -> list[str]:
    """The paper's two prompts when every run has them, else the first two prompts every run has."""
    common = set(runs[0].videos_present()).intersection(*(r.videos_present() for r in runs[1:]))
    if all(p in common for p in PAPER_PROMPTS):
        return list(PAPER_PROMPTS)
    return [p for p in runs[0].prompts() if p in common][:2]


def grid_frames(runs: list[Run], prompts: list[str], frame: int) -> dict[tuple[Path, str], np.ndarray | None]:
    """Frame `frame` of each prompt's video in each run (None where there is no video); errors name the video."""
    if not prompts:
        raise FsbenchError("no prompt has a video in every run: pass --prompts with a prompt all runs generated")
    images = {}
    for run in runs:
        for prompt in prompts:
            video = run.video(prompt)
            try:
                images[(run.path, prompt)] = read_frame(video, frame) if video.is_file() else None
            except IndexError as exc:
                raise FsbenchError(f"{exc}: pass a smaller --frame") from exc
    return images


def frame_grid(runs: list[Run], prompts: list[str], frame: int, path: Path,
               images: dict[tuple[Path, str], np.ndarray | None] | None = None) -> Path:
    """Frame `frame` of each prompt (rows) through each run (columns), as in the paper's Figure 4."""
    images = grid_frames(runs, prompts, frame) if images is None else images
    shapes = [im.shape for im in images.values() if im is not None]
    aspect = shapes[0][0] / shapes[0][1] if shapes else 9 / 16
    cell_w = 3.0
    fig = Figure(figsize=(cell_w * len(runs) + 2.2, cell_w * aspect * len(prompts) + 0.9))
    axes = fig.subplots(len(prompts), len(runs), squeeze=False)
    for j, (label, run) in enumerate(zip(labels(runs), runs)):
        axes[0][j].set_title(label, fontsize=12)
        for i, prompt in enumerate(prompts):
            ax = axes[i][j]
            image = images[(run.path, prompt)]
            if image is None:
                ax.imshow(np.full((*shapes[0][:2], 3), 230, np.uint8) if shapes else np.full((9, 16, 3), 230, np.uint8))
                ax.text(0.5, 0.5, "no video", ha="center", va="center", transform=ax.transAxes, color="dimgray")
            else:
                ax.imshow(image, interpolation="lanczos")
            ax.set_xticks([])
            ax.set_yticks([])
            if j == 0:
                ax.set_ylabel(textwrap.fill(prompt, 22), rotation=0, ha="right", va="center", fontsize=9, labelpad=8)
    fig.suptitle(f"Frame {frame} of each prompt, by attention schedule", fontsize=12)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    _save(fig, path)
    return path


def _save(fig, path: Path) -> None:
    files.atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=120))
