"""Baselines: a KEDA/HPA-style reactive autoscaler and the smallest static size that meets the SLO."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pdserve.sim.autoscale import PoolSizes, WindowMetrics
from pdserve.sim.simulator import run_simulation
from pdserve.sim.traces import Trace

from references import Setup, _blame, attainment_of


@dataclass
class ReactiveAutoscaler:
    """desired = ceil(current x metric / target) per pool, HPA's rule: prefill on (running +
    waiting) per ready replica, decode on mean KV usage; 10 % tolerance, immediate
    scale-up, scale-down stabilised over ``stabilization_s`` (HPA's default is 300 s), never
    under ``min_p`` / ``min_d`` replicas (HPA's ``minReplicas``)."""

    interval_s: float
    max_p: int
    max_d: int
    prefill_target: float = 4.0
    decode_kv_target: float = 0.7
    stabilization_s: float = 60.0
    tolerance: float = 0.1
    min_p: int = 1
    min_d: int = 1
    recs: list[tuple[float, int, int]] = field(default_factory=list)

    def _hpa(self, current: int, metric: float, target: float) -> int:
        ratio = metric / target
        return current if abs(ratio - 1) <= self.tolerance else math.ceil(current * ratio)

    def on_tick(self, now: float, window: WindowMetrics, current: PoolSizes) -> PoolSizes:
        pf, dc = window.prefill, window.decode
        p = self._hpa(max(current.prefill, 1), (pf.running + pf.waiting) / max(pf.ready, 1), self.prefill_target)
        d = self._hpa(max(current.decode, 1), dc.kv_usage if dc.ready else 1.0, self.decode_kv_target)
        p, d = min(max(p, self.min_p), self.max_p), min(max(d, self.min_d), self.max_d)
        self.recs = [r for r in self.recs if r[0] >= now - self.stabilization_s] + [(now, p, d)]
        if p < current.prefill:
            p = min(current.prefill, max(r[1] for r in self.recs))
        if d < current.decode:
            d = min(current.decode, max(r[2] for r in self.recs))
        return PoolSizes(p, d)


def smallest_static(trace: Trace, s: Setup, start: tuple[int, int], target: float = 0.99,
                    feasible: list[bool] | None = None) -> tuple[tuple[int, int], int]:
    """Grow (P, D) from ``start`` (clamped to the caps) on whichever pool the misses point at until
    >= target among the ``feasible`` requests (all if None), or until more replicas stop helping
    (then the smallest size with the best attainment)."""
    p, d = min(start[0], s.max_p), min(start[1], s.max_d)
    start = (p, d)
    sims, best_ok, best, stalls = 0, -1.0, start, 0
    while True:
        res = run_simulation(trace, s.sim_config(p, d, startup=0.0))
        sims += 1
        ok = attainment_of(sorted(res.records, key=lambda r: r.index), s.slo, feasible)
        if ok > best_ok + 1e-9:
            best_ok, best, stalls = ok, (p, d), 0
        else:
            stalls += 1  # two more replicas that bought nothing: the rest is unattainable
        if ok >= target or (p >= s.max_p and d >= s.max_d) or stalls >= 2:
            return best, sims
        if (_blame(res.records, s.slo) == "prefill" and p < s.max_p) or d >= s.max_d:
            p += 1
        else:
            d += 1
