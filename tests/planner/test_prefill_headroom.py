"""The prefill pool's own utilisation target, where it applies (a pool size, a rise) and the no-release-on-a-rise
guard (PolicyConfig.prefill_utilization, prefill_utilization_min_replicas, prefill_headroom_on_rise,
hold_prefill_on_rise), on hand-computed cases over the queue profile of tests/planner/capacity_profiles.py."""

from __future__ import annotations

import dataclasses

import pytest
from capacity_profiles import queue_policy as _policy, queue_profile

from pdserve.planner.core.observation import Observation, PoolState
from pdserve.planner.core.policy_config import PolicyConfig

# The queue profile's prefill capacity within a 1,000 ms TTFT at 1,024-token prompts (its SLO-bound point).
CAP = 8076.5625


def _obs(t: float, p: int, rate: float, **kw) -> Observation:
    base = dict(request_rate=rate, mean_isl=1024.0, mean_osl=200.0, waiting=0.0, prefill_waiting=0.0,
                decode_waiting=0.0, router_prompt_tokens_rate=rate * 1024)
    return Observation(timestamp=t, prefill=PoolState(p), decode=PoolState(1), **(base | kw))


def test_the_profile_point_the_cases_below_are_computed_from():
    assert queue_profile().prefill_capacity(1024, 1000) == pytest.approx(CAP)


def test_prefill_planned_at_its_own_utilisation_target_decode_at_the_shared_one():
    # 7 req/s x 1,024 = 7,168 prompt tokens/s. At 0.8 of 8,076.6/s per replica (6,461) that is 1.11 -> 2 prefill;
    # at prefill_utilization 0.95 (7,672.7 per replica) 0.93 -> 1. Decode's term is the same in both.
    shared, own = _policy(), _policy(prefill_utilization=0.95)
    for t in range(0, 60, 10):
        a, b = shared.decide(_obs(t, 1, 7.0), t), own.decide(_obs(t, 1, 7.0), t)
    ta, tb = a.explanation["demand"]["terms"], b.explanation["demand"]["terms"]
    assert ta["prefill_compute"] == pytest.approx(7168 / (0.8 * CAP))
    assert tb["prefill_compute"] == pytest.approx(7168 / (0.95 * CAP))
    assert (a.prefill, b.prefill) == (2, 1)
    assert ta["decode_compute"] == pytest.approx(tb["decode_compute"]) and a.decode == b.decode
    # None: target_utilization, as before the setting existed
    assert _policy(prefill_utilization=None).decide(_obs(0, 1, 7.0), 0).explanation["demand"]["terms"][
        "prefill_compute"] == pytest.approx(ta["prefill_compute"])


def test_a_prefill_utilisation_outside_0_1_is_refused():
    d = _policy(prefill_utilization=1.2).decide(_obs(0, 2, 1.0), 0)
    assert d.held and (d.prefill, d.decode) == (2, 1) and "prefill utilization 1.2 not in (0, 1]" in d.reason


def test_no_prefill_replica_is_released_while_the_prompt_token_rate_rises():
    # Two prefill replicas at loads one carries (2,048 .. 3,072 tokens/s against 6,461 per replica): the guard keeps
    # both while the router's prompt-token rate reads above its previous tick's, and releases one once it falls.
    # Without the guard the replica goes at once. Decode is not held by it.
    held, free = _policy(hold_prefill_on_rise=True), _policy()
    for pol in (held, free):
        pol.decide(_obs(0, 2, 1.0), 0)  # 1,024 tokens/s: the first reading (nothing to compare with)
    d = held.decide(_obs(10, 2, 2.0), 10)  # 1,024 -> 2,048: rising
    assert d.prefill == 2 and "prompt tokens rising (1024 -> 2048/s), not shrinking" in d.reason
    assert free.decide(_obs(10, 2, 2.0), 10).prefill == 1
    d = held.decide(_obs(20, 2, 3.0), 20)  # still rising
    assert d.prefill == 2
    d = held.decide(_obs(30, 2, 2.5), 30)  # 3,072 -> 2,560: falling
    assert d.prefill == 1 and "rising" not in d.reason
    # an unknown rate is no rise (the queue gate still guards a release)
    nan = _policy(hold_prefill_on_rise=True)
    nan.decide(_obs(0, 2, 1.0), 0)
    assert nan.decide(_obs(10, 2, 2.0, router_prompt_tokens_rate=float("nan")), 10).prefill == 1


def test_a_lone_prefill_replica_keeps_the_full_headroom_with_min_replicas_2():
    # 7,168 tokens/s: at 0.95 (7,672.7 per replica) one replica, 0.93 of it; with prefill_utilization_min_replicas 2
    # a pool of one is planned at the shared 0.8 instead (1.11 -> 2). At 14 req/s (14,336 tokens/s) 0.95 gives
    # 1.87 -> 2 replicas, which the rule lets stand (0.8 would give 2.77 -> 3).
    lone = _policy(prefill_utilization=0.95, prefill_utilization_min_replicas=2)
    d = lone.decide(_obs(0, 1, 7.0), 0)
    assert d.prefill == 2 and d.explanation["capacity"]["prefillUtilization"] == 0.8
    assert d.explanation["demand"]["terms"]["prefill_compute"] == pytest.approx(7168 / (0.8 * CAP))
    pair = _policy(prefill_utilization=0.95, prefill_utilization_min_replicas=2)
    d = pair.decide(_obs(0, 2, 14.0), 0)
    assert d.prefill == 2 and d.explanation["capacity"]["prefillUtilization"] == 0.95
    assert d.explanation["demand"]["terms"]["prefill_compute"] == pytest.approx(14336 / (0.95 * CAP))
    assert _policy(prefill_utilization_min_replicas=0).decide(_obs(0, 1, 7.0), 0).held  # refused by name
    assert "prefill utilization min replicas 0 below 1" in _policy(
        prefill_utilization_min_replicas=0).decide(_obs(0, 1, 7.0), 0).reason


def test_prefill_headroom_kept_while_the_prompt_token_rate_rises():
    # prefill_headroom_on_rise: 0.95 at a steady or falling reading, the shared 0.8 on a rise. 6,144 -> 7,168
    # tokens/s is a rise: 7,168 / (0.8 x 8,076.6) = 1.11 -> 2 replicas; the same load next tick is steady: 0.93 -> 1.
    pol = _policy(prefill_utilization=0.95, prefill_headroom_on_rise=True)
    pol.decide(_obs(0, 1, 6.0), 0)
    d = pol.decide(_obs(10, 1, 7.0), 10)
    assert d.prefill == 2 and d.explanation["capacity"]["prefillUtilization"] == 0.8
    d = pol.decide(_obs(20, 2, 7.0), 20)
    assert d.explanation["capacity"]["prefillUtilization"] == 0.95
    assert d.explanation["demand"]["terms"]["prefill_compute"] == pytest.approx(7168 / (0.95 * CAP))
    # the guard still reads the same rise (one reading per tick, shared by both rules)
    both = _policy(prefill_utilization=0.95, prefill_headroom_on_rise=True, hold_prefill_on_rise=True)
    both.decide(_obs(0, 2, 1.0), 0)
    d = both.decide(_obs(10, 2, 2.0), 10)
    assert d.prefill == 2 and "prompt tokens rising (1024 -> 2048/s), not shrinking" in d.reason


def test_no_decode_replica_is_released_while_the_prompt_token_rate_rises():
    # hold_decode_on_rise: the same guard for decode (the KV stream its links carry is that rate). Two decode
    # replicas at 1 req/s x 200 output tokens (the queue profile's decode needs one): kept while the router's
    # prompt-token rate rises, released once it falls; without the setting the replica goes at once.
    def obs(t: float, rate: float) -> Observation:
        return dataclasses.replace(_obs(t, 1, rate), decode=PoolState(2))

    held, free = _policy(hold_decode_on_rise=True), _policy()
    for pol in (held, free):
        pol.decide(obs(0, 1.0), 0)
    d = held.decide(obs(10, 1.5), 10)  # 1,024 -> 1,536: rising
    assert d.decode == 2 and "decode: prompt tokens rising (1024 -> 1536/s), not shrinking" in d.reason
    assert free.decide(obs(10, 1.5), 10).decode == 1
    d = held.decide(obs(20, 1.2), 20)  # falling
    assert d.decode == 1 and "rising" not in d.reason


def test_a_decode_link_release_outside_0_1_is_refused_by_name():
    assert PolicyConfig(decode_link_release=1.5).invalid() == "decode link release 1.5 not in (0, 1]"
    assert PolicyConfig(decode_link_release=0.0).invalid() == "decode link release 0 not in (0, 1]"
    assert PolicyConfig(decode_link_release=0.75).invalid() is None
