"""The sizing terms on small hand-computed cases (link-bound decode, burst drain) and in the policy."""

import math

import pytest

from pdserve.planner.observation import Observation, PoolState
from pdserve.planner.policy import PlannerPolicy, PolicyConfig
from pdserve.planner.profile import CapacityProfile, KvLink
from pdserve.planner.sizing import Capacity, Load, size

from conftest import queue_profile

# A link of 100 Gbit/s moves 12.5 GB/s; at 125 kB of KV per token that is 100,000 tokens/s.
LINK = 100_000.0


def test_link_bound_decode():
    # 50 req/s x 4000 prompt tokens = 200,000 KV tokens/s; links planned at 80 % carry 80,000
    # each, so both ends need 200,000 / 80,000 = 2.5 -> 3 instances. Decode compute alone
    # would need 50 x 100 / 10,000 = 0.5 -> 1; prefill compute 200,000 / 150,000 = 1.33 -> 2.
    cap = Capacity(prefill_slo=150_000, prefill_saturated=180_000, decode_slo=10_000, link=LINK,
                   link_utilization=0.8)
    t = size(Load(rate=50, isl=4000, osl=100), cap, drain_s=60)
    assert t.decode_compute == pytest.approx(0.5) and t.decode_link == pytest.approx(2.5)
    assert t.prefill_compute == pytest.approx(4 / 3) and t.prefill_link == pytest.approx(2.5)
    assert (t.prefill, t.decode) == (3, 3) and t.binding() == {"prefill": "link", "decode": "link"}
    # Without the link term the same load looks like 2P1D: the single decode link would
    # have to carry 2.5x what it can.
    t0 = size(Load(rate=50, isl=4000, osl=100), Capacity(150_000, 180_000, 10_000, link=None), drain_s=60)
    assert (t0.prefill, t0.decode) == (2, 1)


def test_prefix_hits_lighten_the_link():
    cap = Capacity(prefill_slo=150_000, prefill_saturated=180_000, decode_slo=10_000, link=LINK, link_utilization=0.8)
    t = size(Load(rate=50, isl=4000, osl=100, hit=0.5), cap, drain_s=60)  # 100,000 tokens/s cross
    assert t.decode_link == pytest.approx(1.25) and t.decode == 2


def test_burst_drain():
    # 1,200,000 prompt tokens queued must clear in 60 s: +20,000 tokens/s on top of 10,000
    # arriving, flat out at 12,000 per replica: 30,000 / 12,000 = 2.5 -> 3 replicas, where
    # the arrivals alone need 10,000 / 8,500 = 1.18 -> 2.
    cap = Capacity(prefill_slo=8_500, prefill_saturated=12_000, decode_slo=10_000, link=None)
    t = size(Load(rate=10, isl=1000, osl=100, prefill_queue_tokens=1_200_000), cap, drain_s=60)
    assert t.prefill_drain == pytest.approx(2.5) and t.prefill_compute == pytest.approx(10_000 / 8_500)
    assert t.prefill == 3 and t.binding()["prefill"] == "drain"
    # KV waiting for the decode side's links drains the same way: 600,000 / 60 + 10,000 over 100,000.
    t = size(Load(rate=10, isl=1000, osl=100, decode_queue_tokens=600_000),
             Capacity(8_500, 12_000, 10_000, link=LINK), drain_s=60)
    assert t.decode_drain == pytest.approx(0.2) and t.decode == 1


def test_arrival_floor_beats_a_low_forecast():
    cap = Capacity(prefill_slo=10_000, prefill_saturated=12_000, decode_slo=10_000)
    t = size(Load(rate=1, isl=1000, osl=100, prompt_tokens_floor=35_000), cap, drain_s=60)
    assert t.prefill_compute == pytest.approx(3.5) and t.prefill == 4


def _linked(profile: CapacityProfile, kv_bytes: float, gbps: float) -> CapacityProfile:
    return profile.model_copy(update={"kv_link": KvLink(kvBytesPerToken=kv_bytes, gbps=gbps)})


def _obs(t, p, d, **kw):
    base = dict(request_rate=10.0, mean_isl=1024.0, mean_osl=200.0, waiting=0.0, prefill_waiting=0.0,
                decode_waiting=0.0)
    return Observation(timestamp=t, prefill=PoolState(p), decode=PoolState(d), **(base | kw))


def _policy(profile, **kw):
    cfg = PolicyConfig(**({"predictor": "constant", "interval_s": 10, "prefill_max": 32, "decode_max": 32,
                           "ttft_slo_ms": 1000, "itl_slo_ms": 50, "correction": False, "startup_s": 30} | kw))
    return PlannerPolicy(cfg, profile)


def test_policy_scales_decode_for_the_link():
    # 10 req/s x 1024 = 10,240 KV tokens/s; a 5 Gbit/s link at 1e5 bytes/token carries
    # 6,250 tokens/s, 5,312.5 at 85 %: 10,240 / 5,312.5 = 1.93 -> 2 decode replicas, while
    # decode compute (2,000 tokens/s) fits in one.
    slow = _linked(queue_profile(), 1e5, 5.0)
    d = _policy(slow).decide(_obs(0, 1, 1, request_rate=10.0), 0)
    terms = d.explanation["demand"]["terms"]
    assert terms["decode_link"] == pytest.approx(10 * 1024 / (6_250 * 0.85))
    assert terms["decode_compute"] < 1 and d.decode == 2 and terms["binding_decode"] == "link"
    fast = _policy(queue_profile()).decide(_obs(0, 1, 1, request_rate=10.0), 0)
    assert fast.decode == 1


def test_policy_drains_a_burst_then_releases_it_quickly():
    prof = queue_profile()  # prefill flat out: 0.95 x 10,000 = 9,500 tokens/s per replica
    pol = _policy(prof, drain_s=50.0, scale_down_stabilization_s=20)
    # 1000 queued x 1024 tokens / 50 s = 20,480 tokens/s + 2 req/s x 1024 = 22,528 -> 2.37 -> 3
    d = pol.decide(_obs(0, 1, 1, request_rate=2.0, prefill_waiting=1000.0, waiting=1000.0), 0)
    terms = d.explanation["demand"]["terms"]
    assert terms["prefill_drain"] == pytest.approx(22_528 / 9_500) and d.prefill == 3
    # 40 still queued (> 1 per ready replica): no shrink although the sizing says 1, first
    # held by the 20 s stabilisation, then by the queue itself.
    d = pol.decide(_obs(10, 3, 1, request_rate=2.0, prefill_waiting=40.0, waiting=40.0), 10)
    assert d.prefill == 3 and d.explanation["demand"]["prefillReplicas"] == 1
    d = pol.decide(_obs(30, 3, 1, request_rate=2.0, prefill_waiting=40.0, waiting=40.0), 30)
    assert d.prefill == 3 and "prefill: requests still queued" in d.reason
    # Queue gone: released at once (the window's recommendations are all 1 by now).
    d = pol.decide(_obs(40, 3, 1, request_rate=2.0), 40)
    assert d.prefill == 1


def test_unknown_queue_never_shrinks():
    pol = _policy(queue_profile(), scale_down_stabilization_s=0)
    d = pol.decide(_obs(0, 6, 6, request_rate=1.0, waiting=math.nan, prefill_waiting=math.nan,
                        decode_waiting=math.nan), 0)
    assert (d.prefill, d.decode) == (6, 6)
    d = pol.decide(_obs(10, 6, 6, request_rate=1.0), 10)
    assert (d.prefill, d.decode) == (1, 1)


def test_arrivals_before_any_completion():
    """The router's prompt-token rate is an arrival-time signal: a burst is sized before it completes."""
    pol = _policy(queue_profile())
    pol.decide(_obs(0, 1, 1, request_rate=1.0), 0)  # an ISL is known from earlier completions
    d = pol.decide(_obs(10, 1, 1, request_rate=0.0, router_prompt_tokens_rate=40_000.0), 10)
    cap = queue_profile().prefill_capacity(1024, 1000) * 0.85
    assert d.prefill == math.ceil(40_000 / cap) and d.prefill > 1
    fresh = _policy(queue_profile()).decide(_obs(0, 1, 1, request_rate=0.0, mean_isl=math.nan, mean_osl=math.nan,
                                                 router_prompt_tokens_rate=40_000.0), 0)
    assert fresh.held and "no request has completed" in fresh.reason


def test_burst_reserve_from_the_short_window_peak():
    # A recent peak of 90,000 prompt tokens/s must be absorbed by replicas already up:
    # 90,000 / 30,000 flat out = 3 prefill; its KV over 100,000-token/s links: 0.9 -> 1 decode.
    cap = Capacity(prefill_slo=20_000, prefill_saturated=30_000, decode_slo=10_000, link=LINK)
    t = size(Load(rate=2, isl=1000, osl=100, peak_prompt_tokens=90_000), cap, drain_s=60)
    assert t.prefill_peak == pytest.approx(3.0) and t.decode_peak == pytest.approx(0.9)
    assert (t.prefill, t.decode) == (3, 1) and t.binding()["prefill"] == "peak"


def test_policy_keeps_the_peak_for_its_window_only():
    pol = _policy(queue_profile(), peak_window_s=60.0, scale_down_stabilization_s=0)
    # 28,500 prompt tokens/s for one scrape: 28,500 / 9,500 flat out = 3 prefill replicas
    d = pol.decide(_obs(0, 1, 1, request_rate=2.0, router_prompt_tokens_peak=28_500.0), 0)
    assert d.prefill == 3 and d.explanation["demand"]["terms"]["binding_prefill"] == "peak"
    d = pol.decide(_obs(50, 3, 1, request_rate=2.0, router_prompt_tokens_peak=2_000.0), 50)
    assert d.prefill == 3  # still within 60 s of the peak
    d = pol.decide(_obs(70, 3, 1, request_rate=2.0, router_prompt_tokens_peak=2_000.0), 70)
    assert d.prefill == 1
