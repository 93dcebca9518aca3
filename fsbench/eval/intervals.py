"""95 % intervals for the figures of a comparison: a percentile bootstrap (by hand in numpy: a resampling of rows,
one line, which needs no library beyond numpy).

Quality means are resampled over prompts, latency percentiles over queries; the seed and the number of resamples
are recorded with every interval, so the same data always gives the same interval.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

LEVEL = 0.95
RESAMPLES = 10_000
SEED = 0
METHOD = {"method": "percentile bootstrap", "level": LEVEL, "resamples": RESAMPLES, "seed": SEED}

Statistic = Callable[[np.ndarray], np.ndarray]  # (resamples, n) -> (resamples,)


def _mean(samples: np.ndarray) -> np.ndarray:
    return samples.mean(axis=-1)


def percentile(q: float) -> Statistic:
    return lambda samples: np.percentile(samples, q, axis=-1)


def _resampled(values: Sequence[float], statistic: Statistic, rng: np.random.Generator,
               resamples: int) -> np.ndarray:
    x = np.asarray(values, dtype=float)
    return statistic(x[rng.integers(0, len(x), (resamples, len(x)))])


def _bounds(estimates: np.ndarray) -> list[float]:
    tail = 100 * (1 - LEVEL) / 2
    return [float(v) for v in np.percentile(estimates, [tail, 100 - tail])]


def interval(values: Sequence[float], statistic: Statistic = _mean, seed: int = SEED,
             resamples: int = RESAMPLES) -> list[float] | None:
    """[low, high] of `statistic` (the mean unless told) over `values`; None for fewer than two values."""
    if len(values) < 2:
        return None
    return _bounds(_resampled(values, statistic, np.random.default_rng(seed), resamples))


def ratio_interval(numerator: Sequence[float], denominator: Sequence[float], statistic: Statistic,
                   seed: int = SEED, resamples: int = RESAMPLES) -> list[float] | None:
    """[low, high] of statistic(numerator) / statistic(denominator), each sample resampled on its own (two runs'
    queries: a speedup)."""
    if len(numerator) < 2 or len(denominator) < 2:
        return None
    rng = np.random.default_rng(seed)
    return _bounds(_resampled(numerator, statistic, rng, resamples) /
                   _resampled(denominator, statistic, rng, resamples))
