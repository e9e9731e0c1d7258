"""The drain projection's arriving rate while the rate window is young (issue 12), on hand-computed cases.

Shipped rule ("peak"): young from the first *busy tick*, the burst gauge stands in. PolicyConfig.arriving_young
"seen": young from the first *arrival*, the arriving rate the window's tokens over the traffic seen
(mean x window / elapsed). Each test fails on 4db533b (pdserve.planner.core.arriving and the flag did not exist).
"""

import pytest

from pdserve.planner.core import decision as D
from pdserve.planner.core.arriving import TrafficStart, arriving_tokens
from pdserve.planner.core.observation import Observation, PoolState
from pdserve.planner.core.policy import PlannerPolicy, PolicyConfig

from capacity_profiles import queue_profile

WINDOW = 60.0


def _started(*ticks: tuple[float, bool], interval_s: float = 30.0) -> TrafficStart:
    start = TrafficStart()
    for now, busy in ticks:
        start.observe(now, busy, interval_s)
    return start


def test_the_first_arrival_is_after_the_last_idle_tick():
    # No tick before the first busy one (the simulator: its first tick is one interval after the first arrival).
    s = _started((30.0, True), (60.0, True), (90.0, False), (120.0, True))
    assert (s.tick, s.arrival) == (30.0, 0.0)  # later ticks, idle or busy, change nothing
    # Idle ticks first: the last one bounds the first arrival, even where ticks came late (45 s after it).
    s = _started((0.0, False), (10.0, False), (55.0, True))
    assert (s.tick, s.arrival, s.idle) == (55.0, 10.0, 10.0)
    assert _started((0.0, False)).arrival is None


def test_mooncake_at_30_s_arriving_is_the_rate_over_the_traffic_seen():
    # 8B Mooncake, first tick at 30 s: the 60 s window holds 30 s of traffic, mean 14,189 prompt tokens/s,
    # the burst gauge 95,822. Shipped: the gauge (young). Seen: 14,189 x 60 / 30 = 28,378 (what arrived next:
    # 35-45k; the gauge is 3.4x that).
    s = _started((30.0, True))
    assert arriving_tokens(14_189.0, 95_822.0, WINDOW, 30.0, s) == 95_822.0
    assert arriving_tokens(14_189.0, 95_822.0, WINDOW, 30.0, s, young="seen") == pytest.approx(28_378.0)
    # 8B bursty seed 1 at 60 s: a full window of traffic (29,200) but only 30 s since the first busy tick, so
    # the shipped rule still reads the gauge (81,600); seen: 60 s since the first arrival, the mean itself.
    s = _started((30.0, True), (60.0, True))
    assert arriving_tokens(29_200.0, 81_600.0, WINDOW, 60.0, s) == 81_600.0
    assert arriving_tokens(29_200.0, 81_600.0, WINDOW, 60.0, s, young="seen") == 29_200.0
    # Both rules agree once the window is old, and arriving_signal "peak" reads the gauge whatever the rule.
    s = _started((30.0, True), (60.0, True), (90.0, True))
    for young in ("peak", "seen"):
        assert arriving_tokens(20_000.0, 50_000.0, WINDOW, 90.0, s, young=young) == 20_000.0
        assert arriving_tokens(20_000.0, 50_000.0, WINDOW, 90.0, s, signal="peak", young=young) == 50_000.0
    # After idle ticks: the traffic began after the last one (10 s), 45 s before this tick: 12,000 x 60 / 45.
    s = _started((0.0, False), (10.0, False), (55.0, True))
    assert arriving_tokens(12_000.0, 70_000.0, WINDOW, 55.0, s, young="seen") == pytest.approx(16_000.0)
    # No gauge (NaN): the shipped rule falls back to the mean.
    assert arriving_tokens(12_000.0, float("nan"), WINDOW, 55.0, s) == 12_000.0


def _obs(now: float, tokens: float, peak: float, waiting: float) -> Observation:
    return Observation(timestamp=now, prefill=PoolState(1), decode=PoolState(1), window_s=WINDOW, request_rate=1.0,
                       mean_isl=1024.0, mean_osl=100.0, waiting=waiting, prefill_waiting=waiting, decode_waiting=0.0,
                       router_prompt_tokens_rate=tokens, router_prompt_tokens_peak=peak)


@pytest.mark.parametrize("young, arriving, prefill", [("peak", 40_960.0, 7), ("seen", 6_144.0, 1)])
def test_the_policy_drains_for_the_traffic_seen_not_the_gauge(young: str, arriving: float, prefill: int):
    # First tick at 30 s, 1P1D: 3,072 prompt tokens/s over the 60 s window (3 req/s of 1,024 tokens), the
    # gauge 40,960, 10 prompts (10,240 tokens) queued; one replica drains 9,500 tokens/s (queue_profile
    # flat out at ISL 1,024); start-up 60 s, drain within 30 s, no burst reserve, no correction.
    # Gauge: at start-up 10,240 + (40,960 - 9,500) x 60 = 1,897,840 tokens queued; drained in 30 s on top of
    # the 3,072 served: 66,333 / 9,500 = 6.98 -> 7 prefill replicas.
    # Seen: 3,072 x 60 / 30 = 6,144 arrive, less than the one replica moves: no queue at start-up, 1 replica.
    # Without cold_start_link (shipped since session 15), whose drain serves the arriving rate on top.
    cfg = PolicyConfig(predictor="constant", interval_s=30, startup_s=60, correction=False, peak_window_s=0,
                       prefill_max=32, decode_max=32, arriving_young=young, cold_start_link=False)
    policy = PlannerPolicy(cfg, queue_profile())
    d = policy.decide(_obs(30.0, 3_072.0, 40_960.0, 10.0), 30.0)
    demand = d.explanation["demand"]
    assert demand["arrivingPromptTokensPerS"] == pytest.approx(arriving)
    assert d.explanation["capacity"]["prefillSaturatedTokensPerS"] == pytest.approx(9_500)
    assert (d.prefill, d.decode) == (prefill, 1)
    # 60 s: a full window since the first arrival (seen: the mean), 30 s since the first busy tick (the gauge).
    d = policy.decide(_obs(60.0, 6_144.0, 40_960.0, 0.0), 60.0)
    assert d.explanation["demand"]["arrivingPromptTokensPerS"] == (40_960.0 if young == "peak" else 6_144.0)


def test_an_unknown_young_rule_is_refused():
    d = PlannerPolicy(PolicyConfig(arriving_young="first"), queue_profile()).decide(_obs(30.0, 1.0, 1.0, 0.0), 30.0)
    assert d.held and d.hold_key == D.HOLD_INVALID and "arriving_young 'first'" in d.reason
