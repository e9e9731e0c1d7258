"""The decode latency ratio's own bounds and its line in the load (PolicyConfig.correction_bounds_decode and
correction_decode_curve, shipped since session 28).

The analytic profile (tests/planner/conftest.py, capacity_profiles.queue_profile); the engine here decodes three times
slower than it: the shipped bounds hold the decode ratio at 1.5, decode bounds of (0.67, 4) let it read 3, and the
prefill ratio keeps the shared bounds either way."""

import pytest
from capacity_profiles import queue_profile
from test_policy import obs

from pdserve.planner.core.correction import LatencyCorrection
from pdserve.planner.core.policy import PlannerPolicy, PolicyConfig


def slow_decode_windows(n: int = 12):
    prof = queue_profile()
    exp_itl = prof.expected_itl_ms(1024 + 100, 10.0 * 200 / 4)  # 10 req/s x 200 tokens over 4 decode replicas
    exp_ttft = prof.expected_ttft_ms(1024.0, 10.0 * 1024 / 4, 1)
    return [obs(0, p=4, d=4, rate=10.0, isl=1024.0, osl=200.0, itl_mean_s=3 * exp_itl / 1000, itl_tail_s=0.04,
                ttft_mean_s=3 * exp_ttft / 1000, ttft_tail_s=0.9)] * n


def fed(**kw) -> LatencyCorrection:
    corr = LatencyCorrection((0.67, 1.5), 0.8, 300.0, **kw)
    for w in slow_decode_windows():
        corr.update(w, queue_profile(), 0.0)
    return corr


def test_the_decode_ratio_reads_up_to_its_own_bound():
    shipped, wide = fed(), fed(decode_bounds=(0.67, 4.0))
    assert shipped.decode == pytest.approx(1.5, rel=1e-3) and wide.decode == pytest.approx(3.0, rel=1e-3)
    assert shipped.prefill == pytest.approx(1.5, rel=1e-3) and wide.prefill == pytest.approx(1.5, rel=1e-3)
    assert wide.factor("decode", float("nan"), 50.0, now=0.0) == pytest.approx(3.0, rel=1e-3)


def test_the_policy_passes_them_and_refuses_bounds_without_one():
    assert PlannerPolicy(PolicyConfig(correction_bounds_decode=(0.67, 4.0)), queue_profile())._corr.decode_bounds == (
        0.67, 4.0)
    assert PlannerPolicy(PolicyConfig(), queue_profile())._corr.decode_bounds == (0.67, 4.0)  # shipped
    none = PolicyConfig(correction_bounds_decode=None)  # the shared bounds, named once by the config
    assert none.decode_correction_limits == none.correction_bounds
    assert PlannerPolicy(none, queue_profile())._corr.decode_limits == none.correction_bounds
    assert "decode correction bounds" in (PolicyConfig(correction_bounds_decode=(1.2, 4.0)).invalid() or "")
    assert PolicyConfig(correction_bounds_decode=(0.5, 4.0)).invalid() is None


def test_the_decode_ratio_as_a_line_in_the_load():
    corr = LatencyCorrection((0.67, 1.5), 0.8, 300.0, decode_bounds=(0.67, 4.0), decode_curve=True)
    assert corr.decode_ratio_at(100.0) is None  # no windows yet
    # ratio = 0.5 + 0.001 x at loads 500..3000 tokens/s per replica
    for x, y in [(x, 0.5 + 0.001 * x) for x in (500.0, 1000.0, 1500.0, 2000.0, 2500.0, 3000.0)]:
        corr.record_decode(x, y)
    assert corr.decode_ratio_at(1000.0) == pytest.approx(1.5)
    assert corr.decode_ratio_at(2000.0) == pytest.approx(2.5)
    assert corr.decode_ratio_at(10_000.0) == 4.0 and corr.decode_ratio_at(0.0) == pytest.approx(0.67)  # bounded
    flat = LatencyCorrection((0.67, 1.5), 0.8, 300.0, decode_curve=True)
    for x, y in [(x, 1.2 - 0.0001 * x) for x in (500.0, 1000.0, 1500.0, 2000.0, 2500.0, 3000.0)]:
        flat.record_decode(x, y)
    assert flat.decode_ratio_at(1000.0) is None  # a ratio falling with load is noise, not a batch cost
    narrow = LatencyCorrection((0.67, 1.5), 0.8, 300.0, decode_curve=True)
    for x, y in [(x, 1.0 + 0.001 * x) for x in (1000.0, 1100.0, 1200.0, 1000.0, 1100.0, 1200.0)]:
        narrow.record_decode(x, y)
    assert narrow.decode_ratio_at(1000.0) is None  # loads within 1.5x of each other: no line


def test_the_pool_is_sized_where_the_profile_times_the_ratio_at_that_load_meets_the_slo():
    pol = PlannerPolicy(PolicyConfig(correction_bounds_decode=(0.67, 4.0), correction_decode_curve=True),
                        queue_profile())
    prof, slo, ctx = pol.profile, pol.config.itl_slo_ms, 1124.0
    for x, y in [(x, 0.5 + 0.001 * x) for x in (500.0, 1000.0, 1500.0, 2000.0, 2500.0, 3000.0)]:
        pol._corr.record_decode(x, y)
    x = pol._curved_decode_capacity(ctx)
    assert x is not None and 0 < x < prof.decode_capacity(ctx, slo)
    # at x the profile's capacity at SLO / ratio(x) is x itself (the fixed point), up to the bisection's resolution
    assert prof.decode_capacity(ctx, slo / pol._corr.decode_ratio_at(x)) == pytest.approx(x, rel=1e-3)
    assert PlannerPolicy(PolicyConfig(correction_decode_curve=False), queue_profile())._curved_decode_capacity(ctx) is None
