"""Per-tick metrics for the autoscaler hook: only what a Prometheus query would return.

Live, the planner reads counters and histograms that Prometheus scraped every
``scrape_s`` seconds, through ``rate(x[window])``; it never sees a request's output
length before the request has finished. This tracker gives the simulated planner the
same view:

* counters are read at the last scrape at or before the tick (scrapes at
  ``origin + phase + k * scrape_s``: on average half a scrape period old, as live);
* ``rate()`` is the counter increase between that scrape and the one ``window_s``
  earlier, over ``window_s`` (Prometheus extrapolates a partial window to its edges;
  with the window a multiple of the scrape period the two agree);
* request rate, ISL / OSL means and TTFT / ITL quantiles come from *completed*
  requests (vLLM observes ``request_success_total``, ``request_prompt_tokens``,
  ``request_generation_tokens`` when a request finishes); the only arrival-time signal
  is the router's ``pdserve_router_prompt_tokens`` counter, which counts prompt tokens
  as requests are routed, and its in-flight gauge;
* quantiles are exact over the window's completions rather than interpolated from
  histogram buckets (the one place this view is kinder than Prometheus);
* the short-window peak is the highest prompt-token increase between two consecutive
  scrapes since the previous tick, per second (``irate`` under ``max_over_time``);
* the router's burst gauge (``pdserve.common.burst``, one series per budget) is read
  at each scrape since the previous tick and the highest value kept, as
  ``max_over_time`` would; the router computes it from every request, at 1 s resolution;
* pool gauges (running, waiting, KV usage) are read at the tick;
* disaggregated: the prefill pool's own TTFT mean and p90 come from the prefills completed in the
  window, each from the request reaching its prefill engine to that engine's one token (the prefill
  pods' ``vllm:time_to_first_token_seconds``; the planner's PromQL reads it with ``role="prefill"``).
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pdserve.common.burst import BUDGETS_S, BurstMeter
from pdserve.sim.autoscale import PoolMetrics, PoolSizes, WindowMetrics
from pdserve.sim.instance import State
from pdserve.sim.metrics import RequestRecord, percentile

if TYPE_CHECKING:
    from pdserve.sim.simulator import Simulation

_EMPTY = PoolMetrics(ready=0, starting=0, draining=0, running=0, waiting=0, kv_usage=0.0, prefix_hit_ratio=None)

SCRAPE_S = 15.0  # the chart's PodMonitor interval
RATE_WINDOW_S = 60.0  # the planner's PromQL window ("1m")


@dataclass(frozen=True)
class RouterWindow:
    """What the router's own counters say at the scrape ``end_s``: requests routed in the rate window from ``start_s``,
    their prompt-token rate, the highest rate between consecutive scrapes over the last interval, and the burst
    gauge's highest value per budget over the same scrapes."""

    start_s: float
    end_s: float
    arrivals: int
    prompt_tokens_rate: float
    prompt_tokens_peak_rate: float
    prompt_tokens_burst: dict[float, float]


class WindowTracker:
    """Time-stamped arrival / completion events, read back as scraped counters at a tick."""

    def __init__(self, sim: Simulation, *, scrape_s: float = SCRAPE_S, window_s: float = RATE_WINDOW_S,
                 phase_s: float | None = None) -> None:
        if not (scrape_s > 0 and window_s >= scrape_s):
            raise ValueError(f"need scrape period > 0 and rate window >= scrape period, got {scrape_s}, {window_s}")
        self.sim = sim
        self.scrape_s = scrape_s
        self.window_s = window_s
        self.phase_s = scrape_s / 2 if phase_s is None else phase_s
        self.origin: float | None = None
        # (time, prompt tokens) per routed request; (time, isl, osl, ttft, tpot or None) per completion
        self.arrivals: deque[tuple[float, int]] = deque()
        self.done: deque[tuple[float, int, int, float, float | None]] = deque()
        self.prefills: deque[tuple[float, float]] = deque()  # (time, the prefill engine's TTFT) per prefill done
        self.inflight = 0
        self.prefix_seen: dict[str, tuple[int, int]] = {}  # instance -> (hits, queries) at last tick
        # The router's burst meter, kept long enough to be read at the scrapes of one interval.
        self.burst = BurstMeter(retain_s=4 * window_s)

    def arrived(self, rec: RequestRecord) -> None:
        if self.origin is None:
            self.origin = rec.arrival_s
        self.arrivals.append((rec.arrival_s, rec.input_tokens))
        self.burst.add(rec.arrival_s, rec.input_tokens)
        self.inflight += 1

    def completed(self, rec: RequestRecord) -> None:
        tpot = rec.tpot if rec.output_tokens > 1 else None
        self.done.append((rec.finish_s, rec.input_tokens, rec.output_tokens, rec.ttft, tpot))
        self.inflight -= 1

    def prefilled(self, now: float, engine_ttft_s: float) -> None:
        """A prefill engine answered its one token ``engine_ttft_s`` after the request reached it."""
        self.prefills.append((now, engine_ttft_s))

    def last_scrape(self, now: float) -> float:
        """The newest scrape instant at or before ``now``."""
        origin = (self.origin or 0.0) + self.phase_s
        if now < origin:
            return now - self.scrape_s  # nothing scraped yet: an empty window
        return origin + math.floor((now - origin) / self.scrape_s + 1e-9) * self.scrape_s

    def pool_sizes(self) -> PoolSizes:
        def live(pool: str) -> int:
            return sum(1 for i in self.sim.instances.get(pool, ()) if i.state in (State.STARTING, State.READY))

        if self.sim.disagg:
            return PoolSizes(prefill=live("prefill"), decode=live("decode"))
        return PoolSizes(prefill=0, decode=live("colocated"))

    def _pool(self, pool: str) -> PoolMetrics:
        insts = self.sim.instances.get(pool, [])
        active = [i for i in insts if i.state in (State.READY, State.DRAINING)]
        ready = [i for i in insts if i.state is State.READY]
        hits = queries = 0
        for i in insts:
            h, q = i.engine.prefix_hits, i.engine.prefix_queries
            h0, q0 = self.prefix_seen.get(i.instance_id, (0, 0))
            hits += h - h0
            queries += q - q0
            self.prefix_seen[i.instance_id] = (h, q)
        return PoolMetrics(
            ready=len(ready),
            starting=sum(1 for i in insts if i.state is State.STARTING),
            draining=sum(1 for i in insts if i.state is State.DRAINING),
            running=sum(len(i.engine.running) for i in active),
            waiting=sum(len(i.engine.waiting) + i.incoming for i in active) + len(self.sim.pending[pool]),
            kv_usage=sum(i.engine.pool.usage() for i in ready) / len(ready) if ready else 0.0,
            prefix_hit_ratio=hits / queries if queries else None,
        )

    def router_window(self, end: float, interval_s: float) -> RouterWindow:
        """The router side alone at the scrape ``end`` (``snapshot`` adds the engines'; bench/planner's Dynamo replay
        feeds arrivals only and reads this)."""
        arr = _between(self.arrivals, end - self.window_s, end)
        return RouterWindow(start_s=end - self.window_s, end_s=end, arrivals=len(arr), prompt_tokens_rate=sum(a[1] for a in arr) / self.window_s,
                            prompt_tokens_peak_rate=self._peak(end, interval_s),
                            prompt_tokens_burst=self._burst(end, interval_s))

    def _peak(self, end: float, interval_s: float) -> float:
        """Highest prompt-token rate between consecutive scrapes over the last interval."""
        best, s = 0.0, end
        while s > end - interval_s - 1e-9:
            tokens = sum(a[1] for a in _between(self.arrivals, s - self.scrape_s, s))
            best = max(best, tokens / self.scrape_s)
            s -= self.scrape_s
        return best

    def _burst(self, end: float, interval_s: float) -> dict[float, float]:
        """The burst gauge's highest value at the scrapes over the last interval, per budget."""
        out = dict.fromkeys(BUDGETS_S, 0.0)
        s = end
        while s > end - interval_s - 1e-9:
            for b in BUDGETS_S:
                out[b] = max(out[b], self.burst.need(b, s))
            s -= self.scrape_s
        return out

    def snapshot(self, now: float, interval_s: float) -> WindowMetrics:
        end = self.last_scrape(now)
        start = end - self.window_s
        # Events older than any future window are never read again.
        horizon = min(start, end - interval_s - self.scrape_s) - self.window_s
        while self.arrivals and self.arrivals[0][0] <= horizon:
            self.arrivals.popleft()
        while self.done and self.done[0][0] <= horizon:
            self.done.popleft()
        while self.prefills and self.prefills[0][0] <= horizon:
            self.prefills.popleft()
        router = self.router_window(end, interval_s)
        done = _between(self.done, start, end)
        n = len(done)
        ttft = sorted(d[3] for d in done)
        tpot = sorted(d[4] for d in done if d[4] is not None)
        engine_ttft = sorted(p[1] for p in _between(self.prefills, start, end))
        sim = self.sim
        if sim.disagg:
            prefill, decode = self._pool("prefill"), self._pool("decode")
        else:
            prefill, decode = _EMPTY, self._pool("colocated")
        return WindowMetrics(
            start_s=start,
            end_s=end,
            arrivals=router.arrivals,
            request_rate=n / self.window_s,
            mean_isl=sum(d[1] for d in done) / n if n else None,
            mean_osl=sum(d[2] for d in done) / n if n else None,
            completions=n,
            ttft_p50=percentile(ttft, 50),
            ttft_p90=percentile(ttft, 90),
            itl_p50=percentile(tpot, 50),
            itl_p90=percentile(tpot, 90),
            prefill=prefill,
            decode=decode,
            prompt_tokens_rate=router.prompt_tokens_rate,
            inflight=self.inflight,
            prompt_tokens_peak_rate=router.prompt_tokens_peak_rate,
            prompt_tokens_burst=router.prompt_tokens_burst,
            prefill_ttft_mean=sum(engine_ttft) / len(engine_ttft) if engine_ttft else None,
            prefill_ttft_p90=percentile(engine_ttft, 90),
        )


def _between(events: deque, start: float, end: float) -> list:
    """Events with start < time <= end (events are appended in time order)."""
    times = [e[0] for e in events]
    return list(events)[bisect.bisect_right(times, start):bisect.bisect_right(times, end)]
