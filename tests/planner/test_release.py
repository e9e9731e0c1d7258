"""pdserve.planner.core.release: when a release skips the scale-down stabilisation (hand-computed cases)."""

from collections import deque

import pytest

from pdserve.planner.core.release import MIN_RISES, clear_fraction, is_clear, rise_quantile


def test_rise_is_the_highest_rate_ahead_over_the_rate_now():
    # 10 at every tick but one 15: the three ticks before the 15 see a 1.5x rise within 3 ticks ahead, the rest none
    rates = [10.0] * 8 + [15.0] + [10.0] * 8
    assert rise_quantile(rates, 3, 1.0) == pytest.approx(1.5)
    # 14 ticks have a full look-ahead; 3 of them rise 1.5x: the median is 1, the 0.85-quantile 1.5
    assert rise_quantile(rates, 3, 0.5) == 1.0
    assert rise_quantile(rates, 3, 0.85) == pytest.approx(1.5)
    # from the 15 down to 10 is not a rise (1, not 0.67)
    assert rise_quantile([15.0] + [10.0] * 12, 1, 0.0) == 1.0
    # the policy keeps its history in a deque
    assert rise_quantile(deque(rates), 3, 1.0) == pytest.approx(1.5)


def test_too_short_a_history_learns_nothing():
    assert rise_quantile([10.0] * (MIN_RISES + 2), 3, 0.9) is None  # MIN_RISES - 1 ticks with a full look-ahead
    assert rise_quantile([0.0] * 40, 3, 0.9) is None  # no tick with a positive rate
    assert clear_fraction(0.8, 0.9, [10.0] * 5, 3) is None
    with pytest.raises(ValueError):
        rise_quantile([1.0] * 20, 0, 0.5)


def test_the_fraction_is_the_inverse_rise_at_most_the_fixed_one():
    rates = [10.0, 12.5] * 10  # every tick sees 12.5 within two ticks: rise 1.25 at the 10s, 1 at the 12.5s
    assert clear_fraction(None, 1.0, rates, 2) == pytest.approx(0.8)
    assert clear_fraction(0.7, 1.0, rates, 2) == pytest.approx(0.7)
    assert clear_fraction(0.9, None, rates, 2) == 0.9  # fixed alone
    assert clear_fraction(None, None, rates, 2) is None


def test_clear_reads_the_pools_largest_term():
    terms = {"prefill_compute": 2.3, "prefill_peak": 2.6, "decode_compute": 0.4, "binding_prefill": "peak"}
    assert not is_clear(terms, "prefill", 3, 0.8)  # 2.6 > 2.4
    assert is_clear(terms, "prefill", 3, 0.9)  # 2.6 <= 2.7
    assert is_clear(terms, "decode", 1, 0.5)
    assert not is_clear(terms, "decode", 1, None)
    assert not is_clear({}, "decode", 1, 0.9)


def test_a_quantile_outside_zero_to_one_is_refused():
    from pdserve.planner.core.policy_config import PolicyConfig
    assert "not in (0, 1]" in PolicyConfig(scale_down_clear_quantile=0).invalid()
    assert PolicyConfig(scale_down_clear_quantile=0.9).invalid() is None


def test_the_stabilisation_remembers_no_drain():
    from pdserve.planner.core.release import undrained
    terms = {"prefill_compute": 3.4, "prefill_link": 6.0, "prefill_drain": 0.0, "prefill_peak": 0.0,
             "decode_compute": 0.6, "decode_link": 2.0, "decode_drain": 4.0, "decode_peak": 0.0}
    # prefill: the link term asked for 6, and stays; decode: 4 from the drain alone, remembered as the link's 2
    assert undrained(terms, 6, 4, 1, 1) == (6, 2)
    # never above the recommendation, never under the pool's minimum
    assert undrained(terms, 5, 1, 1, 1) == (5, 1)
    assert undrained({"decode_drain": 3.0, "decode_compute": 0.2}, 2, 3, 1, 2) == (2, 2)
    assert undrained({}, 2, 3, 1, 1) == (2, 3)


def test_reserved_reads_the_pools_peak_term():
    from pdserve.planner.core.release import reserved
    assert reserved({"prefill_peak": 1.4, "decode_peak": 0.0}, "prefill")
    assert not reserved({"prefill_peak": 1.4, "decode_peak": 0.0}, "decode")
    assert not reserved({}, "decode")
