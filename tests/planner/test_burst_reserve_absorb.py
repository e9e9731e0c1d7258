"""The absorbing reserve (``PolicyConfig.burst_reserve_absorb``): the reserve is the slowest prefill pool that, flat
out, drains the highest remembered burst within the absorb budget had it lasted as long as the longest one
remembered, not the burst's arrival rate at the utilisation target. Small hand-computed cases."""

import math

import pytest

from pdserve.planner.core.observation import Observation, PoolState
from pdserve.planner.core.sizing import absorbed, absorbing

from capacity_profiles import queue_policy


def test_absorbing_is_the_speed_at_which_a_burst_is_just_absorbed():
    # 30,000 tokens/s for 4 s, 0.5 s budget: 30,000 x 4 / 4.5 = 26,666.7/s queues 3,333.3 x 4 = 13,333 tokens,
    # which it drains in 0.5 s
    c = absorbing(30_000, 4.0, 0.5)
    assert c == pytest.approx(26_666.667, abs=0.01)
    assert absorbed(30_000, 4.0, c * (1 + 1e-9), 0.5) and not absorbed(30_000, 4.0, c * 0.999, 0.5)
    # a burst that never ends needs its own rate; no burst, nothing
    assert absorbing(30_000, math.inf, 0.5) == 30_000 and absorbing(0.0, 4.0, 0.5) == 0.0


def _obs(t: float, **kw) -> Observation:
    # 2 req/s x 1,024 tokens of background, read by the gauge as a steady stream unless a burst is given
    base = dict(request_rate=2.0, mean_isl=1024.0, mean_osl=200.0, waiting=0.0, prefill_waiting=0.0,
                decode_waiting=0.0, router_prompt_tokens_rate=2_048.0, router_prompt_tokens_peak=2_048.0,
                router_prompt_tokens_peak_wide=2_048.0)
    return Observation(timestamp=t, prefill=PoolState(1), decode=PoolState(1), **(base | kw))


def _gauge(rate: float, seconds: float) -> dict:
    # a rectangular burst of `rate` tokens/s for `seconds` reads rate x seconds / (seconds + b) at budgets 2 and 4
    tokens = rate * seconds
    return dict(router_prompt_tokens_peak=tokens / (seconds + 2), router_prompt_tokens_peak_wide=tokens / (seconds + 4))


def _planner(absorb: bool):
    """10 s ticks, 1 s TTFT SLO, absorb fraction 0.5 (a 0.5 s budget), every burst not absorbed reserved for; one
    prefill replica moves 9,500 tokens/s flat out and is planned at 0.8 of it. It has watched 89 ticks of background."""
    pol = queue_policy(burst_budget_s=2.0, burst_fit_budget_s=4.0, burst_absorb_fraction=0.5,
                       burst_miss_budget=None, burst_reserve_absorb=absorb)
    for t in range(-890, 0, 10):
        pol.decide(_obs(t), t)
    return pol


def _prefill_peak(d) -> float:
    return d.explanation["demand"]["terms"]["prefill_peak"]


def test_the_reserve_absorbs_the_burst_instead_of_matching_its_arrival_rate():
    # A 4 s burst at 30,000 tokens/s, which the steady plan (1 prefill, 9,500/s) does not absorb. At its arrival
    # rate: 30,000 / 7,600 = 3.95 -> 4 prefill. Absorbing it: 26,666.7 / 9,500 = 2.81 -> 3.
    for absorb, peak, prefill in ((False, 30_000 / 7_600, 4), (True, 30_000 * 4 / 4.5 / 9_500, 3)):
        d = _planner(absorb).decide(_obs(0, **_gauge(30_000, 4.0)), 0)
        assert _prefill_peak(d) == pytest.approx(peak) and d.prefill == prefill


def test_the_longest_remembered_burst_sets_how_long_the_highest_may_last():
    # First a 12 s burst at 11,000/s (not absorbed either: 1,500 x 12 > 9,500 x 0.5), then the 4 s one at 30,000/s.
    # The reserve takes the highest rate for the longest duration: 30,000 x 12 / 12.5 = 28,800 / 9,500 = 3.03 -> 4.
    pol = _planner(True)
    d = pol.decide(_obs(0, **_gauge(11_000, 12.0)), 0)
    assert _prefill_peak(d) == pytest.approx(11_000 * 12 / 12.5 / 9_500) and d.prefill == 2
    d = pol.decide(_obs(10, **_gauge(30_000, 4.0)), 10)
    assert _prefill_peak(d) == pytest.approx(30_000 * 12 / 12.5 / 9_500) and d.prefill == 4
