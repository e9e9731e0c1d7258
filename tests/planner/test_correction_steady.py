"""The latency correction read only from steady windows (opt-in: PolicyConfig.correction_steady_only).

A window whose prefill pool drained a backlog, or served part of it on fewer replicas, holds queueing the steady-state
profile does not model; the drain term already sizes for the backlog. With ``steady_only`` such a window, and the one
after it, leave the prefill ratio where it was. The analytic profile (tests/planner/conftest.py): one prefill replica
moves 10k tokens/s; a 1024-token prompt takes 102.4 ms alone, plus the M/D/1 wait rho x S / (2 (1 - rho)).
"""

import pytest
from capacity_profiles import queue_profile
from test_policy import obs

from pdserve.planner.core.correction import LatencyCorrection
from pdserve.planner.core.policy import PlannerPolicy, PolicyConfig

S_MS = 102.4


def expected_ms(rho: float) -> float:
    return S_MS + rho * S_MS / (2 * (1 - rho))


def window(engine_ms: float, waiting: float = 0.0, p: int = 1):
    # rho 0.5 per replica: 5k prompt tokens/s per ready replica
    return obs(0, p=p, d=8, rate=p * 0.5 * 10_000 / 1024, isl=1024.0, prefill_ttft_mean_s=engine_ms / 1000,
               ttft_mean_s=engine_ms / 1000, ttft_tail_s=0.2, waiting=waiting, prefill_waiting=waiting)


def fed(steady_only: bool, windows) -> LatencyCorrection:
    corr = LatencyCorrection((0.67, 1.5), 0.8, 300.0, pool_ttft=True, steady_only=steady_only)
    for w in windows:
        corr.update(w, queue_profile(), 0.0)
    return corr


def test_a_backlog_window_and_the_one_after_leave_the_ratio():
    slow = 2 * expected_ms(0.5)  # a backlog doubled the engines' mean TTFT
    ws = [window(expected_ms(0.5))] * 2 + [window(slow, waiting=5.0), window(slow)]
    assert fed(False, ws).prefill == pytest.approx(1.375)  # 2.0 clipped to the bound 1.5, halfway twice: 1.25, 1.375
    assert fed(True, ws).prefill == pytest.approx(1.0)


def test_steady_windows_still_move_it():
    ws = [window(expected_ms(0.5))] + [window(1.2 * expected_ms(0.5))] * 2
    corr = fed(True, ws)
    # the first window has no previous one to vouch for it: only the second and third are read, halfway each
    assert corr.prefill == pytest.approx(1 + 0.2 * 0.5 + 0.1 * 0.5)


def test_a_change_of_ready_replicas_is_not_steady():
    ws = [window(expected_ms(0.5), p=1)] * 2 + [window(1.2 * expected_ms(0.5), p=2)]
    assert fed(True, ws).prefill == pytest.approx(1.0)
    assert fed(True, [*ws, window(1.2 * expected_ms(0.5), p=2)]).prefill == pytest.approx(1.1)


def test_the_policy_passes_the_setting():
    pol = PlannerPolicy(PolicyConfig(correction_steady_only=True), queue_profile())
    assert pol._corr.steady_only and not PlannerPolicy(PolicyConfig(), queue_profile())._corr.steady_only
