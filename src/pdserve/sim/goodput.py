"""Goodput: the largest request rate at which SLO attainment still meets the target.

DistServe's definition: replay the workload at rate scale ``s`` (arrival times
divided by ``s``), measure attainment, and binary-search the largest ``s`` with
attainment >= target. Goodput is ``s`` x the trace's mean rate, in req/s.

Attainment is not strictly monotone in the rate (queueing noise), so the search
brackets by doubling, bisects, and reports every probe so callers can plot the
whole curve and see non-monotone spots.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Probe:
    rate_scale: float
    rate_rps: float
    attainment: float


@dataclass(slots=True)
class GoodputResult:
    rate_scale: float  # largest scale found with attainment >= target (0 if none)
    goodput_rps: float
    target: float
    probes: list[Probe] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "rate_scale": round(self.rate_scale, 6),
            "goodput_rps": round(self.goodput_rps, 6),
            "target": self.target,
            "probes": [
                {"rate_scale": round(p.rate_scale, 6), "rate_rps": round(p.rate_rps, 6), "attainment": round(p.attainment, 6)}
                for p in sorted(self.probes, key=lambda p: p.rate_scale)
            ],
        }


def search_goodput(
    attainment_at: Callable[[float], float],
    base_rate_rps: float,
    target: float,
    *,
    start: float = 1.0,
    rel_tol: float = 0.03,
    max_probes: int = 24,
    min_scale: float = 1e-3,
    max_scale: float = 1e4,
) -> GoodputResult:
    """Binary-search the largest rate scale whose attainment is >= ``target``.

    ``attainment_at(scale)`` runs one simulation. ``rel_tol`` is the relative width
    of the final bracket; ``max_probes`` bounds the number of simulations.
    """
    if not 0 < target <= 1:
        raise ValueError(f"attainment target must be in (0, 1], got {target}")
    if base_rate_rps <= 0:
        raise ValueError(f"base rate must be positive, got {base_rate_rps}")
    probes: list[Probe] = []
    cache: dict[float, float] = {}

    def probe(s: float) -> bool:
        if s not in cache:
            cache[s] = attainment_at(s)
            probes.append(Probe(s, s * base_rate_rps, cache[s]))
        return cache[s] >= target

    lo, hi = 0.0, 0.0
    s = start
    if probe(s):
        lo = s
        while len(probes) < max_probes:
            s *= 2
            if s > max_scale:
                break
            if probe(s):
                lo = s
            else:
                hi = s
                break
        if hi == 0.0:  # never failed within the limits
            return GoodputResult(lo, lo * base_rate_rps, target, probes)
    else:
        hi = s
        while len(probes) < max_probes:
            s /= 2
            if s < min_scale:
                return GoodputResult(0.0, 0.0, target, probes)
            if probe(s):
                lo = s
                break
            if cache[s] > 0 and cache[s] == cache[hi] == cache.get(hi * 2, -1.0):
                # Two halvings changed nothing: this is the zero-load limit, and it
                # misses the target, so no rate will meet the SLOs. (Zero attainment
                # is excluded: deep overload also reads 0 at several rates.)
                return GoodputResult(0.0, 0.0, target, probes)
            hi = s
        if lo == 0.0:
            return GoodputResult(0.0, 0.0, target, probes)
    while hi - lo > rel_tol * lo and len(probes) < max_probes:
        mid = (lo + hi) / 2
        if probe(mid):
            lo = mid
        else:
            hi = mid
    return GoodputResult(lo, lo * base_rate_rps, target, probes)
