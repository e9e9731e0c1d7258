"""The burst reserve's miss budget (``PolicyConfig.burst_miss_budget``): bursts the steady plan does not
absorb spend the SLO's error budget instead of a reserve while, recurring as seen, they would make few
enough requests miss. Small hand-computed cases: the missed-token arithmetic and the policy's gate."""

import math

import pytest

from pdserve.planner.core.observation import Observation, PoolState
from pdserve.planner.core.policy import PolicyConfig
from pdserve.planner.core.sizing import absorbed, missed_tokens

from capacity_profiles import queue_policy


def test_missed_tokens_of_a_rectangular_burst():
    # 100,000 tokens/s for 5 s on a pool moving 30,000/s, budget 1 s, 10,000/s of background after it.
    # The queue grows at 70,000/s; an arrival at t waits 70,000 t / 30,000 s, past 1 s from t* = 3/7 s:
    # 100,000 x (5 - 3/7) = 457,142.9 tokens arrive late during the burst. It leaves 350,000 queued,
    # 320,000 beyond the 30,000 the budget allows, drained at 30,000 - 10,000 = 20,000/s in 16 s, while
    # 160,000 background tokens arrive: 617,142.9 in all.
    assert missed_tokens(100_000, 5.0, 30_000, 1.0, 10_000) == pytest.approx(457_142.857 + 160_000)
    # no background: only the burst's own late arrivals
    assert missed_tokens(100_000, 5.0, 30_000, 1.0, 0.0) == pytest.approx(457_142.857)
    # what absorbed() spares misses nothing (the boundary included: 2,000 x 5 = 10,000 x 1)
    assert absorbed(12_000, 5.0, 10_000, 1.0) and missed_tokens(12_000, 5.0, 10_000, 1.0, 5_000) == 0.0
    assert missed_tokens(9_000, 5.0, 10_000, 1.0, 5_000) == 0.0
    # just past it: t* = 0.99 x 10,000 / 2,000 = 4.95 s -> 12,000 x 0.05 = 600 late in the burst, and
    # 10,000 - 9,900 = 100 tokens beyond the budget drained at 5,000/s: 0.02 s x 5,000 = 100 more
    assert missed_tokens(12_000, 5.0, 10_000, 0.99, 5_000) == pytest.approx(700)
    # a burst that never ends, or a background the pool cannot keep up with, never drains
    assert missed_tokens(12_000, math.inf, 10_000, 1.0, 0.0) == math.inf
    assert missed_tokens(100_000, 5.0, 30_000, 1.0, 30_000) == math.inf


def _obs(t: float, **kw) -> Observation:
    # 2 req/s x 1,024 tokens of background, the router's rate window showing it; the burst gauge reads the
    # background as a steady stream (the same at both budgets) unless a burst is given.
    base = dict(request_rate=2.0, mean_isl=1024.0, mean_osl=200.0, waiting=0.0, prefill_waiting=0.0,
                decode_waiting=0.0, router_prompt_tokens_rate=2_048.0, router_prompt_tokens_peak=2_048.0,
                router_prompt_tokens_peak_wide=2_048.0)
    return Observation(timestamp=t, prefill=PoolState(1), decode=PoolState(1), **(base | kw))


# A 4 s burst at 11,000 prompt tokens/s reads 44,000 / 6 at budget 2 s and 44,000 / 8 at 4 s (fit: 11,000/s, 4 s).
BURST = dict(router_prompt_tokens_peak=44_000 / 6, router_prompt_tokens_peak_wide=44_000 / 8)


def _after_a_window_of_background(**kw):
    """A planner (10 s ticks, 1 s TTFT SLO, absorb fraction 0.5: a 0.5 s budget) that has watched 89 ticks of
    background, then the burst at t = 0: its 900 s peak window holds 90 ticks x 10 s x 2,048 = 1,843,200
    prompt tokens."""
    pol = queue_policy(burst_budget_s=2.0, burst_fit_budget_s=4.0, burst_absorb_fraction=0.5, **kw)
    for t in range(-890, 0, 10):
        pol.decide(_obs(t), t)
    return pol, pol.decide(_obs(0, **BURST), 0)


def test_a_burst_within_the_error_budget_gets_no_reserve():
    # The steady plan (2,048 tokens/s: 1 prefill) moves 9,500/s flat out. The burst queues 1,500 x 4 = 6,000
    # tokens, more than the 4,750 the 0.5 s budget drains: not absorbed. Late: from t* = 0.5 x 9,500 / 1,500
    # = 3.17 s to 4 s, 11,000 x 0.833 = 9,166.7 tokens, and 1,250 tokens beyond the budget drained at
    # 9,500 - 2,048 = 7,452/s while 2,048 x 1,250 / 7,452 = 343.5 background tokens arrive: 9,510.2 missed.
    # The error budget over the window is 1 % of 1,843,200 = 18,432 tokens: all of it covers the burst
    # (1 prefill), half of it (9,216) does not, and the reserve stands: 11,000 / 7,600 = 1.45 -> 2 prefill,
    # as without the budget.
    assert missed_tokens(11_000, 4.0, 9_500, 0.5, 2_048) == pytest.approx(9_510.2, abs=0.1)
    whole, d = _after_a_window_of_background(burst_miss_budget=1.0)
    assert d.prefill == 1 and d.explanation["demand"]["terms"]["prefill_peak"] == 0.0
    for share in (0.5, None):
        _, d = _after_a_window_of_background(burst_miss_budget=share)
        assert d.prefill == 2 and d.explanation["demand"]["terms"]["prefill_peak"] == pytest.approx(11_000 / 7_600)
    # The same burst again 10 s later doubles what the window's bursts would miss (19,020 > 18,432):
    # now the reserve stands with the whole budget too.
    d = whole.decide(_obs(10, **BURST), 10)
    assert d.prefill == 2 and d.explanation["demand"]["terms"]["prefill_peak"] == pytest.approx(11_000 / 7_600)


def test_a_stricter_slo_leaves_less_budget():
    # attainment 0.995: half the error budget, 9,216 tokens, below the burst's 9,510: reserved for
    _, d = _after_a_window_of_background(burst_miss_budget=1.0, attainment=0.995)
    assert d.prefill == 2


def test_the_miss_budget_is_checked():
    assert PolicyConfig(burst_miss_budget=1.5).invalid() == (
        "burst miss budget 1.5 not in [0, 1]: a share of the SLO's error budget")
    assert PolicyConfig(attainment=0.0).invalid() == "attainment 0 not in (0, 1]"
    assert PolicyConfig(burst_miss_budget=0.5).invalid() is None and PolicyConfig(attainment=1.0).invalid() is None


def test_the_cli_takes_the_miss_budget_and_the_attainment_and_refuses_them_out_of_range(capsys, planner_cli):
    from pdserve.planner.shell.cli import main

    # refused before any metric is read: a clear message, exit 2
    assert main(["run", "--actuator", "static", "--scrape", "http://127.0.0.1:9", "--burst-miss-budget", "2"]) == 2
    assert "burst miss budget 2 not in [0, 1]" in capsys.readouterr().err
    assert main(["run", "--actuator", "static", "--scrape", "http://127.0.0.1:9", "--attainment", "1.5"]) == 2
    assert "attainment 1.5 not in (0, 1]" in capsys.readouterr().err
    rows = planner_cli(2, "--burst-miss-budget", "0.5", "--attainment", "0.995")
    # the first tick has no rate yet (held for that, as without the flags); the second decides
    assert len(rows) == 2 and not rows[1]["held"] and "invalid" not in rows[0]["reason"]
