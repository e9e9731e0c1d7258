"""The sizing terms on small hand-computed cases (link-bound decode, burst drain) and in the policy."""

import dataclasses
import math

import pytest

from pdserve.planner.core.observation import Observation, PoolState
from pdserve.planner.core.policy import PlannerPolicy, PolicyConfig
from pdserve.planner.core.profile import CapacityProfile, KvLink
from pdserve.planner.core.sizing import Capacity, Load, size

from capacity_profiles import queue_profile

# A link of 100 Gbit/s moves 12.5 GB/s; at 125 kB of KV per token that is 100,000 tokens/s.
LINK = 100_000.0


def test_link_bound_decode():
    # 50 req/s x 4000 prompt tokens = 200,000 KV tokens/s; links planned at 80 % carry 80,000
    # each and a (P, D) pair carries min(P, D) links' worth, so both ends need 3 instances.
    # Decode compute alone would need 50 x 100 / 10,000 = 0.5 -> 1; prefill compute
    # 200,000 / 150,000 = 1.33 -> 2. From (2, 1): +decode (2, 2) 160,000; then P and D
    # tie at 160,000 -> +decode (2, 3), still 160,000 (2 senders); -> +prefill (3, 3) 240,000.
    cap = Capacity(prefill_slo=150_000, prefill_saturated=180_000, decode_slo=10_000, link=LINK,
                   link_utilization=0.8)
    t = size(Load(rate=50, isl=4000, osl=100), cap, drain_s=60)
    assert t.decode_compute == pytest.approx(0.5) and t.decode_link == 3
    assert t.prefill_compute == pytest.approx(4 / 3) and t.prefill_link == 3
    assert (t.prefill, t.decode) == (3, 3) and t.binding() == {"prefill": "link", "decode": "link"}
    # Without the link term the same load looks like 2P1D: the single decode link would
    # have to carry 2.5x what it can.
    t0 = size(Load(rate=50, isl=4000, osl=100), Capacity(150_000, 180_000, 10_000, link=None), drain_s=60)
    assert (t0.prefill, t0.decode) == (2, 1)


def test_link_contention_asks_for_more_receivers():
    # Links held at both ends lose throughput as instances grow (pdserve.planner.core.link_model);
    # here by hand: one receiver uses 80 % of its link, more use 50 % each. 200,000 KV
    # tokens/s over 100,000-token/s links: D=1 80,000, D=2 100,000, D=3 150,000, D=4 200,000.
    cap = Capacity(prefill_slo=150_000, prefill_saturated=180_000, decode_slo=10_000, link=LINK,
                   link_usable=lambda p, d: 0.8 if d == 1 else 0.5)
    assert cap.link_throughput(2, 3) == pytest.approx(150_000)
    t = size(Load(rate=50, isl=4000, osl=100), cap, drain_s=60)
    assert t.decode_link == 4 and (t.prefill, t.decode) == (2, 4)
    assert t.prefill_link == 0  # the senders were never the limit here: compute's 2 stay


def test_prefixes_lighten_the_link():
    cap = Capacity(prefill_slo=150_000, prefill_saturated=180_000, decode_slo=10_000, link=LINK, link_utilization=0.8)
    t = size(Load(rate=50, isl=4000, osl=100, hit=0.5), cap, drain_s=60)  # 100,000 tokens/s cross
    assert t.decode_link == 2 and t.decode == 2


def test_burst_drain():
    # 1,200,000 prompt tokens queued must clear in 60 s: +20,000 tokens/s on top of 10,000
    # arriving, flat out at 12,000 per replica: 30,000 / 12,000 = 2.5 -> 3 replicas, where
    # the arrivals alone need 10,000 / 8,500 = 1.18 -> 2.
    cap = Capacity(prefill_slo=8_500, prefill_saturated=12_000, decode_slo=10_000, link=None)
    t = size(Load(rate=10, isl=1000, osl=100, prefill_queue_tokens=1_200_000), cap, drain_s=60)
    assert t.prefill_drain == pytest.approx(2.5) and t.prefill_compute == pytest.approx(10_000 / 8_500)
    assert t.prefill == 3 and t.binding()["prefill"] == "drain"


def test_burst_drain_counts_the_start_up():
    # 300,000 queued, 10,000 tokens/s arriving, 1 replica moving 12,000 flat out: in the 60 s
    # before a new replica serves, the queue shrinks by 2,000 x 60 to 180,000, which must
    # then go within 30 s: 180,000 / 30 + 10,000 = 16,000 tokens/s -> 1.33 replicas.
    cap = Capacity(prefill_slo=8_500, prefill_saturated=12_000, decode_slo=100_000, link=None)
    load = Load(rate=10, isl=1000, osl=10, prefill_queue_tokens=300_000, prefill_replicas=1, decode_replicas=1,
                arriving_prompt_tokens=10_000)
    t = size(load, cap, drain_s=30, startup_s=60)
    assert t.prefill_drain == pytest.approx(16_000 / 12_000)
    # A ramp with nothing queued yet: 30,000 arriving against 12,000 builds 18,000 x 60 =
    # 1,080,000 by the time help arrives: 1,080,000 / 30 + 10,000 (forecast) = 46,000 -> 3.83.
    ramp = Load(rate=10, isl=1000, osl=10, prefill_replicas=1, decode_replicas=1, arriving_prompt_tokens=30_000)
    t = size(ramp, cap, drain_s=30, startup_s=60)
    assert t.prefill_drain == pytest.approx(46_000 / 12_000) and t.prefill == 4


def test_decode_links_carry_the_prefill_drain():
    # Both ends: while 1 prefill replica drains its queue it sends 12,000 KV tokens/s into one
    # 10,000-token/s decode link (planned at 100 %): 2,000 x 60 = 120,000 pile up there before
    # help arrives. Afterwards the links must carry 120,000 / 30 + the prefill pool's drain
    # output 16,000 (above) = 20,000 tokens/s -> 2 decode links, where the arrivals alone
    # (10,000) need 1.
    cap = Capacity(prefill_slo=8_500, prefill_saturated=12_000, decode_slo=100_000, link=10_000,
                   link_utilization=1.0)
    load = Load(rate=10, isl=1000, osl=10, prefill_queue_tokens=300_000, prefill_replicas=1, decode_replicas=1,
                arriving_prompt_tokens=10_000)
    t = size(load, cap, drain_s=30, startup_s=60)
    assert t.decode_link == 0 and t.decode_drain == 2 and t.decode == 2
    assert t.binding()["decode"] == "drain"


def test_a_decode_queue_is_decode_work():
    # 20 req/s x 200 generated tokens = 4,000 tokens/s against 3,000 per replica within the ITL SLO: 1.33 -> 2.
    # 600 requests wait in the decode pool (its batch full: the links are idle, 1,000-token prompts). Worked off
    # within 30 s they add 600 x 200 / 30 = 4,000 tokens/s: (4,000 + 4,000) / 3,000 = 2.67 -> 3 decode replicas.
    cap = Capacity(prefill_slo=50_000, prefill_saturated=60_000, decode_slo=3_000, link=LINK, link_utilization=0.8)
    load = Load(rate=20, isl=1000, osl=200, decode_queue_tokens=600 * 1000, prefill_replicas=1, decode_replicas=2,
                decode_queue_compute=True)
    t = size(load, cap, drain_s=30)
    assert t.decode_compute == pytest.approx(4_000 / 3_000) and t.decode_drain == pytest.approx(8_000 / 3_000)
    assert t.decode == 3 and t.binding()["decode"] == "drain"
    # Read as KV waiting for links alone (before session 29): 600,000 tokens / 30 s + 20,000 arriving = 40,000 KV
    # tokens/s, which the one decode link compute asks for carries at 80 %: no drain term, the queue unseen.
    t_link = size(dataclasses.replace(load, decode_queue_compute=False), cap, drain_s=30)
    assert t_link.decode_drain == 0 and t_link.decode == 2
    # An empty decode queue adds nothing.
    assert size(dataclasses.replace(load, decode_queue_tokens=0.0), cap, drain_s=30).decode_drain == 0


def test_the_policy_sizes_decode_for_its_queue_with_decode_queue_compute():
    def decide(**change):
        pol = PlannerPolicy(PolicyConfig(predictor="constant", interval_s=30.0, **change), queue_profile())
        obs = Observation(timestamp=0.0, prefill=PoolState(2), decode=PoolState(1), window_s=60.0, request_rate=4.0,
                          mean_isl=1024.0, mean_osl=256.0, prefill_waiting=0.0, decode_waiting=400.0, waiting=400.0)
        return pol.decide(obs, 0.0)

    shipped, queued = decide(), decide(decode_queue_compute=True)
    assert queued.decode > shipped.decode, (shipped.reason, queued.reason)
    assert queued.explanation["demand"]["terms"]["binding_decode"] == "drain"


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
    # The cases are computed by hand on the lone-replica profile (tests/planner/test_pool_queueing.py reads it as a pool).
    cfg = PolicyConfig(**({"predictor": "constant", "interval_s": 10, "prefill_max": 32, "decode_max": 32,
                           "ttft_slo_ms": 1000, "itl_slo_ms": 50, "correction": False, "startup_s": 30,
                           "prefill_pool_queueing": False} | kw))
    return PlannerPolicy(cfg, profile)


def test_policy_scales_decode_for_the_link():
    # 10 req/s x 1024 = 10,240 KV tokens/s; a 5 Gbit/s link at 1e5 bytes/token carries
    # 6,250 tokens/s, 5,312.5 at 85 %: 10,240 / 5,312.5 = 1.93 -> 2 decode replicas, while
    # decode compute (2,000 tokens/s) fits in one.
    slow = _linked(queue_profile(), 1e5, 5.0)
    # (2P2D now: their links already move 10,625 tokens/s, so nothing piles up meanwhile.)
    d = _policy(slow, link_contention=False).decide(_obs(0, 2, 2, request_rate=10.0), 0)
    terms = d.explanation["demand"]["terms"]
    assert terms["decode_link"] == 2
    assert terms["decode_compute"] < 1 and d.decode == 2 and terms["binding_decode"] == "link"
    fast = _policy(queue_profile()).decide(_obs(0, 1, 1, request_rate=10.0), 0)
    assert fast.decode == 1
    # With the links' head-of-line blocking modelled (the default), a 1,024-token transfer
    # takes 0.16 s and must land within half the 1 s TTFT: the pair never plans more
    # throughput per link than the constant 85 %, so it asks for at least as many.
    c = _policy(slow).decide(_obs(0, 2, 2, request_rate=10.0), 0)
    assert c.decode >= 2 and c.explanation["demand"]["terms"]["binding_decode"] == "link"


def test_long_prompts_do_not_flood_decode_with_links():
    # Mooncake-like: 3.3 req/s x 12,000 prompt tokens = 39,600 KV tokens/s over links of
    # 12.5 GB/s / 131,072 bytes = 95,367 tokens/s each. One transfer takes 0.126 s; half the
    # 2 s TTFT is 7.9 transfer times, rounded down to 4. Prefill compute asks for 21 senders
    # (this profile's slow prefill); with that p99 queueing wait 21 senders use one
    # receiver's link at 0.122 (11.6k tokens/s), two at 0.249 each (47.5k): 2 decode
    # replicas. Counting each transfer's own (log-normal) length as wait had made every link
    # unusable (share 0.02, the floor) and asked for 22. (8P3D now: its links already carry
    # the stream, so nothing piles up meanwhile.)
    prof = _linked(queue_profile(), 131_072, 100.0)
    d = _policy(prof, ttft_slo_ms=2000).decide(_obs(0, 8, 3, request_rate=3.3, mean_isl=12_000.0, mean_osl=50.0), 0)
    terms = d.explanation["demand"]["terms"]
    assert d.prefill == 21 and terms["decode_compute"] < 1 and terms["decode_drain"] == 0
    assert terms["decode_link"] == 2 and d.decode == 2


def test_policy_drains_a_burst_then_releases_it_quickly():
    prof = queue_profile()  # prefill flat out: 0.95 x 10,000 = 9,500 tokens/s per replica
    pol = _policy(prof, drain_s=50.0, scale_down_stabilization_s=20)
    # 1000 queued x 1024 tokens; the one replica drains 9,500 - 2,048 arriving for the 30 s
    # start-up: 1,024,000 - 7,452 x 30 = 800,440 left, to go within 50 s: 16,009 + 2,048 =
    # 18,057 tokens/s -> 1.90 -> 2 replicas.
    d = pol.decide(_obs(0, 1, 1, request_rate=2.0, prefill_waiting=1000.0, waiting=1000.0), 0)
    terms = d.explanation["demand"]["terms"]
    assert terms["prefill_drain"] == pytest.approx((1_024_000 - (9_500 - 2_048) * 30) / 50 / 9_500 + 2_048 / 9_500)
    assert d.prefill == 2
    # 40 still queued (> 1 per ready replica): no shrink although the sizing says 1, first
    # held by the 20 s stabilisation, then by the queue itself.
    d = pol.decide(_obs(10, 2, 1, request_rate=2.0, prefill_waiting=40.0, waiting=40.0), 10)
    assert d.prefill == 2 and d.explanation["demand"]["prefillReplicas"] == 1
    d = pol.decide(_obs(30, 2, 1, request_rate=2.0, prefill_waiting=40.0, waiting=40.0), 30)
    assert d.prefill == 2 and "prefill: requests still queued" in d.reason
    # Queue gone: released at once (the window's recommendations are all 1 by now).
    d = pol.decide(_obs(40, 2, 1, request_rate=2.0), 40)
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
    # 40,000 arriving against one replica's 9,500 flat out: 30,500 x 30 s of start-up pile
    # up, to drain within one 10 s interval on top of the arrivals: 131,500 / 9,500 -> 14.
    assert d.prefill == math.ceil((30_500 * 30 / 10 + 40_000) / 9_500)
    assert d.explanation["demand"]["terms"]["binding_prefill"] == "drain"
    # Already 8 replicas (76,000 flat out): nothing piles up, the profile's capacity decides.
    d = _policy(queue_profile()).decide(_obs(10, 8, 8, request_rate=1.0, router_prompt_tokens_rate=40_000.0), 10)
    cap = queue_profile().prefill_capacity(1024, 1000) * 0.85
    assert d.prefill == math.ceil(40_000 / cap) and d.prefill > 1
    fresh = _policy(queue_profile()).decide(_obs(0, 1, 1, request_rate=0.0, mean_isl=math.nan, mean_osl=math.nan,
                                                 router_prompt_tokens_rate=40_000.0), 0)
    assert fresh.held and "no request has completed" in fresh.reason


def test_burst_reserve_from_the_short_window_peak():
    # A recent peak of 90,000 prompt tokens/s must be absorbed by replicas already up:
    # 90,000 / 30,000 flat out = 3 prefill; its KV over 100,000-token/s links, also flat out:
    # 0.9 -> 1 decode link, no more than decode compute asks (no decode_peak term shows).
    cap = Capacity(prefill_slo=20_000, prefill_saturated=30_000, decode_slo=10_000, link=LINK)
    t = size(Load(rate=2, isl=1000, osl=100, peak_prompt_tokens=90_000), cap, drain_s=60)
    assert t.prefill_peak == pytest.approx(3.0) and t.decode_peak == 0
    assert (t.prefill, t.decode) == (3, 1) and t.binding()["prefill"] == "peak"
    # 150,000 flat out: 5 prefill, and 2 decode links for the reserve.
    t = size(Load(rate=2, isl=1000, osl=100, peak_prompt_tokens=150_000), cap, drain_s=60)
    assert t.decode_peak == 2 and (t.prefill, t.decode) == (5, 2)


def test_burst_reserve_links_carry_what_the_prefill_reserve_sends_when_the_peak_is_a_need():
    # The router's burst gauge at a budget > 0 is what a pool must serve so no wait exceeds
    # the budget (a 3 s burst at 90k/s with a 2 s budget: 54k), not the rate it arrives at.
    # 54,000 / 30,000 flat out -> 2 prefill; they drain the burst at 2 x 30,000 = 60,000 KV
    # tokens/s, and that is what reaches the decode links (100,000/s each, planned at 85 %):
    # still 1 link.
    cap = Capacity(prefill_slo=20_000, prefill_saturated=30_000, decode_slo=10_000, link=LINK)
    need = Load(rate=2, isl=1000, osl=100, peak_prompt_tokens=54_000, peak_is_need=True)
    t = size(need, cap, drain_s=60)
    assert (t.prefill, t.decode) == (2, 1)
    # 95,000 needed: 4 prefill (95,000 / 30,000 = 3.17), which send 120,000/s: 120 / 85 -> 2
    # links, where the same 95,000 read as an arrival rate asks for 1 (95,000 / 100,000 flat out).
    # 75,000 needed: 3 prefill sending 90,000/s, above one link's 85,000: 2 links as well.
    t = size(Load(rate=2, isl=1000, osl=100, peak_prompt_tokens=95_000, peak_is_need=True), cap, drain_s=60)
    assert (t.prefill, t.decode) == (4, 2) and t.decode_peak == 2
    t = size(Load(rate=2, isl=1000, osl=100, peak_prompt_tokens=95_000), cap, drain_s=60)
    assert (t.prefill, t.decode) == (4, 1)
    t = size(Load(rate=2, isl=1000, osl=100, peak_prompt_tokens=75_000, peak_is_need=True), cap, drain_s=60)
    assert (t.prefill, t.decode) == (3, 2)


def test_policy_keeps_the_peak_for_its_window_only():
    # A planner that just started reads "arriving now" from the peak: its rate window still
    # reaches back before the first request. 28,500 arriving against one replica's 9,500
    # flat out piles up 19,000 x 30 s of start-up, to drain within a 10 s interval:
    # 57,000 + 2,048 arriving = 59,048 tokens/s -> 7 replicas. (Without cold_start_link, shipped since session 15:
    # with it the drain also serves the arriving peak; tests/planner/test_link_cold_start.py.)
    fresh = _policy(queue_profile(), peak_window_s=60.0, cold_start_link=False).decide(
        _obs(0, 1, 1, request_rate=2.0, router_prompt_tokens_peak=28_500.0), 0)
    assert fresh.prefill == math.ceil((19_000 * 30 / 10 + 2 * 1024) / 9_500)
    pol = _policy(queue_profile(), peak_window_s=60.0, scale_down_stabilization_s=0)
    pol.decide(_obs(-100, 1, 1, request_rate=2.0), -100)  # watching for longer than the 60 s window
    # 28,500 prompt tokens/s for one scrape: 28,500 / 9,500 flat out = 3 prefill replicas
    d = pol.decide(_obs(0, 1, 1, request_rate=2.0, router_prompt_tokens_peak=28_500.0), 0)
    assert d.prefill == 3 and d.explanation["demand"]["terms"]["binding_prefill"] == "peak"
    d = pol.decide(_obs(50, 3, 1, request_rate=2.0, router_prompt_tokens_peak=2_000.0), 50)
    assert d.prefill == 3  # still within 60 s of the peak
    d = pol.decide(_obs(70, 3, 1, request_rate=2.0, router_prompt_tokens_peak=2_000.0), 70)
    assert d.prefill == 1


def test_a_finite_mean_is_history_even_where_the_decode_counter_shows_no_rate():
    """Session 21's CI (e2e chaos, 60 s held): the service's only request completed before Prometheus
    first scraped its decode pod, so the decode pool's request counter was flat (rate 0) while the
    means (that run's OSL from the prefill pods, a fallback the source no longer takes) and the router's
    prompt-token counter had it. Finite means are evidence of a completion: they are history, and the
    planner decides instead of holding on "no ISL/OSL history" for a whole rate window."""
    pol = _policy(queue_profile())
    d = pol.decide(_obs(0, 1, 1, request_rate=0.0, mean_isl=512.0, mean_osl=1.0, router_prompt_tokens_rate=8.5), 0)
    assert not d.held, d.reason
    assert (d.prefill, d.decode) == (1, 1)
    # Nothing finite, nothing pushed: the hold for arrivals without any completion is unchanged.
    fresh = _policy(queue_profile()).decide(_obs(0, 1, 1, request_rate=0.0, mean_isl=math.nan, mean_osl=math.nan,
                                                 router_prompt_tokens_rate=0.33), 0)
    assert fresh.held and "no request has completed" in fresh.reason
