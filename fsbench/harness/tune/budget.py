"""Fidelity budgets such as `psnr>=35` or `lpips<=0.05`: a metric of `fsbench eval` against the BF16 videos, the
direction in which it is better, and a bound a schedule's measured mean must keep."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from fsbench.errors import FsbenchError

# Each metric's good direction: PSNR and SSIM grow with fidelity, LPIPS (a distance) shrinks.
BETTER = {"psnr": ">=", "ssim": ">=", "lpips": "<="}
BEST = {"ssim": 1.0, "lpips": 0.0}  # what identical videos score: no schedule does better
_BUDGET = re.compile(r"^\s*([a-z]+)\s*(>=|<=)\s*([-+0-9.eE]+)\s*$")


@dataclass(frozen=True)
class Budget:
    metric: str
    op: str
    bound: float

    def met(self, value: float | None) -> bool | None:
        """Whether a measured mean keeps the budget; None where it was not measured."""
        if value is None:
            return None
        return value >= self.bound if self.op == ">=" else value <= self.bound

    def margin(self, value: float | None) -> float:
        """How far a measured mean is on the good side of the bound, relative to the bound (negative: missed)."""
        if value is None:
            return -math.inf
        if math.isinf(value):
            return math.inf if self.met(value) else -math.inf
        gap = value - self.bound if self.op == ">=" else self.bound - value
        return gap / max(abs(self.bound), 1e-9)

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.bound:g}"


def parse(texts: tuple[str, ...] | list[str]) -> tuple[Budget, ...]:
    """`--budget` values, each METRIC>=X or METRIC<=X in the metric's good direction; FsbenchError otherwise."""
    if not texts:
        raise FsbenchError("no --budget: pass one or more, e.g. --budget 'psnr>=35' --budget 'lpips<=0.05'")
    budgets = []
    for text in texts:
        match = _BUDGET.match(text.lower())
        if match is None:
            raise FsbenchError(f"bad --budget {text!r}: expected METRIC>=X or METRIC<=X, e.g. psnr>=35 or lpips<=0.05")
        metric, op, number = match.groups()
        if metric not in BETTER:
            raise FsbenchError(f"bad --budget {text!r}: unknown metric {metric!r}; expected one of "
                               f"{', '.join(BETTER)}")
        if op != BETTER[metric]:
            better = "higher" if BETTER[metric] == ">=" else "lower"
            raise FsbenchError(f"bad --budget {text!r}: {metric} is better when {better}, so its budget reads "
                               f"{metric}{BETTER[metric]}X")
        try:
            bound = float(number)
        except ValueError:
            raise FsbenchError(f"bad --budget {text!r}: {number!r} is not a number") from None
        if not math.isfinite(bound):
            raise FsbenchError(f"bad --budget {text!r}: the bound must be finite")
        if metric in BEST and (bound > BEST[metric] if op == ">=" else bound < BEST[metric]):
            raise FsbenchError(f"bad --budget {text!r}: {metric} is at best {BEST[metric]:g} (identical videos), so "
                               "no schedule could keep it")
        budgets.append(Budget(metric, op, bound))
    metrics = [b.metric for b in budgets]
    if len(set(metrics)) != len(metrics):
        raise FsbenchError(f"--budget names {', '.join(sorted({m for m in metrics if metrics.count(m) > 1}))} twice; "
                           "give each metric one bound")
    return tuple(budgets)
