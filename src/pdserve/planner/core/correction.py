"""The planner's latency correction: observed / profile-expected mean latency per pool.

Pure: the ratios and when each pool last engaged live here, the policy feeds observations
and asks which factor to apply. A ratio above 1 (the pool slower than its profile) is
applied only once the pool's tail nears the SLO (below that the SLO holds anyway and the
extra replicas would be waste), and then for ``hold_s`` after the tail last did: the
replicas it added are what brought the tail down, so letting go the next tick plans them
away again and the tail climbs back (a limit cycle; bench/planner, 70B TP4 Azure 4x).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pdserve.planner.core.observation import Observation
from pdserve.planner.core.observation import finite as _finite
from pdserve.planner.core.profile import CapacityProfile


@dataclass
class LatencyCorrection:
    bounds: tuple[float, float]
    engage: float  # fraction of the SLO the tail must reach before a ratio above 1 applies
    hold_s: float
    prefill: float = 1.0  # smoothed latency ratios
    decode: float = 1.0
    engaged_at: dict[str, float] = field(default_factory=dict)  # pool -> last time its tail neared the SLO

    def update(self, obs: Observation, profile: CapacityProfile, hit: float) -> None:
        """Ratio of observed to profile-expected mean latency at the observed load, smoothed."""
        lo, hi = self.bounds
        rate = obs.request_rate
        if not (_finite(rate) and rate > 0):
            return
        ready_p, ready_d = obs.prefill.effective_ready, obs.decode.effective_ready
        if _finite(obs.ttft_mean_s) and _finite(obs.mean_isl) and ready_p > 0:
            exp = profile.expected_ttft_ms(obs.mean_isl, rate * obs.mean_isl * (1 - hit) / ready_p)
            if exp and exp > 0:
                self.prefill = 0.5 * self.prefill + 0.5 * min(max(obs.ttft_mean_s * 1000 / exp, lo), hi)
        if _finite(obs.itl_mean_s) and _finite(obs.mean_isl) and _finite(obs.mean_osl) and ready_d > 0:
            exp = profile.expected_itl_ms(obs.mean_isl + obs.mean_osl / 2, rate * obs.mean_osl / ready_d)
            if exp and exp > 0:
                self.decode = 0.5 * self.decode + 0.5 * min(max(obs.itl_mean_s * 1000 / exp, lo), hi)

    def factor(self, pool: str, tail_s: float, slo_ms: float, now: float) -> float:
        """The divisor for the pool's capacity now (1: the profile as it is)."""
        ratio = self.prefill if pool == "prefill" else self.decode
        if ratio < 1:
            return ratio
        # Unknown tail latency counts as near: then trust the measured ratio.
        if not _finite(tail_s) or tail_s * 1000 >= self.engage * slo_ms:
            self.engaged_at[pool] = now
            return ratio
        at = self.engaged_at.get(pool)
        return ratio if at is not None and now - at < self.hold_s else 1.0
