"""Load predictors: forecast the next interval's value of a metric series.

Every predictor is stateless: ``predict(history, steps=1)`` fits on the history it is
given (oldest first, one value per planner interval) and returns a :class:`Forecast` of
the *peak* over the next ``steps`` intervals (capacity must cover the whole horizon a
new replica needs to start and then serve).
That keeps them trivially testable and lets the backtest and the policy share them.

Robustness rules, shared by all predictors through :func:`finish`:
- NaN / inf samples are dropped before fitting (a missed scrape must not poison a fit);
- a history too short for a model falls back to a simpler one (noted in ``method``),
  and a degenerate fit to the last value (:func:`fit_or_fall_back`, shared by the fitted models);
- a negative forecast is floored at zero;
- a forecast that explodes (non-finite, or above ``explode_ratio`` x the recent
  maximum) is clamped to that bound and flagged ``exploded=True`` so the policy
  can refuse to act on it.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from collections.abc import Callable, Sequence
from typing import Protocol, TypeAlias

import numpy as np

# Callers pass lists of floats; the models pass their cleaned array on to a fallback.
History: TypeAlias = Sequence[float] | np.ndarray

PREDICTORS = ("constant", "moving-average", "holt-winters", "arima")


@dataclass(frozen=True)
class Forecast:
    value: float  # NaN when there was nothing to forecast from
    method: str  # the model actually used (after any fallback)
    exploded: bool = False
    raw: float = math.nan  # the model's output before clamping

    @property
    def ok(self) -> bool:
        return math.isfinite(self.value) and not self.exploded


class Predictor(Protocol):
    name: str

    def predict(self, history: History, steps: int = 1) -> Forecast: ...


def clean(history: History) -> np.ndarray:
    arr = np.asarray(list(history), dtype=float)
    return arr[np.isfinite(arr)]


def finish(raw: float, hist: np.ndarray, method: str, explode_ratio: float) -> Forecast:
    """Apply the floor / explosion clamp common to all predictors."""
    recent_max = float(np.max(hist[-32:])) if hist.size else 0.0
    # The small absolute slack keeps an all-zero history from flagging a 1e-12 forecast.
    bound = explode_ratio * max(recent_max, 0.0) + 1e-6
    if not math.isfinite(raw):
        return Forecast(bound if hist.size else math.nan, method, exploded=True, raw=raw)
    if raw > bound:
        return Forecast(bound, method, exploded=True, raw=raw)
    return Forecast(max(0.0, raw), method, raw=raw)


@dataclass
class ConstantPredictor:
    """Next value = last observed value (the reactive baseline)."""

    explode_ratio: float = 4.0
    name: str = "constant"

    def predict(self, history: History, steps: int = 1) -> Forecast:
        hist = clean(history)
        if hist.size == 0:
            return Forecast(math.nan, self.name)
        return finish(float(hist[-1]), hist, self.name, self.explode_ratio)


@dataclass
class MovingAveragePredictor:
    window: int = 5
    explode_ratio: float = 4.0
    name: str = "moving-average"

    def predict(self, history: History, steps: int = 1) -> Forecast:
        hist = clean(history)
        if hist.size == 0:
            return Forecast(math.nan, self.name)
        return finish(float(np.mean(hist[-self.window :])), hist, self.name, self.explode_ratio)


def fit_or_fall_back(name: str, hist: np.ndarray, min_points: int, explode_ratio: float,
                     fit: Callable[[np.ndarray], tuple[float, str]]) -> Forecast:
    """The fallback pattern every fitted model shares, in one place.

    A history shorter than ``min_points`` or constant has no trend to fit: the mean is the
    best estimate (method ``name>moving-average``). A degenerate fit (statsmodels raises
    ValueError / LinAlgError) falls back to the last value (``name>constant (Error)``).
    Otherwise ``fit(hist)`` returns the raw forecast and the method's label, and the common
    floor / explosion clamp applies (:func:`finish`).
    """
    if hist.size < min_points or float(np.ptp(hist)) == 0.0:
        fb = MovingAveragePredictor(explode_ratio=explode_ratio).predict(hist)
        return Forecast(fb.value, f"{name}>moving-average", fb.exploded, fb.raw)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            raw, method = fit(hist)
    except (ValueError, np.linalg.LinAlgError) as exc:  # degenerate fits
        fb = ConstantPredictor(explode_ratio).predict(hist)
        return Forecast(fb.value, f"{name}>constant ({type(exc).__name__})", fb.exploded, fb.raw)
    return finish(raw, hist, method, explode_ratio)


@dataclass
class HoltWintersPredictor:
    """Additive-trend exponential smoothing, optionally with an additive season.

    The trend is damped: an undamped trend fitted on a ramp keeps climbing for ever,
    which is exactly the runaway scale-up a planner must not do.
    """

    seasonal_periods: int | None = None
    max_history: int = 240
    explode_ratio: float = 4.0
    name: str = "holt-winters"
    # Lower bound of the fitted level smoothing (alpha; None: statsmodels' own, 0). On a planner's short, noisy
    # history (6-60 ticks) the optimiser often puts alpha at 0: the "level" is then the fitted trend line through
    # the whole history and ignores the latest observations, so the forecast lags a ramp and over-shoots after it
    # (bench/planner, 70B TP4 Azure x4: alpha 0 from the 10th tick on, 43k tokens/s forecast at 540 s where 32.6k
    # arrived, and 24.5k at 360 s where 26.8k did).
    min_level_smoothing: float | None = None

    def predict(self, history: History, steps: int = 1) -> Forecast:
        hist = clean(history)[-self.max_history :]
        return fit_or_fall_back(self.name, hist, 6, self.explode_ratio, lambda h: self._fit(h, steps))

    def _fit(self, hist: np.ndarray, steps: int) -> tuple[float, str]:
        from statsmodels.tsa.holtwinters import ExponentialSmoothing

        sp = self.seasonal_periods
        seasonal = "add" if sp and sp >= 2 and hist.size >= 2 * sp + 2 else None
        bounds = {"smoothing_level": (self.min_level_smoothing, 1.0)} if self.min_level_smoothing else None
        model = ExponentialSmoothing(hist, trend="add", damped_trend=True, seasonal=seasonal,
                                     seasonal_periods=sp if seasonal else None, initialization_method="estimated",
                                     bounds=bounds)
        fit = model.fit(optimized=True)
        return float(np.max(fit.forecast(max(1, steps)))), self.name + ("(seasonal)" if seasonal else "")


@dataclass
class ArimaPredictor:
    """ARIMA(p,d,q), optionally seasonal (SARIMA with period ``seasonal_periods``)."""

    order: tuple[int, int, int] = (2, 1, 1)
    seasonal_periods: int | None = None
    max_history: int = 60  # fit cost grows fast with length; older points add little
    explode_ratio: float = 4.0
    name: str = "arima"

    def predict(self, history: History, steps: int = 1) -> Forecast:
        hist = clean(history)[-self.max_history :]
        return fit_or_fall_back(self.name, hist, 10, self.explode_ratio, lambda h: self._fit(h, steps))

    def _fit(self, hist: np.ndarray, steps: int) -> tuple[float, str]:
        from statsmodels.tsa.arima.model import ARIMA

        sp = self.seasonal_periods
        seasonal_order = (1, 0, 0, sp) if sp and sp >= 2 and hist.size >= 3 * sp else (0, 0, 0, 0)
        fit = ARIMA(hist, order=self.order, seasonal_order=seasonal_order).fit()
        return float(np.max(fit.forecast(max(1, steps)))), self.name + ("(seasonal)" if seasonal_order[3] else "")


def make_predictor(name: str, *, seasonal_periods: int | None = None, explode_ratio: float = 4.0,
                   min_level_smoothing: float | None = None) -> Predictor:
    """Build a predictor by its CRD name (spec.autoscaling.predictor)."""
    key = name.strip().lower().replace("_", "-")
    if key in ("constant", "last", "last-value"):
        return ConstantPredictor(explode_ratio=explode_ratio)
    if key in ("moving-average", "ma", "movingaverage"):
        return MovingAveragePredictor(explode_ratio=explode_ratio)
    if key in ("holt-winters", "holtwinters", "exponential-smoothing"):
        return HoltWintersPredictor(seasonal_periods=seasonal_periods, explode_ratio=explode_ratio,
                                    min_level_smoothing=min_level_smoothing)
    if key in ("arima", "sarima"):
        return ArimaPredictor(seasonal_periods=seasonal_periods, explode_ratio=explode_ratio)
    raise ValueError(f"unknown predictor {name!r}; expected one of {', '.join(PREDICTORS)}")
