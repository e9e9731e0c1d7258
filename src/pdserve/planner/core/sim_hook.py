"""The simulator's autoscaler hook, wrapping the same PlannerPolicy the live planner runs.

``PlannerAutoscaler(policy)`` satisfies ``pdserve.sim.autoscale.Autoscaler``: each
tick the simulator's ``WindowMetrics`` become an ``Observation`` (the metric-source
side) and the decision becomes ``PoolSizes`` (the actuator side). Every decision is
kept in ``decisions`` for plots and reports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pdserve.planner.core.decision import ScalingDecision
from pdserve.planner.core.observation import Observation, PoolState
from pdserve.planner.core.policy import PlannerPolicy
from pdserve.sim.autoscale import PoolMetrics, PoolSizes, WindowMetrics


def _f(x: float | None) -> float:
    return math.nan if x is None else float(x)


def observation_from_window(now: float, window: WindowMetrics, current: PoolSizes,
                            burst_budget_s: float | None = None, burst_fit_budget_s: float | None = None) -> Observation:
    """Simulator window -> planner observation.

    The window holds what Prometheus would (completed requests, scraped counters,
    see :mod:`pdserve.sim.windows`), so the policy gets no future knowledge here.
    The simulator reports p50/p90 over the window's completions; p50 stands in for
    the mean (the profile's mean latency) and p90 for the tail. Instances still
    starting are not ``pending`` in the Kubernetes sense (they will become ready),
    so the pending cap never fires in simulation. The peak is the router's burst gauge
    at ``burst_budget_s`` where the window has that series, as the live queries read it,
    and the wide peak the series at ``burst_fit_budget_s``.
    """
    def pool(size: int, m: PoolMetrics) -> PoolState:
        return PoolState(replicas=size, ready=m.ready)

    peak = window.prompt_tokens_peak_rate
    if burst_budget_s is not None and burst_budget_s in window.prompt_tokens_burst:
        peak = window.prompt_tokens_burst[burst_budget_s]
    wide = window.prompt_tokens_burst.get(burst_fit_budget_s, math.nan) if burst_fit_budget_s is not None else math.nan
    hit = window.prefill.prefix_hit_ratio
    if hit is None:
        hit = window.decode.prefix_hit_ratio
    return Observation(
        timestamp=now,
        prefill=pool(current.prefill, window.prefill),
        decode=pool(current.decode, window.decode),
        window_s=window.end_s - window.start_s,
        request_rate=window.request_rate,
        mean_isl=_f(window.mean_isl),
        mean_osl=_f(window.mean_osl),
        ttft_mean_s=_f(window.ttft_p50),
        ttft_tail_s=_f(window.ttft_p90),
        prefill_ttft_mean_s=_f(window.prefill_ttft_mean),
        prefill_ttft_tail_s=_f(window.prefill_ttft_p90),
        itl_mean_s=_f(window.itl_p50),
        itl_tail_s=_f(window.itl_p90),
        running=float(window.prefill.running + window.decode.running),
        waiting=float(window.prefill.waiting + window.decode.waiting),
        prefill_waiting=float(window.prefill.waiting),
        decode_waiting=float(window.decode.waiting),
        kv_usage=window.decode.kv_usage,
        prefix_hit_ratio=_f(hit),
        router_prompt_tokens_rate=_f(window.prompt_tokens_rate),
        router_prompt_tokens_peak=_f(peak),
        router_prompt_tokens_peak_wide=_f(wide),
        router_inflight=float(window.inflight),
    )


@dataclass
class PlannerAutoscaler:
    policy: PlannerPolicy
    decisions: list[ScalingDecision] = field(default_factory=list)

    @property
    def interval_s(self) -> float:
        return self.policy.interval_s

    def on_tick(self, now: float, window: WindowMetrics, current: PoolSizes) -> PoolSizes:
        cfg = self.policy.config
        obs = observation_from_window(now, window, current, cfg.burst_budget_s, cfg.burst_fit_budget_s)
        decision = self.policy.decide(obs, now)
        self.decisions.append(decision)
        return PoolSizes(prefill=decision.prefill, decode=decision.decode)
