"""Backtest the predictors on a trace: one-step-ahead forecasts of the per-interval
request rate, scored by MAPE and RMSE (walk-forward: each forecast sees only the past).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from pdserve.planner.core.predictors import PREDICTORS, make_predictor


def interval_rates(arrivals_s: Sequence[float], interval_s: float) -> list[float]:
    """Requests per second in consecutive intervals from the first arrival (last partial one dropped)."""
    if interval_s <= 0:
        raise ValueError(f"interval must be > 0 s, got {interval_s}")
    if not arrivals_s:
        return []
    t0 = min(arrivals_s)
    n = int((max(arrivals_s) - t0) // interval_s)
    if n == 0:
        return []
    counts = np.zeros(n)
    for t in arrivals_s:
        i = int((t - t0) // interval_s)
        if i < n:
            counts[i] += 1
    return list(counts / interval_s)


@dataclass(frozen=True)
class BacktestResult:
    predictor: str
    mape_pct: float  # over intervals with a non-zero actual rate
    rmse: float  # req/s
    n: int
    exploded: int
    seconds: float  # fitting time for the whole walk

    def to_dict(self) -> dict:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}


def backtest(rates: Sequence[float], predictors: Sequence[str] = PREDICTORS, *, warmup: int = 5,
             seasonal_periods: int | None = None,
             progress: Callable[[str, int, int], None] | None = None) -> list[BacktestResult]:
    if len(rates) <= warmup:
        raise ValueError(f"need more than {warmup} intervals to backtest, got {len(rates)}")
    out = []
    for name in predictors:
        pred = make_predictor(name, seasonal_periods=seasonal_periods)
        errs, pct, exploded = [], [], 0
        t0 = time.perf_counter()
        for t in range(warmup, len(rates)):
            f = pred.predict(rates[:t])
            exploded += f.exploded
            actual = rates[t]
            errs.append(f.value - actual)
            if actual > 0:
                pct.append(abs(f.value - actual) / actual)
            if progress:
                progress(name, t - warmup + 1, len(rates) - warmup)
        out.append(BacktestResult(name, 100 * float(np.mean(pct)) if pct else math.nan,
                                  float(np.sqrt(np.mean(np.square(errs)))), len(errs), exploded,
                                  time.perf_counter() - t0))
    return out
