import math

from pdserve.planner.core.policy import PlannerPolicy, PolicyConfig
from pdserve.planner.core.sim_hook import PlannerAutoscaler, observation_from_window
from pdserve.sim.autoscale import Autoscaler, PoolMetrics, PoolSizes, WindowMetrics

from capacity_profiles import queue_profile


def window(rate: float, *, ready=(1, 1), hit=0.2, ttft=None) -> WindowMetrics:
    pm = lambda r: PoolMetrics(ready=r, starting=0, draining=0, running=3, waiting=1, kv_usage=0.3, prefix_hit_ratio=hit)  # noqa: E731
    return WindowMetrics(start_s=0.0, end_s=10.0, arrivals=int(rate * 10), request_rate=rate,
                         mean_isl=1024.0 if rate else None, mean_osl=200.0 if rate else None, completions=5,
                         ttft_p50=ttft, ttft_p90=ttft, itl_p50=0.02, itl_p90=0.03,
                         prefill=pm(ready[0]), decode=pm(ready[1]))


def test_window_to_observation():
    o = observation_from_window(10.0, window(4.0, ready=(1, 2)), PoolSizes(2, 3))
    assert (o.prefill.replicas, o.prefill.ready, o.decode.replicas, o.decode.ready) == (2, 1, 3, 2)
    assert o.request_rate == 4.0 and o.mean_isl == 1024.0 and o.itl_tail_s == 0.03
    assert math.isnan(o.ttft_mean_s) and o.prefix_hit_ratio == 0.2 and o.waiting == 2 and o.window_s == 10.0


def test_autoscaler_hook_drives_the_policy():
    hook = PlannerAutoscaler(PlannerPolicy(PolicyConfig(interval_s=10, predictor="constant", prefill_max=64,
                                                        decode_max=64), queue_profile()))
    assert isinstance(hook, Autoscaler) and hook.interval_s == 10
    sizes = hook.on_tick(10.0, window(40.0), PoolSizes(1, 1))
    assert sizes.prefill > 1 and sizes.decode > 1
    idle = hook.on_tick(20.0, window(0.0), sizes)
    assert idle == sizes  # scale-down waits for the stabilisation window
    assert len(hook.decisions) == 2 and not hook.decisions[0].held


def test_the_peak_is_the_burst_series_at_the_planners_budget():
    from dataclasses import replace

    w = replace(window(4.0), prompt_tokens_peak_rate=18_000.0, prompt_tokens_burst={0.0: 90_000.0, 2.0: 54_000.0})
    assert observation_from_window(10.0, w, PoolSizes(1, 1)).router_prompt_tokens_peak == 18_000.0  # irate
    assert observation_from_window(10.0, w, PoolSizes(1, 1), 2.0).router_prompt_tokens_peak == 54_000.0
    assert observation_from_window(10.0, w, PoolSizes(1, 1), 0.0).router_prompt_tokens_peak == 90_000.0
    # the hook passes the policy's budget: a 90k/s burst held as reserve is 90k / saturated per replica
    hook = PlannerAutoscaler(PlannerPolicy(PolicyConfig(interval_s=10, predictor="constant", prefill_max=64,
                                                        decode_max=64, burst_budget_s=0.0), queue_profile()))
    hook.on_tick(10.0, w, PoolSizes(1, 1))
    assert hook.decisions[-1].explanation["inputs"]["router_prompt_tokens_peak"] == 90_000.0
