"""Search: a Pareto front of schedules trading predicted latency against predicted error.

Method: a Lagrangian sweep. A schedule's predicted latency is the sum of its calls' costs and its predicted error
the call-weighted mean of the calibrated relative L2 error, so both are sums over groups (a step, a layer or a
(step, layer) cell), and for any weight lambda the schedule minimising latency + lambda * error is found by
choosing, group by group, the format minimising its own cost + lambda * error. Sweeping lambda over every value
where some group changes its choice yields, exactly and in a few thousand cheap evaluations, every schedule on the
lower convex hull of the latency-error plane, from the cheapest (lambda near 0) to all BF16 (lambda large). Greedy
demotion reaches similar points but depends on a demotion order and on formats forming a ladder; the sweep needs
neither, is deterministic, and prices each format only by its costs: a format no cheaper than a more accurate one
(MXFP4 beside MXFP8 on Hopper) is never chosen. Along the sweep each group only moves to formats of no higher error,
so the front's schedules are ordered: a more accurate one never has more low-precision calls than a cheaper one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fsbench.errors import FsbenchError

GRANULARITIES = ("step", "layer", "step,layer")
REFERENCE = "bf16"


@dataclass(frozen=True)
class Group:
    """Cells (step, layer) that share one format, with each candidate format's cost (ms per query) and error
    contribution (its calls' share of the mean relative L2)."""

    key: str
    cells: tuple[tuple[int, int], ...]
    cost: dict[str, float]
    error: dict[str, float]


@dataclass(frozen=True)
class Candidate:
    """One schedule: `table[step][layer]` format, its predicted attention time per query and predicted error."""

    name: str
    table: tuple[tuple[str, ...], ...]
    predicted_ms: float
    predicted_error: float

    @property
    def low_precision_cells(self) -> int:
        return sum(fmt != REFERENCE for row in self.table for fmt in row)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "predicted_attention_ms": self.predicted_ms,
                "predicted_rel_l2": self.predicted_error, "low_precision_cells": self.low_precision_cells,
                "by_step": ["/".join(dict.fromkeys(row)) for row in self.table]}


def parse_granularity(text: str) -> str:
    normal = ",".join(part.strip() for part in text.split(","))
    if normal == "layer,step":
        normal = "step,layer"
    if normal not in GRANULARITIES:
        raise FsbenchError(f"bad --granularity {text!r}: expected one of {', '.join(GRANULARITIES)}")
    return normal


def groups(sensitivity: list[dict[str, Any]], ms: dict[str, float], formats: tuple[str, ...],
           granularity: str) -> list[Group]:
    """The groups of `granularity` with their per-format cost and error, from the sensitivity table and costs."""
    cells: dict[tuple[int, int], dict[str, dict[str, Any]]] = {}
    for row in sensitivity:
        cells.setdefault((row["step"], row["layer"]), {})[row["fmt"]] = row
    total_calls = sum(next(iter(rows.values()))["calls_per_video"] for rows in cells.values())
    members: dict[str, list[tuple[int, int]]] = {}
    for step, layer in sorted(cells):
        labels = {"step": f"step {step}", "layer": f"layer {layer}", "step,layer": f"step {step} layer {layer}"}
        members.setdefault(labels[granularity], []).append((step, layer))
    out = []
    for key, group_cells in members.items():
        calls = [next(iter(cells[c].values()))["calls_per_video"] for c in group_cells]
        cost = {fmt: sum(calls) * ms[fmt] for fmt in (REFERENCE, *formats)}
        error = {REFERENCE: 0.0, **{fmt: sum(n * cells[c][fmt]["rel_l2"] for n, c in zip(calls, group_cells))
                                    / total_calls for fmt in formats}}
        out.append(Group(key, tuple(group_cells), cost, error))
    return out


def candidate(name: str, choice: dict[str, str], grouped: list[Group], steps: int, layers: int) -> Candidate:
    """The schedule giving each group its chosen format (cells no group covers stay BF16)."""
    table = [[REFERENCE] * layers for _ in range(steps)]
    for group in grouped:
        for step, layer in group.cells:
            table[step][layer] = choice[group.key]
    return Candidate(name, tuple(tuple(row) for row in table), sum(g.cost[choice[g.key]] for g in grouped),
                     sum(g.error[choice[g.key]] for g in grouped))


def single(fmt: str, grouped: list[Group], steps: int, layers: int) -> Candidate:
    return candidate(fmt, {g.key: fmt for g in grouped}, grouped, steps, layers)


def _cheapest(group: Group, lam: float) -> str:
    """The format minimising cost + lam * error in `group` (ties: the smaller error, then the name)."""
    return min(group.cost, key=lambda f: (group.cost[f] + lam * group.error[f], group.error[f], f))


def front(grouped: list[Group], steps: int, layers: int) -> list[Candidate]:
    """Every distinct schedule of the Lagrangian sweep in the order of growing lambda: cheapest first, all BF16
    last."""
    lambdas = {0.0}
    for group in grouped:
        for a in group.cost:
            for b in group.cost:
                d_err = group.error[a] - group.error[b]
                d_cost = group.cost[b] - group.cost[a]
                if d_err > 0 and d_cost > 0:
                    lambdas.add(d_cost / d_err)
    points = sorted(lambdas)
    probes = [0.0] + [(lo + hi) / 2 for lo, hi in zip(points, points[1:])] + [points[-1] * 2 + 1.0]
    seen: dict[tuple[str, ...], Candidate] = {}
    for lam in probes:
        choice = {g.key: _cheapest(g, lam) for g in grouped}
        key = tuple(choice[g.key] for g in grouped)
        if key not in seen:
            seen[key] = candidate(f"front-{len(seen):02d}", choice, grouped, steps, layers)
    return list(seen.values())


def pick(points: list[Candidate], count: int, skip: set[tuple[tuple[str, ...], ...]]) -> list[Candidate]:
    """At most `count` schedules spread evenly along the front (by position), the cheapest always among them;
    schedules in `skip` (the single-format ones, validated anyway) and the all-BF16 end (the reference every
    candidate is scored against) are left out."""
    inner = [c for c in points if c.low_precision_cells and c.table not in skip]
    if len(inner) <= count:
        return inner
    step = (len(inner) - 1) / max(count - 1, 1)
    return [inner[round(i * step)] for i in range(count)] if count > 1 else inner[:1]
