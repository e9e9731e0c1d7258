"""``PolicyConfig.burst_level_sustained``: a fitted burst read as the load's level (within ``burst_level_ratio`` of the
router's rate window at its tick) stays a level only if the next tick's rate window still shows it; the end of a
high load, whose own tokens had raised the window it was read against, is remembered as a burst. Hand-computed on
the planner of test_burst_fit (its reserve: 9,500 prompt tokens/s per prefill replica flat out, planned at 80 %,
7,600; its compute term at 1,024-token prompts: about 6,460 tokens/s per replica)."""

import math

import pytest

from capacity_profiles import queue_policy
from test_burst_fit import _obs

from pdserve.planner.core.policy import PolicyConfig

# A 5 s burst at 17,500 prompt tokens/s reads 87,500 / 7 at budget 2 s and 87,500 / 9 at 4 s.
BURST = dict(router_prompt_tokens_peak=87_500 / 7, router_prompt_tokens_peak_wide=87_500 / 9)


def _steady(rate: float) -> dict[str, float]:
    return dict(request_rate=rate / 1024, router_prompt_tokens_rate=rate, router_prompt_tokens_peak=rate,
                router_prompt_tokens_peak_wide=rate)


def _ticks(sustained: bool, *after: float, gauge: bool = True) -> list[tuple[int, float]]:
    """(prefill, reserve term) at the burst's tick, the router's rate window at 12,000 tokens/s, and at each tick
    10 s apart after it with the window at ``after`` (``gauge`` False: the burst gauge unread at those ticks). No miss
    budget and no release rule: these cases pin what the memory reads, not what else may hold the pool."""
    pol = queue_policy(burst_budget_s=2.0, burst_fit_budget_s=4.0, burst_level_sustained=sustained,
                       burst_miss_budget=None, release_only_cleared=False)
    pol.decide(_obs(-100, 1, **_steady(2_048)), -100)  # watching for longer than a rate window
    d = pol.decide(_obs(0, 2, **(_steady(12_000) | BURST)), 0)
    out = [(d.prefill, d.explanation["demand"]["terms"]["prefill_peak"])]
    for k, rate in enumerate(after, start=1):
        unread = {} if gauge else dict(router_prompt_tokens_peak=math.nan, router_prompt_tokens_peak_wide=math.nan)
        d = pol.decide(_obs(10 * k, d.prefill, **(_steady(rate) | unread)), 10 * k)
        out.append((d.prefill, d.explanation["demand"]["terms"]["prefill_peak"]))
    return out


def test_a_level_the_load_falls_from_at_once_is_remembered_as_a_burst():
    # At its tick 17,500 is 1.46 times the 12,000 window: a level, no reserve; the compute term (12,000 / 6,460 =
    # 1.86) sizes prefill at 2. Ten seconds later the window reads 6,000: 17,500 > 1.5 x 6,000 = 9,000, the load
    # did not hold it. As a burst on today's level it counts 17,500 - (12,000 - 6,000) = 11,500 tokens/s; the
    # steady plan's one replica (6,000 / 6,460 = 0.93) would queue (11,500 - 9,500) x 5 = 10,000 tokens, over the
    # 0.9 s budget's 8,550: reserved, 11,500 / 7,600 = 1.51 -> prefill stays at 2.
    assert _ticks(True, 6_000) == [(2, 0.0), (2, pytest.approx(11_500 / 7_600))]
    # Without it (the default) the burst is a level for the whole peak window: no reserve, released to one.
    assert _ticks(False, 6_000) == [(2, 0.0), (1, 0.0)]


def test_a_level_the_load_held_for_a_tick_stays_a_level():
    # The window at 11,700 the next tick: 17,500 <= 1.5 x 11,700 = 17,550, the load held it, and it stays a level
    # when the load falls to 6,000 a tick later: no reserve, one replica, as without the setting.
    assert _ticks(True, 11_700, 6_000) == [(2, 0.0), (2, 0.0), (1, 0.0)]
    assert _ticks(False, 11_700, 6_000) == [(2, 0.0), (2, 0.0), (1, 0.0)]


def test_only_the_next_tick_judges_a_level():
    # The same held level with the gauge unread on the two ticks after it (no peak recorded there): the tick at
    # 11,700 judged it held; the fall to 6,000 a tick later does not judge it again, it stays a level, one replica.
    assert _ticks(True, 11_700, 6_000, gauge=False) == [(2, 0.0), (2, 0.0), (1, 0.0)]
    # Unread at the next tick too, it is still that tick that judges it: the fall there makes it a burst, reserved
    # (with no fit at that tick the reserve reads the rate as a need, per replica flat out: 11,500 / 9,500).
    assert _ticks(True, 6_000, gauge=False) == [(2, 0.0), (2, pytest.approx(11_500 / 9_500))]


def test_it_is_opt_in():
    assert PolicyConfig().burst_level_sustained is False
