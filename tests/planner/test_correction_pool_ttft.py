"""The latency correction's prefill ratio from the prefill engines' own TTFT (opt-in: PolicyConfig.correction_pool_ttft).

The prefill profile models one prefill engine: its TTFT at a load. The client's TTFT also holds the KV transfer, the
hand-off and the decode side's front end and first step, which the profile does not model and which do not scale with
prefill capacity (8B 1-GPU disaggregated, bench/planner: ~100 ms observed against the profile's 49 ms at light load, the
ratio pinned at its 1.5 bound; 70B TP4 Azure x4: client TTFT p50 590-730 ms at 150-210 s where the prefill engines
answered in 205-233 ms). The analytic profile here (tests/planner/conftest.py): one prefill replica moves 10k tokens/s; a
1024-token prompt takes 102.4 ms alone, plus the M/D/1 wait rho x S / (2 (1 - rho)).
"""

import math
from dataclasses import replace

import pytest
from capacity_profiles import queue_profile
from test_policy import obs
from test_sim_hook import window as sim_window

from pdserve.planner.core.correction import LatencyCorrection
from pdserve.planner.core.policy import PlannerPolicy, PolicyConfig
from pdserve.planner.core.sim_hook import observation_from_window
from pdserve.sim.autoscale import PoolSizes

S_MS = 102.4  # 1024 tokens at 10k tokens/s
PATH_MS = 80.0  # the client's TTFT beyond the prefill engine's: transfer, hand-off, decode front end and first step


def expected_ms(rho: float) -> float:
    return S_MS + rho * S_MS / (2 * (1 - rho))


def window(rho: float, engine_ms: float | None, tail_s: float = 0.2):
    engine = math.nan if engine_ms is None else engine_ms / 1000
    return obs(0, p=1, d=8, rate=rho * 10_000 / 1024, isl=1024.0, ttft_mean_s=(engine_ms or expected_ms(rho)) / 1000
               + PATH_MS / 1000, ttft_tail_s=tail_s, prefill_ttft_mean_s=engine)


def fed(pool: bool, windows) -> LatencyCorrection:
    corr = LatencyCorrection((0.67, 1.5), 0.8, 300.0, pool_ttft=pool)
    for w in windows:
        corr.update(w, queue_profile(), 0.0)
    return corr


def test_the_ratio_reads_the_prefill_engines_ttft():
    # the engines as fast as their profile; the client's TTFT 80 ms more at every load
    ws = [window(0.1, expected_ms(0.1))] * 3 + [window(0.8, expected_ms(0.8))] * 3
    before = fed(False, ws)
    # client: (108.09 + 80) / 108.09 = 1.74 -> the 1.5 bound, then (307.2 + 80) / 307.2 = 1.2604; halfway per window
    light = 1.5 - 0.5 * 0.5 ** 3
    assert before.prefill == pytest.approx(387.2 / 307.2 + (light - 387.2 / 307.2) * 0.5 ** 3)
    after = fed(True, ws)
    assert after.prefill == pytest.approx(1.0)
    assert after.factor("prefill", 1.9, 2000.0, now=0.0) == 1.0  # a tail near the SLO engages nothing
    assert before.factor("prefill", 1.9, 2000.0, now=0.0) > 1.2


def test_a_slower_engine_is_corrected_by_its_own_ratio():
    # the engine 1.3x its profile under load: 399.36 ms against 307.2
    corr = fed(True, [window(0.8, 1.3 * expected_ms(0.8))] * 8)
    assert corr.prefill == pytest.approx(1.3 - 0.3 * 0.5 ** 8)
    assert corr.factor("prefill", 1.9, 2000.0, now=0.0) == corr.prefill
    # faster than the profile (the M/M/1 over-states the wait at high load): left unapplied, as with the other fixes
    fast = fed(True, [window(0.8, 0.7 * expected_ms(0.8))] * 8)
    assert fast.prefill < 0.75 and fast.factor("prefill", 1.9, 2000.0, now=0.0) == 1.0


def test_without_the_engines_ttft_the_window_leaves_the_ratio_alone():
    # a window where no prefill completed (NaN) does not fall back to the client's TTFT
    corr = fed(True, [window(0.8, expected_ms(0.8))] * 2 + [window(0.8, None)] * 3)
    assert corr.prefill == pytest.approx(1.0)


def test_the_simulator_hook_passes_the_prefill_engines_ttft():
    w = replace(sim_window(4.0, ttft=0.5), prefill_ttft_mean=0.12, prefill_ttft_p90=0.3)
    o = observation_from_window(10.0, w, PoolSizes(1, 1))
    assert (o.prefill_ttft_mean_s, o.prefill_ttft_tail_s, o.ttft_mean_s) == (0.12, 0.3, 0.5)


def _policy_correction(slower: float = 1.0, engine_tail_s: float = math.nan, **kw) -> float:
    """The prefill correction the policy applies after 80 s of 1 request/s of 1024 tokens on 8 prefill replicas
    (light), the engines ``slower`` times their profile, the client's TTFT 80 ms more and its tail 0.9 s (near the
    1 s SLO: engage at 0.8 s), the engines' own tail ``engine_tail_s`` (NaN: unknown)."""
    pol = PlannerPolicy(PolicyConfig(**({"predictor": "constant", "interval_s": 10, "prefill_max": 32,
                                         "decode_max": 32, "ttft_slo_ms": 1000, "itl_slo_ms": 50,
                                         "peak_window_s": 0} | kw)), queue_profile())
    d = None
    for t in range(0, 80, 10):
        d = pol.decide(obs(t, p=8, d=8, rate=1.0, ttft_mean_s=(slower * expected_ms(0.0128) + PATH_MS) / 1000,
                           prefill_ttft_mean_s=slower * expected_ms(0.0128) / 1000, ttft_tail_s=0.9,
                           prefill_ttft_tail_s=engine_tail_s, itl_mean_s=0.011, itl_tail_s=0.012), t)
    return d.explanation["capacity"]["prefillCorrection"]


def test_the_policy_option_is_on_by_default():
    # Shipped since session 15 (bench/planner planner_next2, results/diagnosis/planner_next3.json).
    assert PolicyConfig().correction_pool_ttft is True
    run = _policy_correction

    assert run(correction_pool_ttft=False) > 1.45  # the client's 80 ms path read as a 1.5x slower engine
    assert run(prefill_ratio_floor=None) == 1.0
    # since session 25 a ratio under 1 applies (prefill_ratio_floor): the engines here answer at M/D/1's light-load
    # TTFT, a little under what the analytic profile's pool of 8 expects
    assert 0.85 < run() < 1.0


def test_the_hosted_planner_derives_a_profile_that_holds_the_front_end():
    """The correction compares the prefill pods' TTFT, front end included, with the profile: the operator's
    planner derives its profile likewise (and without it where the correction reads the client's TTFT)."""
    from pdserve.planner.core.profile_model import derive_profile
    from pdserve.planner.core.spec_config import HostedSettings, load_profile_for

    def hosted(cfg: PolicyConfig):
        return load_profile_for(HostedSettings(cfg, "http://127.0.0.1:9090", True, "llama-3.1-8b-h100", None), "ns")

    front = derive_profile("llama-3.1-8b-h100", prefill_tp=1, decode_tp=1, include_frontend=True)
    bare = derive_profile("llama-3.1-8b-h100", prefill_tp=1, decode_tp=1)
    assert front.prefill != bare.prefill
    assert hosted(PolicyConfig()).prefill == front.prefill
    assert hosted(PolicyConfig(correction_pool_ttft=False)).prefill == bare.prefill


def test_the_prefill_ratio_engages_on_the_engines_own_tail_with_correction_engage_pool():
    """correction_engage_pool: a client tail near the SLO whose prefill engines answered well within it (the KV link's
    or decode's wait, which no prefill replica shortens) does not engage the prefill ratio; the engines' own tail near
    the SLO does, and an unknown engine tail falls back to the client's, as before."""

    def run(engine_tail_s: float, **kw) -> float:  # the engines 1.5x their profile
        return _policy_correction(1.5, engine_tail_s, **kw)

    assert PolicyConfig().correction_engage_pool is False
    assert run(0.3) > 1.3  # before: the client's tail engages the engines' ratio
    assert run(0.3, correction_engage_pool=True) == 1.0  # the engines answered in 0.3 s: nothing to correct
    assert run(0.85, correction_engage_pool=True) == pytest.approx(run(0.3))  # their own tail near the SLO engages
    assert run(math.nan, correction_engage_pool=True) == pytest.approx(run(0.3))  # unknown: the client's, as before
    assert run(0.3, correction_engage_pool=True, correction_pool_ttft=False) == pytest.approx(
        run(0.3, correction_pool_ttft=False))  # only where the ratio is read from the engines' TTFT
