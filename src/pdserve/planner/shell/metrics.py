"""The planner's own Prometheus metrics (``pdserve_planner_*``)."""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, Counter, Gauge

from pdserve.planner.core import decision as _decision
from pdserve.planner.core.decision import ScalingDecision
from pdserve.planner.core.observation import Observation

_OBSERVED = {
    "request_rate": "request_rate", "isl": "mean_isl", "osl": "mean_osl",
    "ttft_seconds": "ttft_mean_s", "itl_seconds": "itl_mean_s",
}
_PREDICTED = {"request_rate": "requestRate", "isl": "isl", "osl": "osl"}
# Every reason a decision can be held for: their counters start at 0 with the service,
# so "never held" is a series of zeros (the dashboard's annotation and rate() see it)
# rather than no series at all.
HOLD_REASONS = tuple(sorted(v for k, v in vars(_decision).items() if k.startswith("HOLD_") and isinstance(v, str)))


class PlannerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        labels = ["service", "namespace"]
        r = self.registry
        self.observed = {k: Gauge(f"pdserve_planner_observed_{k}", f"Observed {k} over the last interval", labels, registry=r) for k in _OBSERVED}
        self.predicted = {k: Gauge(f"pdserve_planner_predicted_{k}", f"Forecast {k} for the next interval", labels, registry=r) for k in _PREDICTED}
        self.slo_ttft = Gauge("pdserve_planner_slo_ttft_seconds", "TTFT SLO the pools are sized for", labels, registry=r)
        self.slo_itl = Gauge("pdserve_planner_slo_itl_seconds", "ITL SLO the pools are sized for", labels, registry=r)
        self.held_now = Gauge("pdserve_planner_held", "1 while the last decision was held", labels, registry=r)
        self.desired = Gauge("pdserve_planner_desired_replicas", "Replicas the planner decided", labels + ["pool"], registry=r)
        self.decisions = Counter("pdserve_planner_decisions", "Planner decisions", labels, registry=r)
        self.held = Counter("pdserve_planner_held_decisions", "Held decisions by reason", labels + ["reason"], registry=r)
        self.limited = Counter("pdserve_planner_scaling_limited", "Decisions capped by bounds, budget or pending pods", labels, registry=r)
        self.correction = Gauge("pdserve_planner_correction_factor", "Observed / profile-expected latency", labels + ["pool"], registry=r)

    def record(self, service: str, namespace: str, obs: Observation, d: ScalingDecision,
               ttft_slo_ms: float | None = None, itl_slo_ms: float | None = None) -> None:
        lab = {"service": service, "namespace": namespace}
        for reason in HOLD_REASONS:
            self.held.labels(**lab, reason=reason)
        for k, attr in _OBSERVED.items():
            v = getattr(obs, attr)
            if math.isfinite(v):
                self.observed[k].labels(**lab).set(v)
        fc = d.explanation.get("forecast", {})
        for k, key in _PREDICTED.items():
            v = fc.get(key)
            if isinstance(v, float) and math.isfinite(v):
                self.predicted[k].labels(**lab).set(v)
        if ttft_slo_ms:
            self.slo_ttft.labels(**lab).set(ttft_slo_ms / 1000)
        if itl_slo_ms:
            self.slo_itl.labels(**lab).set(itl_slo_ms / 1000)
        self.desired.labels(**lab, pool="prefill").set(d.prefill)
        self.desired.labels(**lab, pool="decode").set(d.decode)
        self.decisions.labels(**lab).inc()
        self.held_now.labels(**lab).set(1 if d.held else 0)
        if d.held:
            self.held.labels(**lab, reason=d.hold_key or "unknown").inc()
        if d.limited:
            self.limited.labels(**lab).inc()
        cap = d.explanation.get("capacity", {})
        for pool, key in (("prefill", "prefillCorrection"), ("decode", "decodeCorrection")):
            if key in cap:
                self.correction.labels(**lab, pool=pool).set(cap[key])
