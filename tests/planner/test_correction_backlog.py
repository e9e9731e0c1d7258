"""A backlog's wait is not read as a slower prefill engine (opt-in: PolicyConfig.correction_backlog_s).

A pool that was short queues requests; they complete with the queue's wait in their TTFT for up to a rate window after
the queue is gone, and the latency correction read that wait as the engine's speed: the ratio went to its 1.5 bound and
the tail the same backlog raised engaged it for the hold (bench/planner, held-out 70B Azure 4x from 600 s: five prefill
replicas held where the best schedule found runs two or three). The analytic profile (tests/planner/conftest.py): one
prefill replica moves 10k tokens/s; a 1024-token prompt takes 102.4 ms alone, plus the M/D/1 wait.
"""

import pytest
from capacity_profiles import queue_profile
from test_policy import obs

from pdserve.planner.core.correction import LatencyCorrection
from pdserve.planner.core.policy import PlannerPolicy, PolicyConfig

S_MS = 102.4


def expected_ms(rho: float) -> float:
    return S_MS + rho * S_MS / (2 * (1 - rho))


def window(t: float, engine_ms: float, waiting: float, p: int = 2):
    # per-replica load 0.5 of flat out: the profile expects 153.6 ms in a lone replica
    return obs(t, p=p, d=8, rate=0.5 * p * 10_000 / 1024, isl=1024.0, ttft_mean_s=engine_ms / 1000,
               ttft_tail_s=4.0, prefill_ttft_mean_s=engine_ms / 1000, prefill_waiting=waiting, waiting=waiting)


def fed(backlog_s, windows) -> LatencyCorrection:
    corr = LatencyCorrection((0.67, 1.5), 0.8, 300.0, pool_ttft=True, backlog_s=backlog_s)
    for w in windows:
        corr.update(w, queue_profile(), 0.0)
    return corr


# A cold start: 40 and then 5 requests queued at 2 ready replicas (more than one each), then none; the TTFT is the
# queue's (3 s, 2 s) and still 1.5 s in the two windows after the queue is gone, then the engine's own (as profiled).
COLD = [window(0, 3000, 40), window(30, 2000, 5), window(60, 1500, 0), window(90, 1500, 0)]
AFTER = [window(t, expected_ms(0.5), 0) for t in (120, 150, 180, 210)]


def test_the_backlog_s_wait_reads_as_a_slower_engine_without_it():
    corr = fed(None, COLD)
    assert corr.prefill > 1.45
    assert corr.factor("prefill", 4.0, 1000.0, now=90.0) == corr.prefill  # the tail engages it: 1.5x replicas


def test_with_it_the_ratio_is_left_alone_until_the_backlog_s_completions_are_gone():
    corr = fed(60.0, COLD)
    assert corr.prefill == 1.0  # last backlog at 30 s: 60 and 90 are within 60 s of it
    assert corr.factor("prefill", 4.0, 1000.0, now=90.0) == 1.0
    corr = fed(60.0, COLD + AFTER)
    assert corr.prefill == pytest.approx(1.0)  # then read: the engine as fast as its profile


def test_a_slower_engine_is_still_read_once_the_queue_is_gone():
    corr = fed(60.0, COLD + [window(t, 1.3 * expected_ms(0.5), 0) for t in (120, 150, 180, 210, 240, 250)])
    assert corr.prefill == pytest.approx(1.3 - 0.3 * 0.5 ** 6)


def test_a_queue_of_one_per_replica_is_no_backlog_and_an_unknown_queue_counts_as_none():
    corr = fed(60.0, [window(t, 1.3 * expected_ms(0.5), 2) for t in (0, 30, 60)])
    assert corr.prefill == pytest.approx(1.3 - 0.3 * 0.5 ** 3)
    unknown = [obs(t, p=2, d=8, rate=10_000 / 1024, isl=1024.0, prefill_ttft_mean_s=1.3 * expected_ms(0.5) / 1000,
                   waiting=float("nan")) for t in (0, 30, 60)]
    assert fed(60.0, unknown).prefill == pytest.approx(1.3 - 0.3 * 0.5 ** 3)


def test_the_policy_passes_it_with_its_release_threshold_and_refuses_a_negative_one():
    pol = PlannerPolicy(PolicyConfig(correction_backlog_s=120.0, release_queue_per_replica=3.0), queue_profile())
    assert (pol._corr.backlog_s, pol._corr.backlog_per_replica) == (120.0, 3.0)
    assert PolicyConfig().correction_backlog_s is None
    assert "below 0" in PolicyConfig(correction_backlog_s=-1.0).invalid()


def test_a_backlog_window_with_nothing_completed_still_counts():
    # the cold start's first window: 40 queued, no request completed yet (no rate, no TTFT); the windows after it
    # still carry its wait and are not read
    first = obs(0, p=2, d=8, rate=float("nan"), isl=1024.0, prefill_ttft_mean_s=float("nan"), prefill_waiting=40.0,
                waiting=40.0)
    corr = fed(60.0, [first, window(30, 3000, 0), window(60, 1500, 0)])
    assert corr.prefill == 1.0
