"""A prefill latency ratio under 1 applied down to a floor (PolicyConfig.prefill_ratio_floor, 0.85 since session 25).

Same analytic profile as test_correction_pool_ttft (tests/planner/conftest.py): one prefill replica moves 10k tokens/s,
a 1024-token prompt takes 102.4 ms alone plus the M/D/1 wait. The engine answering at 0.9x its profile reads a ratio
that converges on 0.9 (halfway per window: 0.9 + 0.1 x 0.5^n).
"""

import math

import pytest
from capacity_profiles import queue_profile
from test_correction_pool_ttft import expected_ms, window
from test_policy import make, obs

from pdserve.planner.core.correction import LatencyCorrection
from pdserve.planner.core.policy import PolicyConfig


def fed(floor: float | None, speed: float, n: int = 8) -> LatencyCorrection:
    corr = LatencyCorrection((0.67, 1.5), 0.8, 300.0, pool_ttft=True, prefill_floor=floor)
    for _ in range(n):
        corr.update(window(0.8, speed * expected_ms(0.8)), queue_profile(), 0.0)
    return corr


def test_a_faster_pool_is_applied_down_to_the_floor():
    ratio = 0.9 + 0.1 * 0.5 ** 8
    corr = fed(0.85, 0.9)
    assert corr.prefill == pytest.approx(ratio)
    # applied whatever the tail: a faster pool is never a reason to wait for the SLO to near
    assert corr.factor("prefill", 0.2, 2000.0, now=0.0) == pytest.approx(ratio)
    # 0.7x the profile: the floor, not the ratio
    assert fed(0.85, 0.7).factor("prefill", 0.2, 2000.0, now=0.0) == 0.85
    # unset: left unapplied as before; the decode pool is untouched by the prefill floor
    assert fed(None, 0.9).factor("prefill", 0.2, 2000.0, now=0.0) == 1.0
    assert corr.factor("decode", 0.02, 50.0, now=0.0) == 1.0


def test_the_floor_sizes_the_prefill_pool():
    # 5.37 replicas of load at the profile; the engines read at 0.9x their profile (set, then left alone: no engine TTFT in the observation); lone-replica
    # sizing, so the prefill compute term is load / (SLO capacity x 0.85 / correction)
    def decide(floor):
        pol = make(correction=True, prefill_ratio_floor=floor, prefill_pool_queueing=False)
        pol._corr.prefill = 0.9
        return pol.decide(obs(0, p=8, d=8, rate=36.0), now=0)
    cap_p = queue_profile().prefill_capacity(1024, 1000) * 0.85
    before, after = decide(None), decide(0.85)
    assert before.explanation["capacity"]["prefillCorrection"] == 1.0
    assert after.explanation["capacity"]["prefillCorrection"] == pytest.approx(0.9)
    assert before.explanation["demand"]["terms"]["prefill_compute"] == pytest.approx(36 * 1024 / cap_p)
    assert after.explanation["demand"]["terms"]["prefill_compute"] == pytest.approx(36 * 1024 * 0.9 / cap_p)
    assert (before.prefill, after.prefill) == (math.ceil(36 * 1024 / cap_p), math.ceil(36 * 1024 * 0.9 / cap_p))
    assert after.prefill < before.prefill


def test_the_floor_is_checked():
    assert PolicyConfig(prefill_ratio_floor=0.5).invalid() == (
        "prefill ratio floor 0.5 not within the correction's lower bound 0.67 and 1")
    assert PolicyConfig(prefill_ratio_floor=1.2).invalid() is not None
    assert PolicyConfig(prefill_ratio_floor=0.85).invalid() is None
    assert PolicyConfig().prefill_ratio_floor == 0.85
