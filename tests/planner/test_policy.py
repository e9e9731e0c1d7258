import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdserve.planner.core import decision as D
from pdserve.planner.core.observation import Observation, PoolState
from pdserve.planner.core.policy import PlannerPolicy, PolicyConfig
from pdserve.planner.core.predictors import Forecast

from capacity_profiles import queue_profile


def obs(t, p=1, d=1, rate=10.0, isl=1024.0, osl=200.0, **kw):
    kw.setdefault("waiting", 0.0)  # an unknown queue blocks every scale-down
    return Observation(timestamp=t, prefill=PoolState(p, kw.pop("p_ready", None), kw.pop("p_pending", 0)),
                       decode=PoolState(d, kw.pop("d_ready", None), kw.pop("d_pending", 0)),
                       request_rate=rate, mean_isl=isl, mean_osl=osl, **kw)


def make(**kw):
    cfg = PolicyConfig(**({"predictor": "constant", "interval_s": 10, "prefill_max": 32, "decode_max": 32,
                           "scale_down_stabilization_s": 60, "ttft_slo_ms": 1000, "itl_slo_ms": 50,
                           "correction": False} | kw))
    return PlannerPolicy(cfg, queue_profile())


def test_sizes_each_pool_from_the_profile():
    pol = make()
    # 8P8D now: enough that nothing queues before a change takes effect (no drain term).
    d = pol.decide(obs(0, p=8, d=8, rate=40.0), now=0)
    cfg, prof = pol.config, pol.profile
    cap_p = prof.prefill_capacity(1024, 1000) * cfg.target_utilization
    cap_d = prof.decode_capacity(1124, 50) * cfg.target_utilization
    assert (d.prefill, d.decode) == (math.ceil(40 * 1024 / cap_p), math.ceil(40 * 200 / cap_d))
    assert not d.held and d.prefill > 1 and d.decode > 1
    ex = d.explanation
    assert {"inputs", "forecast", "capacity", "demand", "result"} <= ex.keys()
    assert ex["result"] == {"prefill": d.prefill, "decode": d.decode}
    assert d.to_status()["prefillReplicas"] == d.prefill


def test_prefix_hits_reduce_prefill_only():
    a = make().decide(obs(0, rate=40.0), 0)
    b = make().decide(obs(0, rate=40.0, prefix_hit_ratio=0.5), 0)
    assert b.prefill < a.prefill and b.decode == a.decode


def test_correction_raises_replicas_when_slower_than_profile():
    base = make(correction=True).decide(obs(0, p=8, d=8, rate=40.0), 0)
    slow = make(correction=True)
    for t in range(0, 50, 10):  # observed ITL 3x the profile's: decode capacity is over-stated
        dd = slow.decide(obs(t, p=8, d=8, rate=40.0, itl_mean_s=0.1, ttft_mean_s=0.05), t)
    assert dd.decode > base.decode
    assert dd.explanation["capacity"]["decodeCorrection"] > 1.3


@pytest.mark.parametrize("o,key", [
    (dict(rate=math.nan), D.HOLD_MISSING),
    (dict(isl=math.nan), D.HOLD_MISSING),
    (dict(error="connection refused"), D.HOLD_ERROR),
    (dict(isl=50_000.0), D.HOLD_UNCOVERED),
])
def test_holds_on_bad_data(o, key):
    pol = make()
    d = pol.decide(obs(0, p=5, d=7, **o), 0)
    assert d.held and d.hold_key == key and (d.prefill, d.decode) == (5, 7)
    assert d.reason.startswith("held:")


def test_holds_on_stale_metrics():
    d = make().decide(obs(0, p=3, d=3, rate=0.0), now=100)
    assert d.held and d.hold_key == D.HOLD_STALE and "100s old" in d.reason


def test_holds_on_invalid_bounds():
    d = make(prefill_min=4, prefill_max=2).decide(obs(0, p=3, d=3), 0)
    assert d.held and d.hold_key == D.HOLD_INVALID and "prefill min 4 > max 2" in d.reason


def test_holds_on_slo_unattainable():
    d = make(ttft_slo_ms=50).decide(obs(0, p=2, d=2, isl=4096.0), 0)
    assert d.held and d.hold_key == D.HOLD_UNATTAINABLE


class Exploding:
    name = "exploding"

    def predict(self, history, steps=1):
        return Forecast(12.0, "exploding", exploded=True, raw=1e12)


def test_holds_on_exploding_forecast():
    pol = PlannerPolicy(PolicyConfig(interval_s=10), queue_profile(), predictor=Exploding())
    d = pol.decide(obs(0, p=2, d=2), 0)
    assert d.held and d.hold_key == D.HOLD_EXPLODED and "1e+12" in d.reason


def test_scale_down_waits_for_the_stabilisation_window():
    pol = make(scale_down_stabilization_s=60)
    up = pol.decide(obs(0, rate=40.0), 0)
    cur = (up.prefill, up.decode)
    for t in (10, 30, 50):
        d = pol.decide(obs(t, *cur, rate=1.0), t)
        assert (d.prefill, d.decode) == cur and "stabilised" in d.reason
    d = pol.decide(obs(70, *cur, rate=1.0), 70)
    assert d.prefill < cur[0] and d.decode < cur[1]


def test_pending_pods_stop_further_scale_up():
    pol = make(pending_timeout_s=30)
    d0 = pol.decide(obs(0, p=2, d=2, rate=40.0, d_ready=1, d_pending=1), 0)
    assert d0.decode > 2  # not pending long yet
    d1 = pol.decide(obs(40, p=2, d=2, rate=40.0, d_ready=1, d_pending=1), 40)
    assert d1.decode == 2 and d1.limited and "decode: 1 pod(s) pending" in d1.reason
    assert d1.prefill > 2  # the other pool is unaffected


def test_gpu_budget_shared_between_pools():
    pol = make(gpu_budget=10, prefill_tp=2, decode_tp=1)
    d = pol.decide(obs(0, rate=200.0), 0)
    assert d.prefill * 2 + d.decode <= 10 and d.limited and "GPU budget 10" in d.reason
    assert d.prefill >= 1 and d.decode >= 1


def test_scale_to_zero_and_wake_up():
    pol = make(scale_to_zero=True, idle_before_zero_s=30, prefill_min=1, decode_min=1, scale_down_stabilization_s=0)
    assert not pol.decide(obs(0, rate=5.0), 0).held
    d = pol.decide(obs(10, rate=0.0), 10)
    assert (d.prefill, d.decode) == (1, 1)
    d = pol.decide(obs(40, rate=0.0), 40)
    assert (d.prefill, d.decode) == (0, 0) and "scale to zero" in d.reason
    # At zero, workers export nothing: rate is unknown, the router's queue is the signal.
    d = pol.decide(obs(50, p=0, d=0, rate=math.nan), 50)
    assert (d.prefill, d.decode) == (0, 0) and not d.held
    d = pol.decide(obs(60, p=0, d=0, rate=math.nan, waiting=1.0), 60)
    assert (d.prefill, d.decode) == (1, 1) and "wake-up" in d.reason


nan_or = lambda s: st.one_of(st.just(math.nan), s)  # noqa: E731


@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(st.tuples(nan_or(st.floats(0, 500)), nan_or(st.floats(64, 8000)), nan_or(st.floats(1, 2000)),
                             st.booleans()), min_size=1, max_size=12),
    budget=st.integers(2, 40), tp_p=st.integers(1, 4), tp_d=st.integers(1, 4),
    start=st.tuples(st.integers(1, 10), st.integers(1, 10)),
)
def test_property_budget_never_exceeded(steps, budget, tp_p, tp_d, start):
    pol = make(gpu_budget=budget, prefill_tp=tp_p, decode_tp=tp_d, prefill_min=1, decode_min=1)
    cur = start
    for i, (rate, isl, osl, err) in enumerate(steps):
        t = 10.0 * i
        d = pol.decide(obs(t, *cur, rate=rate, isl=isl, osl=osl, error="boom" if err else None), t)
        if tp_p + tp_d <= budget:
            assert d.prefill * tp_p + d.decode * tp_d <= budget, d.reason
        else:
            assert d.held and d.hold_key == D.HOLD_INVALID
        cur = (d.prefill, d.decode)


@settings(max_examples=150, deadline=None)
@given(
    history=st.lists(st.floats(0.5, 300), min_size=0, max_size=8),
    bad=st.sampled_from(["nan-rate", "nan-isl", "error", "stale"]),
    start=st.tuples(st.integers(1, 20), st.integers(1, 20)),
)
def test_property_never_scale_down_on_missing_data(history, bad, start):
    pol = make(scale_down_stabilization_s=0)
    cur = start
    for i, r in enumerate(history):
        d = pol.decide(obs(10.0 * i, *cur, rate=r), 10.0 * i)
        cur = (d.prefill, d.decode)
    t = 10.0 * len(history)
    kw = {"nan-rate": dict(rate=math.nan), "nan-isl": dict(rate=5.0, isl=math.nan),
          "error": dict(error="down"), "stale": dict()}[bad]
    d = pol.decide(obs(t - (1000 if bad == "stale" else 0), *cur, **kw), t)
    assert d.held and d.prefill >= cur[0] and d.decode >= cur[1]


def test_correction_waits_until_latency_nears_the_slo():
    relaxed = make(correction=True)
    for t in range(0, 50, 10):  # 3x slower than the profile, but the tail is far below the 50 ms SLO
        d = relaxed.decide(obs(t, p=8, d=8, rate=40.0, itl_mean_s=0.02, itl_tail_s=0.025), t)
    cap = d.explanation["capacity"]
    assert cap["decodeLatencyRatio"] > 1.3 and cap["decodeCorrection"] == 1.0


def test_wake_up_from_the_routers_signal():
    pol = make(scale_to_zero=True, prefill_min=0, decode_min=0)
    d = pol.decide(Observation(timestamp=0, prefill=PoolState(0), decode=PoolState(0), router_inflight=0.0), 0)
    assert (d.prefill, d.decode) == (0, 0)
    d = pol.decide(Observation(timestamp=5, prefill=PoolState(0), decode=PoolState(0), router_request_rate=0.5), 5)
    assert (d.prefill, d.decode) == (1, 1) and "wake-up" in d.reason


def test_backlog_adds_prefill_demand():
    calm = make().decide(obs(0, rate=20.0, waiting=0.0), 0)
    # 600 queued x 1024 tokens over the drain time (start-up 60 s + TTFT 1 s), flat out
    queued = make().decide(obs(0, rate=20.0, waiting=600.0), 0)
    assert queued.prefill > calm.prefill and queued.decode == calm.decode
    assert queued.explanation["demand"]["prefillQueueTokens"] == 600.0 * 1024
    assert queued.explanation["demand"]["terms"]["binding_prefill"] == "drain"
