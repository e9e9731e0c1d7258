"""A burst's arrival rate, from the router's burst gauge read at two budgets (pure arithmetic).

The gauge (``pdserve.common.burst``) exports ``need(b)``: the service rate that would have
kept every recent wait within ``b`` seconds. One number is either too noisy or too low
to hold capacity for: at ``b = 0`` it is the busiest second, which long prompts push to
~1.5-2x the rate the burst arrives at (bench/planner: the reserve held 8-12 prefill
replicas where 4-5 carried every burst); at ``b`` of the order of the TTFT SLO it is what
*that* burst needed, and a short burst needs less than the next, longer one at the same
arrival rate (``R L / (L + b)`` for a burst of ``L`` seconds at ``R`` tokens/s).

Two budgets give both unknowns of that rectangular burst: with ``n1 = need(b1)`` and
``n2 = need(b2)``, ``b1 < b2``,

    n1 (L + b1) = n2 (L + b2) = R L   =>   L = (n2 b2 - n1 b1) / (n1 - n2),   R = n1 (L + b1) / L

``R`` is what a burst of any length from the same source needs in the limit, so it is the
reserve for a family whose burst sizes are heavy-tailed (the next burst may last longer
than any start-up; session 47 sized the reserve to absorb the highest remembered burst for the longest remembered
duration instead, ``R L / (L + budget)``, and fell under 99 % on five of eleven 8B bursty windows, bench/planner
results/diagnosis/settings_sweep47_absorb.json). A steady stream reads the same at both budgets (``n1 <= n2``: no
burst shape, ``L`` unbounded): ``R = n1``. The burst is taken to last at least
``min_duration_s`` (the gauge's resolution), which bounds ``R`` by ``n1 (1 + b1 / min)``.
"""

from __future__ import annotations

import math


def burst_arrival_rate(n1: float, b1: float, n2: float, b2: float, *, min_duration_s: float = 1.0) -> float:
    """Arrival rate of the rectangular burst that reads ``n1`` at budget ``b1`` and ``n2`` at ``b2``."""
    return burst_shape(n1, b1, n2, b2, min_duration_s=min_duration_s)[0]


def burst_shape(n1: float, b1: float, n2: float, b2: float, *, min_duration_s: float = 1.0) -> tuple[float, float]:
    """(arrival rate, duration in s) of that rectangular burst; a steady stream lasts forever (inf)."""
    if not (0 <= b1 < b2):
        raise ValueError(f"need budgets 0 <= b1 < b2, got {b1}, {b2}")
    if not (min_duration_s > 0):
        raise ValueError(f"minimum duration must be > 0, got {min_duration_s}")
    if not (math.isfinite(n1) and n1 > 0):
        return 0.0, 0.0
    if not math.isfinite(n2) or n2 >= n1:
        return n1, math.inf
    duration = max((max(n2, 0.0) * b2 - n1 * b1) / (n1 - n2), min_duration_s)
    return n1 * (duration + b1) / duration, duration


def lone_episode(times: list[float], now: float, span: float | None) -> bool:
    """The bursts seen at ``times`` all came within one ``span`` and none since: one episode that has not recurred
    in as long as it lasted, not a source of bursts to stand by for (``PolicyConfig.lone_burst_s``; None: never)."""
    return span is not None and max(times) - min(times) <= span and now - max(times) >= span
