"""``PolicyConfig.peak_window_max_s``: a remembered burst is kept as long as the longest gap seen between bursts (up
to the max), not only ``peak_window_s``. Hand cases on test_burst_miss_budget's planner (10 s ticks) and burst (fitted
at 11,000 prompt tokens/s for 4 s over 2,048 of background: a reserve of 11,000 / 7,600 prefill replicas)."""

import pytest

from pdserve.planner.core.policy import PolicyConfig

from capacity_profiles import queue_policy
from test_burst_miss_budget import BURST, _obs

RESERVE = 11_000 / 7_600


def _reserves(max_s: float | None, bursts: tuple[int, ...], until: int) -> dict[int, float]:
    """The prefill reserve term at each tick from 0 to ``until`` (a 900 s peak window) with bursts at ``bursts``."""
    pol = queue_policy(burst_budget_s=2.0, burst_fit_budget_s=4.0, burst_absorb_fraction=0.5, burst_miss_budget=None,
                       peak_window_max_s=max_s)
    out = {}
    for t in range(-890, until + 1, 10):
        d = pol.decide(_obs(t, **(BURST if t in bursts else {})), t)
        out[t] = d.explanation["demand"]["terms"]["prefill_peak"]
    return out


def test_a_burst_is_kept_as_long_as_bursts_have_stayed_away():
    # Bursts at 0 and 1,500 (a 1,500 s gap), then at 2,700. The 900 s window forgets the last at 3,600; stretched to
    # the gap plus a tick (1,510 s, under the 2,400 s max) it stands until 4,210.
    bursts = (0, 1_500, 2_700)
    alone, stretched = _reserves(None, bursts, 4_300), _reserves(2_400.0, bursts, 4_300)
    assert alone[3_590] == pytest.approx(RESERVE) and alone[3_600] == 0.0
    assert stretched[3_600] == pytest.approx(RESERVE) and stretched[4_200] == pytest.approx(RESERVE)
    assert stretched[4_210] == 0.0
    # Before the second burst there is no gap yet: the window is peak_window_s's, so the first is gone at 900 s.
    assert stretched[890] == pytest.approx(RESERVE) and stretched[900] == 0.0


def test_the_stretch_stops_at_the_max():
    # A 2,000 s gap and a 1,200 s max: the last burst (at 2,000) is kept 1,200 s.
    r = _reserves(1_200.0, (0, 2_000), 3_300)
    assert r[3_190] == pytest.approx(RESERVE) and r[3_200] == 0.0


def test_a_max_below_the_window_is_refused():
    assert "peak window max" in PolicyConfig(peak_window_max_s=600.0).invalid()
    assert PolicyConfig().peak_window_max_s is None
