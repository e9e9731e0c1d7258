"""The prefill queue's projection counts replicas still starting only from when they are ready (PolicyConfig.drain_starting,
the default since session 32). Read as moving tokens all along, three replicas requested at a cold start's first tick
"drained" the queue at the next one while one replica served it (bench/planner, 70B Azure 4x: 430 prompts queued at
60 s, drain term 0, 701 queued by 90 s and misses until 180 s)."""

import pytest
from capacity_profiles import queue_profile
from test_policy import obs

from pdserve.planner.core.lookahead import Ramp, moving_replicas
from pdserve.planner.core.observation import PoolState
from pdserve.planner.core.policy import PlannerPolicy, PolicyConfig
from pdserve.planner.core.sizing import Capacity, Load, size

CAP = Capacity(prefill_slo=8_500, prefill_saturated=12_000, decode_slo=100_000, link=None)


def test_replicas_still_starting_move_nothing_until_ready():
    # 300,000 queued, 30,000 tokens/s arriving, 3 replicas of which 1 ready and 2 ready in 30 s (moving half of
    # the next 60 s): 1 + 2 x 0.5 = 2 replica-equivalents move 24,000/s, so the queue grows by 6,000 x 60 to
    # 660,000, gone within 30 s: 660,000 / 30 + 30,000 = 52,000 tokens/s -> 4.33 replicas.
    load = Load(rate=30, isl=1000, osl=10, prefill_queue_tokens=300_000, prefill_replicas=3, decode_replicas=1,
                arriving_prompt_tokens=30_000, prefill_moving=2.0)
    t = size(load, CAP, drain_s=30, startup_s=60)
    assert t.prefill_drain == pytest.approx(52_000 / 12_000) and t.prefill == 5
    # read as all three moving all along (None, as before): 36,000/s, the queue shrinks to 0, no drain term
    before = size(Load(**{**load.__dict__, "prefill_moving": None}), CAP, drain_s=30, startup_s=60)
    assert before.prefill_drain == 0.0 and before.prefill == 4  # the compute term alone: 30,000 / 8,500


def policy(**kw) -> PlannerPolicy:
    return PlannerPolicy(PolicyConfig(**({"predictor": "constant", "interval_s": 30, "startup_s": 60,
                                          "correction": False} | kw)), queue_profile())


def test_the_policy_counts_its_own_last_rise():
    pol = policy(drain_starting=True)
    first = pol.decide(obs(0, p=1, d=1, rate=20.0, prefill_waiting=100.0, waiting=100.0), now=0)
    assert first.prefill > 1  # raised at 0 s
    # 30 s later: one replica ready, the rest half way through their 60 s start-up
    later = obs(30, p=first.prefill, d=first.decode, p_ready=1, d_ready=first.decode, rate=20.0)
    assert pol._prefill_moving(later, 30.0) == pytest.approx(1 + (first.prefill - 1) * 0.5)
    # all ready: the ready count; the option off: None (the projection reads the replica count, as before)
    ready = obs(90, p=first.prefill, d=first.decode, rate=20.0)
    assert pol._prefill_moving(ready, 90.0) == first.prefill
    assert policy(drain_starting=False)._prefill_moving(later, 30.0) is None
    assert PolicyConfig().drain_starting is True  # the default since session 32


def test_a_ramp_continues_the_floor_over_the_projection():
    # prompt tokens/s rose at each of the last two ticks (10k -> 12k -> 15k over 60 s: 83.3/s): the floor is
    # 15k + 83.3 x 30 = 17.5k; a tick that did not rise ends the ramp, and so does a missing reading
    ramp = Ramp(ticks=2, projection_s=30.0)
    for t, tok in ((0, 10_000.0), (30, 12_000.0), (60, 15_000.0)):
        ramp.record(float(t), tok)
    assert ramp.rise() == pytest.approx(5_000 / 60 * 30)
    ramp.record(90.0, 14_000.0)
    assert ramp.rise() == 0.0
    for t, tok in ((120, 16_000.0), (150, 17_000.0), (180, float("nan"))):
        ramp.record(float(t), tok)
    assert ramp.rise() == 0.0 and not ramp.readings
    # the policy keeps one only with the setting, and plans the rise into the observed floor
    pol = policy(ramp_projection_s=30.0, ramp_ticks=2)
    for t, tok in ((0, 10_000.0), (30, 12_000.0), (60, 15_000.0)):
        d = pol.decide(obs(t, p=4, d=4, rate=10.0, isl=1000.0, router_prompt_tokens_rate=tok), now=float(t))
    assert d.explanation["demand"]["prefillTokensPerS"] == pytest.approx(15_000 + 5_000 / 60 * 30)
    assert policy()._s.ramp is None and PolicyConfig().ramp_projection_s is None
    assert "below 1" in PolicyConfig(ramp_ticks=0).invalid()


def test_moving_replicas_reads_ready_starting_and_pending():
    # 5 replicas: 2 ready, 1 pending (cannot start), 2 starting since 15 s ago of a 60 s start-up -> 2 + 2 x 0.25
    assert moving_replicas(PoolState(5, ready=2, pending=1), 85.0, 100.0, 60.0) == pytest.approx(2.5)
    assert moving_replicas(PoolState(5, ready=2, pending=1), None, 100.0, 60.0) == 2.0  # rise unknown: not yet
    assert moving_replicas(PoolState(3), 0.0, 100.0, 60.0) == 3.0  # ready unknown: all ready
