"""Burst rate of arriving prompt tokens, at a resolution a 15 s scrape cannot give (pure: the caller gives the times).

A planner reading ``rate()`` / ``irate()`` of the router's prompt-token counter sees the
load averaged over at least one scrape period (15 s): a burst of 44 requests x 6k tokens
in 3 s reads as ~18k tokens/s although it arrives at ~90k, so capacity sized from it is a
fifth of what the burst needed. The router sees every request, so it measures the burst
itself and exports the answer as a gauge that Prometheus can sample at any period.

What it exports is the *service rate a FIFO pool needs so that no arrival of the recent
past waited more than a budget* (the delay bound of network calculus): with ``A(s, t)``
the prompt tokens arriving in ``(s, t]``, a server of rate ``C`` started on an empty queue
keeps every wait within ``b`` iff ``A(s, t) <= C x ((t - s) + b)`` for every ``s < t``, so

    need(b) = max over s < t of A(s, t) / ((t - s) + b)

over the last ``span_s`` (at least two scrape periods, so a sampled gauge never misses a
burst), with ``s`` and ``t`` on a ``resolution_s`` grid. A budget of 0 is the plain peak
rate at that resolution (noisy: one second of a Poisson stream can carry twice its mean);
a budget of the order of the TTFT SLO reads a steady stream at about its mean and a burst
at the rate that would have served it within the budget. The router exports several
budgets as labels; the planner picks its own (``pdserve.planner``: ``burst_budget_s``).

The simulator's metric view (``pdserve.sim.windows``) keeps one of these too, so the
simulated planner reads the same number the live one would.
"""

from __future__ import annotations

import math

BUDGETS_S = (0.0, 0.5, 1.0, 2.0, 4.0)  # the budgets the router exports (label ``budget``)


class BurstMeter:
    """Prompt tokens per ``resolution_s`` bucket, kept for ``retain_s``; read back as ``need(b)``."""

    def __init__(self, *, resolution_s: float = 1.0, span_s: float = 30.0, retain_s: float | None = None) -> None:
        if not (resolution_s > 0 and span_s >= resolution_s):
            raise ValueError(f"need resolution > 0 and span >= resolution, got {resolution_s}, {span_s}")
        self.resolution_s = resolution_s
        self.span_s = span_s
        self.retain_s = max(span_s, retain_s or span_s)
        self._keep = math.ceil(self.retain_s / resolution_s)
        self._buckets: dict[int, float] = {}  # bucket index -> tokens
        self._newest: int | None = None

    def add(self, t: float, tokens: float) -> None:
        k = math.floor(t / self.resolution_s)
        self._buckets[k] = self._buckets.get(k, 0.0) + tokens
        if self._newest is None or k > self._newest:
            self._newest = k
        if len(self._buckets) > self._keep + 1:  # at most once per new bucket
            oldest = self._newest - self._keep
            for old in [j for j in self._buckets if j < oldest]:
                del self._buckets[old]

    def need(self, budget_s: float, now: float, *, since: float | None = None) -> float:
        """Tokens/s needed over the whole buckets in ``(since, now]`` (default: the last ``span_s``).
        The bucket ``now`` falls in is still filling and is left out: the gauge lags by at most
        one resolution step, and a simulator reading it at a past instant sees nothing later."""
        if budget_s < 0:
            raise ValueError(f"budget must be >= 0, got {budget_s}")
        res = self.resolution_s
        hi = math.floor(now / res) - 1
        lo = math.floor(((now - self.span_s) if since is None else since) / res)
        counts = sorted((k, v) for k, v in self._buckets.items() if lo < k <= hi)
        best = 0.0
        for i, (ki, _) in enumerate(counts):  # window starts at bucket ki
            total = 0.0
            for kj, v in counts[i:]:  # ... and ends with bucket kj
                total += v
                best = max(best, total / ((kj - ki + 1) * res + budget_s))
        return best
