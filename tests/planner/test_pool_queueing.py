"""A prefill pool behind the router sized as a pool (pdserve.planner.core.pool_queueing, Capacity.prefill_pool,
PolicyConfig.prefill_pool_queueing), on small hand-computed cases."""

from __future__ import annotations

import math

import pytest
from capacity_profiles import queue_policy, queue_profile

from pdserve.planner.core.observation import Observation, PoolState
from pdserve.planner.core.pool_queueing import erlang_c, mean_utilization, tail_utilization
from pdserve.planner.core.sizing import Capacity, Load, size


def test_erlang_c_by_hand():
    # One server: P(wait) is its utilisation. Two at 0.85 (a = 1.7): (a^2 / 2 / (1 - 0.85)) / (1 + a + that)
    # = 9.6333 / 12.3333 = 0.78108.
    assert erlang_c(1, 0.85) == pytest.approx(0.85)
    assert erlang_c(2, 0.85) == pytest.approx(9.63333 / 12.33333, rel=1e-5)
    with pytest.raises(ValueError, match="utilisation"):
        erlang_c(2, 1.0)


def test_a_pool_member_reads_the_lone_curve_at_a_lower_utilisation():
    # Tail (q = 0.99), 2 servers at 0.85: M/M/1 waits ln(0.85 / 0.01) / 0.15 = 29.618 service times, M/M/2
    # ln(0.78108 / 0.01) / (2 x 0.15) = 14.527; ratio 0.4905, damped (^0.5) 0.7003: the lone replica waits
    # 0.7003 x 29.618 = 20.742 at rho' with ln(100 rho') / (1 - rho') = 20.742, rho' = 0.789.
    r = tail_utilization(2, 0.85, 0.99)
    assert math.log(100 * r) / (1 - r) == pytest.approx(0.7003 * 29.618, rel=1e-3)
    assert r == pytest.approx(0.789, abs=1e-3)
    # Mean: M/M/2's mean wait over M/M/1's is C / (c rho) = 0.45946, damped 0.67784; M/M/1's rho / (1 - rho) =
    # 5.6667 x 0.67784 = 3.8411 -> rho' = 3.8411 / 4.8411 = 0.7934.
    assert mean_utilization(2, 0.85) == pytest.approx(0.7934, abs=1e-4)
    # One replica is itself; more replicas, lower equivalent utilisation.
    assert tail_utilization(1, 0.85, 0.99) == mean_utilization(1, 0.85) == 0.85
    assert tail_utilization(5, 0.85, 0.99) < tail_utilization(3, 0.85, 0.99) < r


def test_the_prefill_term_reads_the_pools_throughput():
    # 10,000 tokens/s per replica alone, 11,000 in a pool of 2, 12,000 in one of 3 (by hand). 21,000 tokens/s:
    # alone that is 2.1 -> 3 replicas; a pool of 2 carries 22,000, so 2, at 1 + (21,000 - 10,000) / (22,000 -
    # 10,000) = 1.9167 on the pool's throughput curve.
    per = {1: 10_000.0, 2: 11_000.0, 3: 12_000.0}
    alone = Capacity(prefill_slo=10_000, prefill_saturated=14_000, decode_slo=10_000)
    pooled = Capacity(prefill_slo=10_000, prefill_saturated=14_000, decode_slo=10_000,
                      prefill_pool=lambda n: per.get(n, 12_000.0))
    load = Load(rate=21, isl=1000, osl=10)
    assert size(load, alone, drain_s=30).prefill_compute == pytest.approx(2.1)
    t = size(load, pooled, drain_s=30)
    assert t.prefill_compute == pytest.approx(1 + 11 / 12) and t.prefill == 2
    # At 1 replica's worth and below the pool changes nothing; 36,000 is exactly a pool of 3.
    assert pooled.prefill_replicas(5_000) == pytest.approx(0.5)
    assert pooled.prefill_replicas(36_000) == pytest.approx(3.0)


def test_the_profile_gives_a_pool_member_more_and_a_lone_replica_what_it_did():
    prof = queue_profile()
    lone = prof.prefill_capacity(1024, 1000)
    assert prof.prefill_capacity(1024, 1000, 1) == lone
    caps = [prof.prefill_capacity(1024, 1000, n) for n in (2, 3, 5)]
    assert lone < caps[0] < caps[1] < caps[2] <= max(p.throughput for p in prof.prefill.points)
    load = 0.8 * 10_000
    assert prof.expected_ttft_ms(1024, load, 3) < prof.expected_ttft_ms(1024, load, 2) < prof.expected_ttft_ms(1024, load)


def _obs(t: float, p: int, rate: float) -> Observation:
    return Observation(timestamp=t, prefill=PoolState(p), decode=PoolState(1), request_rate=rate, mean_isl=1024.0,
                       mean_osl=200.0, waiting=0.0, prefill_waiting=0.0, decode_waiting=0.0,
                       router_prompt_tokens_rate=rate * 1024)


def test_the_policy_sizes_the_prefill_pool_as_a_pool_when_asked():
    prof = queue_profile()
    per = {n: prof.prefill_capacity(1024, 1000, n) * 0.8 for n in (1, 2, 3, 4)}
    # 2.9 lone replicas' worth of prompt tokens (18,738/s at 0.8 x 8,076.6): a pool of 2 carries 2 x 6,623.5 and one
    # of 3, 3 x 6,741.8 (the profile read as a pool), so the term is 2 + (18,738 - 13,247) / (20,225 - 13,247) =
    # 2.787 -> still 3, below 2.9.
    rate = 2.9 * per[1] / 1024
    alone, pooled = queue_policy(), queue_policy(prefill_pool_queueing=True)
    for t in range(0, 40, 10):
        a, b = alone.decide(_obs(t, 3, rate), t), pooled.decide(_obs(t, 3, rate), t)
    ta, tb = a.explanation["demand"]["terms"], b.explanation["demand"]["terms"]
    assert ta["prefill_compute"] == pytest.approx(2.9) and a.prefill == 3
    want = 2 + (rate * 1024 - 2 * per[2]) / (3 * per[3] - 2 * per[2])
    assert tb["prefill_compute"] == pytest.approx(want) and want == pytest.approx(2.787, abs=1e-3) and b.prefill == 3
    assert tb["prefill_compute"] < ta["prefill_compute"]


def test_a_large_pool_at_a_light_load_waits_nothing_rather_than_failing():
    # Erlang C underflows to 0 for many servers at a light load (found by test_policy's budget property).
    assert erlang_c(400, 0.05) == 0.0
    assert tail_utilization(400, 0.05, 0.99) == pytest.approx(0.0, abs=1e-9)
    assert mean_utilization(400, 0.05) == 0.0
