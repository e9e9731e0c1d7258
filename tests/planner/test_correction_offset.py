"""The latency correction takes the TTFT's fixed part (front ends, KV transfer, first decode step) off
before the ratio, measured in light-load windows (opt-in: PolicyConfig.correction_offset).

8B 1-GPU disaggregated (bench/planner): ~100 ms observed TTFT against the profile's 49 ms prefill at
light load, the ratio pinned at its 1.5 bound; the first tail near the SLO (a burst's queue) engaged
it on every term for correction_hold_s. The analytic profile here: one prefill replica moves 10k
tokens/s; a 1024-token prompt takes 102.4 ms alone, plus the M/D/1 wait rho x S / (2 (1 - rho)).
"""

import pytest
from capacity_profiles import queue_profile
from test_policy import obs

from pdserve.planner.core.correction import LatencyCorrection
from pdserve.planner.core.policy import PlannerPolicy, PolicyConfig

S_MS = 102.4  # 1024 tokens at 10k tokens/s
FIXED_MS = 60.0  # what the observed TTFT carries beyond the prefill, at every load


def expected_ms(rho: float) -> float:
    """The profile's TTFT at utilisation rho, on one of its own points (no interpolation)."""
    return S_MS + rho * S_MS / (2 * (1 - rho))


def window(rho: float, ttft_ms: float, tail_s: float = 0.2):
    # one ready replica, 1024-token prompts: rho x 10k tokens/s is rho x 9.765625 requests/s
    return obs(0, p=1, d=8, rate=rho * 10_000 / 1024, isl=1024.0, ttft_mean_s=ttft_ms / 1000, ttft_tail_s=tail_s)


def fed(learn: bool, windows) -> LatencyCorrection:
    corr = LatencyCorrection((0.67, 1.5), 0.8, 300.0, learn_offset=learn)
    for w in windows:
        corr.update(w, queue_profile(), 0.0)
    return corr


def test_the_fixed_part_is_not_read_as_a_slower_engine():
    # 4 light windows (rho 0.1: 108.09 ms expected, 168.09 seen), then 4 loaded ones (rho 0.8: 307.2 + 60)
    ws = [window(0.1, expected_ms(0.1) + FIXED_MS)] * 4 + [window(0.8, expected_ms(0.8) + FIXED_MS)] * 4
    assert expected_ms(0.1) == pytest.approx(108.0889, abs=1e-3) and expected_ms(0.8) == pytest.approx(307.2)
    before = fed(False, ws)
    # without the offset: 168.09 / 108.09 = 1.56 -> the 1.5 bound, then 367.2 / 307.2 = 1.1953; halfway each window
    light = 1.5 - 0.5 * 0.5 ** 4
    assert before.prefill == pytest.approx(1.1953125 + (light - 1.1953125) * 0.5 ** 4)
    after = fed(True, ws)
    assert after.ttft_offset_ms == pytest.approx(FIXED_MS)
    assert after.prefill == pytest.approx(1.0)
    # a tail near the SLO (a burst's queue) engages nothing: the engines are as fast as their profile
    assert after.factor("prefill", 1.9, 2000.0, now=0.0) == 1.0
    assert before.factor("prefill", 1.9, 2000.0, now=0.0) > 1.15


def test_a_really_slower_engine_is_still_corrected():
    # twice the profile's prefill time under load, on top of the same fixed part: ratio 2 -> the 1.5 bound
    ws = [window(0.1, expected_ms(0.1) + FIXED_MS)] * 4 + [window(0.8, 2 * expected_ms(0.8) + FIXED_MS)] * 6
    corr = fed(True, ws)
    assert corr.prefill == pytest.approx(1.5 - 0.5 * 0.5 ** 6)
    assert corr.factor("prefill", 1.9, 2000.0, now=0.0) == corr.prefill


def test_loaded_windows_do_not_move_the_offset_and_a_queue_tail_moves_it_little():
    # a light window can carry a burst's queue tail (+900 ms): the median of the light windows ignores one
    ws = [window(0.1, expected_ms(0.1) + FIXED_MS)] * 4 + [window(0.1, expected_ms(0.1) + 900.0)]
    ws += [window(0.8, expected_ms(0.8) + 500.0)] * 3  # loaded: no sample
    assert fed(True, ws).ttft_offset_ms == pytest.approx(FIXED_MS)


def test_below_one_is_not_applied_to_prefill_with_the_offset():
    # faster than the profile after the offset (p50 against a mean, the offset's noise): 1.0, not 0.8
    ws = [window(0.1, expected_ms(0.1) + FIXED_MS)] * 4 + [window(0.8, 0.6 * expected_ms(0.8) + FIXED_MS)] * 4
    corr = fed(True, ws)
    assert corr.prefill < 0.9
    assert corr.factor("prefill", 0.1, 2000.0, now=0.0) == 1.0
    assert fed(False, ws).factor("prefill", 0.1, 2000.0, now=0.0) < 1.0


def make(**kw) -> PlannerPolicy:
    cfg = PolicyConfig(**({"predictor": "constant", "interval_s": 10, "prefill_max": 32, "decode_max": 32,
                           "ttft_slo_ms": 1000, "itl_slo_ms": 50, "peak_window_s": 0} | kw))
    return PlannerPolicy(cfg, queue_profile())


def test_the_policy_option_is_opt_in_and_sizes_from_the_profile_once_the_offset_is_known():
    assert PolicyConfig().correction_offset is False
    # The client's TTFT, as before session 15 (the shipped correction reads the prefill pool's, which holds no
    # such fixed path: test_correction_pool_ttft).

    def run(pol: PlannerPolicy):
        d = None
        for t in range(0, 80, 10):  # 1 request/s of 1024 tokens on 8 prefill replicas: light; tail 0.9 s (near)
            d = pol.decide(obs(t, p=8, d=8, rate=1.0, ttft_mean_s=(expected_ms(0.0128) + FIXED_MS) / 1000,
                               ttft_tail_s=0.9, itl_mean_s=0.011, itl_tail_s=0.012), t)
        return d.explanation["capacity"]["prefillCorrection"]

    assert run(make(correction_pool_ttft=False)) > 1.45  # the fixed 60 ms read as a 1.5x slower engine
    assert run(make(correction_pool_ttft=False, correction_offset=True)) == 1.0
