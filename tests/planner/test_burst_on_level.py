"""``PolicyConfig.burst_on_level``: a remembered burst is planned for on today's level (its fitted rate less how
far the router's prompt-token rate fell since it was seen, never raised). Small hand-computed cases on the same
planner and burst as test_burst_miss_budget."""

import pytest

from test_burst_miss_budget import BURST, _after_a_window_of_background, _obs


def _reserve_at(level: float, on_level: bool | None) -> float:
    """The prefill reserve term 10 s after the 11,000 tokens/s burst (seen on 2,048 tokens/s of background) with
    the router's prompt-token rate at ``level`` (``on_level`` None: the policy's default)."""
    pol, _ = _after_a_window_of_background(**({} if on_level is None else {"burst_on_level": on_level}))
    d = pol.decide(_obs(10, request_rate=level / 1024, router_prompt_tokens_rate=level,
                        router_prompt_tokens_peak=level, router_prompt_tokens_peak_wide=level), 10)
    return d.explanation["demand"]["terms"]["prefill_peak"]


def test_a_burst_seen_on_a_busier_level_tops_todays_level_by_its_excess():
    # Level 2,048 -> 1,800: the burst counts 11,000 - 248 = 10,752 tokens/s. The steady plan (1 prefill, 9,500/s
    # flat out) queues 1,252 x 4 = 5,008 tokens of it, more than the 0.5 s budget's 4,750: reserved, at 0.85 of
    # 9,500/s: 10,752 / 7,600 = 1.415 (the default since session 26). Off: the burst as seen, 11,000 / 7,600 = 1.447.
    assert _reserve_at(1_800, True) == pytest.approx(10_752 / 7_600)
    assert _reserve_at(1_800, False) == pytest.approx(11_000 / 7_600)
    # Level 2,048 -> 1,024: 9,976 tokens/s, 476 x 4 = 1,904 queued, within 4,750: absorbed, no reserve.
    assert _reserve_at(1_024, True) == 0.0
    # A level above the one the burst was seen on does not raise it.
    assert _reserve_at(3_000, True) == pytest.approx(11_000 / 7_600)


def test_the_burst_fit_itself_is_unchanged():
    pol, d = _after_a_window_of_background(burst_on_level=True)
    assert d.explanation["demand"]["terms"]["prefill_peak"] == pytest.approx(11_000 / 7_600)
    assert BURST["router_prompt_tokens_peak"] == pytest.approx(44_000 / 6)


def test_on_level_is_the_default():
    # Session 26 made it the default (bench/planner settings_sweep26_*.json): the planner as shipped reads the
    # remembered burst on today's level, 10,752 / 7,600, not as seen.
    assert _reserve_at(1_800, None) == pytest.approx(10_752 / 7_600)
