"""The tune's report: DIR/report.md (the measured front as a table, the budgets and the verdict) and
DIR/front.png (each candidate's measured fidelity against its predicted attention time per query)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from fsbench.files import atomic_write, atomic_write_text
from fsbench.harness.tune.budget import Budget


def write(out: Path, manifest: dict[str, Any], budgets: tuple[Budget, ...]) -> dict[str, str]:
    """Write the table, the plot and the compare page (the candidates' videos side by side, linked, not copied);
    returns their names relative to `out`."""
    from fsbench.eval import compare_page

    atomic_write_text(out / "report.md", markdown(manifest, budgets))
    plot(out / "front.png", manifest, budgets)
    runs = sorted(manifest["candidates"], key=lambda r: -r["predicted_attention_ms"])  # BF16 first
    page = compare_page.write_page([out / r["run"] for r in runs], out / "compare", link=True)
    return {"markdown": "report.md", "plot": "front.png", "page": str(page.relative_to(out))}


def markdown(manifest: dict[str, Any], budgets: tuple[Budget, ...]) -> str:
    metrics = list(dict.fromkeys(b.metric for b in budgets))
    chosen = (manifest.get("chosen") or {}).get("name")
    costs = manifest["costs"]
    whole = manifest.get("rest_of_query") is not None  # predictions of whole queries, not only self-attention
    lines = [
        "# fsbench tune",
        "",
        f"Model {manifest['model']}, {manifest['settings']['steps']} steps, granularity {manifest['granularity']}, "
        f"formats {', '.join(manifest['formats'])}; budgets {', '.join(manifest['budgets'])}.",
        f"Calibration prompts: {len(manifest['prompts']['calibration'])}; validation prompts: "
        f"{len(manifest['prompts']['validation'])} (held out). Costs per call at shape "
        f"{tuple(costs['shape'])}: " + ", ".join(f"{f} {ms:.4g} ms" for f, ms in costs["ms_per_call"].items())
        + f" ({_source(costs['source'])}).",
        f"Front: {manifest['front_size']} schedules from the Lagrangian sweep, "
        f"{sum(r['kind'] == 'front' for r in manifest['candidates'])} validated.",
        "",
        _rest(manifest.get("rest_of_query")),
        "",
        "| candidate | kind | low-precision cells | predicted attention ms/query | "
        + ("predicted query s | " if whole else "") + "predicted rel. L2 | "
        + " | ".join(f"measured {m}" for m in metrics) + " | meets budgets |",
        "|---|---|---:|---:|" + "---:|" * (whole + 1 + len(metrics)) + "---|",
    ]
    for row in sorted(manifest["candidates"], key=lambda r: r["predicted_attention_ms"]):
        name = f"**{row['name']}** (chosen)" if row["name"] == chosen else row["name"]
        query = [f"{row['predicted_query_ms'] / 1e3:.4g}"] if whole else []
        cells = [name, row["kind"], str(row["low_precision_cells"]), f"{row['predicted_attention_ms']:.4g}",
                 *query, f"{row['predicted_rel_l2']:.3g}",
                 *(_number(row["measured"].get(m)) for m in metrics),
                 "yes" if row["meets_budgets"] else "no"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", manifest["verdict"], "",
              "Predictions come from the calibration prompts on this model's weights: on a random-weight model "
              "(tiny, a14b-synthetic) they say nothing of the real checkpoint's sensitivity.", ""]
    return "\n".join(lines)


def plot(path: Path, manifest: dict[str, Any], budgets: tuple[Budget, ...]) -> None:
    """One panel per budget: measured metric against predicted attention time, the bound dashed, the chosen ringed
    (an identical video's infinite PSNR is not drawn)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    chosen = (manifest.get("chosen") or {}).get("name")
    fig, axes = plt.subplots(1, len(budgets), figsize=(6.4 * len(budgets), 4.2), squeeze=False)
    for ax, budget in zip(axes[0], budgets):
        metric = budget.metric
        for kind, marker in (("front", "o"), ("single", "s")):
            rows = [r for r in manifest["candidates"] if r["kind"] == kind and _finite(r["measured"].get(metric))]
            ax.scatter([r["predicted_attention_ms"] for r in rows], [r["measured"][metric] for r in rows],
                       marker=marker, label="front" if kind == "front" else "single format")
            for r in rows:
                ax.annotate(r["name"], (r["predicted_attention_ms"], r["measured"][metric]), fontsize=7,
                            xytext=(3, 3), textcoords="offset points")
        best = next((r for r in manifest["candidates"] if r["name"] == chosen), None)
        if best is not None and _finite(best["measured"].get(metric)):
            ax.scatter([best["predicted_attention_ms"]], [best["measured"][metric]], s=160, facecolors="none",
                       edgecolors="red", label="chosen")
        ax.axhline(budget.bound, color="grey", linestyle="--", label=str(budget))
        ax.set_xlabel("predicted attention time per query (ms)")
        ax.set_ylabel(f"measured {metric} vs BF16 (validation prompts)")
        ax.legend(fontsize=8)
    fig.suptitle(f"fsbench tune: {manifest['model']}, granularity {manifest['granularity']}", fontsize=10)
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
    plt.close(fig)


def _rest(rest: dict[str, Any] | None) -> str:
    if rest is None:
        return ("Predicted times cover self-attention only (pass --profile RUN/profile.json for whole queries); "
                "the rest of a query is the same for every schedule.")
    return f"The rest of a query, {rest['ms'] / 1e3:.4g} s, comes from {rest['file']} and is added to every prediction."


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _number(value: Any) -> str:
    if value is None:
        return "-"
    return "inf" if isinstance(value, float) and math.isinf(value) else f"{value:.4g}"


def _source(source: Any) -> str:
    if isinstance(source, dict) and "file" in source:
        return f"from {source['file']}" + (f", {source['device']}" if source.get("device") else "")
    if isinstance(source, dict) and "measured_here" in source:
        return f"measured here on {source['measured_here']}"
    return str(source)
