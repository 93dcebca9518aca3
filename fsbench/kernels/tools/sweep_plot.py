"""The sweep's figure: TFLOP/s against sequence length, one line per row and head count, and TFLOP/J beside it
where the sweep held each row (`--clock-seconds`); the command, commit and device that produced it underneath."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

HEAD_STYLES = {24: "--", 40: "-"}


def sweep_lines(doc: dict[str, Any]) -> dict[tuple[str, int], list[tuple[int, float, float | None]]]:
    """(row, heads) -> [(keys, TFLOP/s, TFLOP/J or None)] sorted by keys, from a `bench --sweep --json` document.
    Raises ValueError for a document without bench rows."""
    rows = doc.get("rows") if isinstance(doc, dict) else None
    if not rows or not all(isinstance(r, dict) and {"row", "shape", "tflops"} <= r.keys() for r in rows):
        raise ValueError("the JSON holds no bench rows: give the file `fsbench kernels bench --sweep --json` wrote")
    lines: dict[tuple[str, int], list[tuple[int, float, float | None]]] = {}
    for r in rows:
        _, heads, keys, _ = r["shape"]
        lines.setdefault((r["row"], heads), []).append(
            (keys, r["tflops"], (r.get("back_to_back") or {}).get("tflop_per_j")))
    return {k: sorted(v) for k, v in sorted(lines.items())}


def plot_sweep(doc: dict[str, Any], png: Path) -> int:
    """Draws the sweep of `doc` to `png` (written whole or not at all); returns the number of lines drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = sweep_lines(doc)
    energy = any(j is not None for points in lines.values() for _, _, j in points)
    fig, axes = plt.subplots(1, 2 if energy else 1, figsize=(13 if energy else 7.5, 5), squeeze=False)
    colors = {row: f"C{i}" for i, row in enumerate(sorted({row for row, _ in lines}))}
    keys = sorted({k for points in lines.values() for k, _, _ in points})
    for ax, index, label in zip(axes[0], (1, 2), ("TFLOP/s", "TFLOP/J (back to back)")):
        for (row, heads), points in lines.items():
            xy = [(p[0], p[index]) for p in points if p[index] is not None]
            if xy:
                ax.plot(*zip(*xy), HEAD_STYLES.get(heads, ":"), marker="o", color=colors[row],
                        label=f"{row}, {heads} heads")
        ax.set_xscale("log", base=2)
        # a ragged length sits close to an aligned one on the log axis (75600 beside 64k): its label goes below
        ax.set_xticks(keys, [f"{k // 1024}k" if k % 1024 == 0 else f"\n{k}" for k in keys])
        ax.set_xlabel("sequence length (keys = queries), b=1, d=128")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"attention throughput against sequence length on {doc.get('device') or 'an unnamed GPU'}")
    fig.text(0.01, 0.01, f"{doc.get('command', '')}  (commit {str(doc.get('git_commit'))[:12]}, {doc.get('date', '')})",
             fontsize=7)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    png.parent.mkdir(parents=True, exist_ok=True)
    partial = png.with_name(png.name + ".partial.png")
    fig.savefig(partial, dpi=120)
    plt.close(fig)
    os.replace(partial, png)
    return len(lines)
