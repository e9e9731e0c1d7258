import math

import numpy as np
import pytest

from pdserve.planner.core.policy import PlannerPolicy, PolicyConfig
from pdserve.planner.core.predictors import (
    ArimaPredictor, ConstantPredictor, Forecast, HoltWintersPredictor, MovingAveragePredictor, finish, make_predictor,
)

from capacity_profiles import queue_profile


def test_constant_and_moving_average():
    assert ConstantPredictor().predict([1, 2, 7]).value == 7
    assert MovingAveragePredictor(window=2).predict([1, 2, 4]).value == 3
    assert math.isnan(ConstantPredictor().predict([]).value)


def test_nan_samples_are_dropped():
    f = MovingAveragePredictor(window=3).predict([2.0, math.nan, 4.0, math.inf, 6.0])
    assert f.value == pytest.approx(4.0)
    assert math.isnan(ConstantPredictor().predict([math.nan, math.nan]).value)


@pytest.mark.parametrize("cls", [HoltWintersPredictor, ArimaPredictor])
def test_trend_models_follow_a_ramp(cls):
    ramp = [10 + 2 * i for i in range(40)]
    f = cls().predict(ramp)
    assert f.ok
    # The next value is 90; a damped trend lands close, the last value (88) is the floor.
    assert 85 <= f.value <= 95, f


@pytest.mark.parametrize("cls", [HoltWintersPredictor, ArimaPredictor])
def test_trend_models_fall_back_on_short_or_flat_history(cls):
    f = cls().predict([3.0, 5.0])
    assert f.value == pytest.approx(4.0) and ">moving-average" in f.method
    f = cls().predict([5.0] * 30)
    assert f.value == pytest.approx(5.0)


@pytest.mark.parametrize("cls", [HoltWintersPredictor, ArimaPredictor])
def test_trend_models_fall_back_to_the_last_value_when_the_fit_is_degenerate(cls, monkeypatch):
    """Both fitted models share one fallback: a fit that raises (statsmodels does on
    degenerate data) gives the last value, labelled, and still goes through the clamp."""
    def broken(self, hist, steps):
        raise np.linalg.LinAlgError("singular")

    monkeypatch.setattr(cls, "_fit", broken)
    f = cls().predict([1.0 + (i % 3) for i in range(40)])
    assert f.value == pytest.approx(1.0 + 39 % 3)
    assert f.method == f"{cls.name}>constant (LinAlgError)" and not f.exploded


def test_seasonal_holt_winters_beats_constant_on_a_cycle():
    period = 12
    series = [50 + 30 * math.sin(2 * math.pi * i / period) for i in range(6 * period)]
    errs = {"hw": [], "const": []}
    for t in range(4 * period, len(series) - 1):
        errs["hw"].append(abs(HoltWintersPredictor(seasonal_periods=period).predict(series[: t + 1]).value - series[t + 1]))
        errs["const"].append(abs(ConstantPredictor().predict(series[: t + 1]).value - series[t + 1]))
    assert np.mean(errs["hw"]) < 0.5 * np.mean(errs["const"])


def test_explosion_is_clamped_and_flagged():
    hist = np.array([1.0, 2.0, 3.0])
    f = finish(1e9, hist, "x", explode_ratio=4.0)
    assert f.exploded and f.value == pytest.approx(12.0, rel=1e-3) and f.raw == 1e9 and not f.ok
    f = finish(math.inf, hist, "x", 4.0)
    assert f.exploded and math.isfinite(f.value)
    f = finish(-5.0, hist, "x", 4.0)
    assert f == Forecast(0.0, "x", False, -5.0)


def test_make_predictor_names():
    assert isinstance(make_predictor("Holt_Winters"), HoltWintersPredictor)
    assert isinstance(make_predictor("arima", seasonal_periods=4), ArimaPredictor)
    with pytest.raises(ValueError, match="unknown predictor 'prophet'"):
        make_predictor("prophet")


@pytest.mark.parametrize("cls", [HoltWintersPredictor, ArimaPredictor])
def test_multi_step_forecast_is_the_horizon_peak(cls):
    ramp = [10 + 2 * i for i in range(40)]
    one, three = cls().predict(ramp, 1), cls().predict(ramp, 3)
    assert three.value > one.value + 1  # a rising trend: the third interval is the peak
    flat = ConstantPredictor().predict(ramp, 3)
    assert flat.value == 88


# Arrivals (requests/s per 30 s tick) the planner saw on bench/planner's 70B TP4 Azure x4 run, 0-600 s: a plateau,
# a ramp from 390 s to 480 s, then a fall.
AZURE_X4 = [5.585, 17.395, 22.778, 19.383, 18.826, 20.59, 21.386, 20.664, 19.277, 20.696, 22.682, 25.075, 26.829,
            27.352, 29.96, 31.722, 30.376, 27.646, 27.504, 24.944]


def test_holt_winters_level_smoothing_bound_follows_the_latest_ticks():
    """statsmodels' optimiser puts the level smoothing at 0 on this short history: the 'level' is then a trend line
    through all of it, the forecast lags the ramp (24.5 at 390 s against 26.8 seen) and over-shoots after it (31.7 at
    540 s against 27.6 seen: the planner kept a prefill replica for it). Bounded at 0.5 it follows the latest ticks."""
    plain, bounded = HoltWintersPredictor(), HoltWintersPredictor(min_level_smoothing=0.5)
    assert plain.min_level_smoothing is None
    after_ramp = AZURE_X4[:18]  # the tick at 540 s
    assert plain.predict(after_ramp, 3).value == pytest.approx(31.714, abs=0.01)
    assert bounded.predict(after_ramp, 3).value == pytest.approx(25.462, abs=0.01)
    on_ramp = AZURE_X4[:13]  # 390 s
    assert plain.predict(on_ramp, 3).value == pytest.approx(24.484, abs=0.01)
    assert bounded.predict(on_ramp, 3).value == pytest.approx(27.743, abs=0.01)
    # make_predictor passes it on; the short-history fallback is unchanged
    assert make_predictor("holt-winters", min_level_smoothing=0.5).min_level_smoothing == 0.5
    assert bounded.predict([1.0, 2.0, 3.0]).method == "holt-winters>moving-average"


def test_the_policy_option_reaches_the_predictor():
    assert PolicyConfig().min_level_smoothing == 0.5  # since session 15 (bench/planner planner_next2)
    assert PlannerPolicy(PolicyConfig(), queue_profile()).predictor.min_level_smoothing == 0.5
    assert PlannerPolicy(PolicyConfig(min_level_smoothing=None), queue_profile()).predictor.min_level_smoothing is None
