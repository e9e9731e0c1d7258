"""``PolicyConfig.lone_burst_s``: bursts the steady plan does not absorb stop holding a reserve once they all
came within one span that long and none since (one episode that has not recurred); bursts that recur keep it
for the peak window. Small hand-computed cases on the same planner and burst as test_burst_miss_budget."""

import pytest

from pdserve.planner.core.policy import PolicyConfig

from test_burst_miss_budget import BURST, _after_a_window_of_background, _obs

RESERVE = pytest.approx(11_000 / 7_600)  # the burst's 11,000 tokens/s at 0.85 of 9,500/s flat out: 1.45 -> 2


def _peak_terms(lone: float | None, bursts_at: tuple[int, ...], ticks: range) -> dict[int, float]:
    """The prefill reserve term at 0 s and each later tick of ``ticks`` (10 s apart) for a planner that watched
    89 ticks of background and then saw the 4 s, 11,000 tokens/s burst at 0 s and at each time in ``bursts_at``."""
    pol, d = _after_a_window_of_background(lone_burst_s=lone)
    out = {0: d.explanation["demand"]["terms"]["prefill_peak"]}
    for t in ticks:
        if t > 0:
            d = pol.decide(_obs(t, **(BURST if t in bursts_at else {})), t)
            out[t] = d.explanation["demand"]["terms"]["prefill_peak"]
    return out


def test_a_burst_that_does_not_recur_is_let_go_after_its_span():
    terms = _peak_terms(60.0, (0,), range(0, 100, 10))
    # reserved while younger than 60 s, then let go: one burst, no recurrence in 60 s
    assert all(terms[t] == RESERVE for t in range(0, 60, 10)), terms
    assert all(terms[t] == 0.0 for t in range(60, 100, 10)), terms
    # off (as shipped): kept for the whole 900 s peak window
    assert all(v == RESERVE for v in _peak_terms(None, (0,), range(0, 100, 10)).values())


def test_bursts_that_recur_keep_their_reserve():
    # Two bursts 30 s apart are one episode (span 30 <= 60): let go 60 s after the second, at 90 s.
    terms = _peak_terms(60.0, (0, 30), range(0, 120, 10))
    assert terms[80] == RESERVE and terms[90] == 0.0, terms
    # 100 s apart they span more than 60 s: a recurring source, the reserve stays for the peak window.
    terms = _peak_terms(60.0, (0, 100), range(0, 300, 10))
    assert terms[60] == 0.0 and terms[100] == RESERVE, terms  # (the first alone was let go at 60 s)
    assert all(terms[t] == RESERVE for t in range(100, 300, 10)), terms


def test_the_span_is_checked():
    assert PolicyConfig(lone_burst_s=0.0).invalid() == "lone burst span 0 s must be above 0"
    assert PolicyConfig(lone_burst_s=300.0).invalid() is None
