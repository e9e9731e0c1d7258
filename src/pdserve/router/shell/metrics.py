"""The router's Prometheus metrics (``pdserve_router_*``), one registry per app."""

from __future__ import annotations

import os
import time
from bisect import bisect_left
from collections.abc import Callable
from functools import partial

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from pdserve.common.burst import BUDGETS_S, BurstMeter

# vLLM's bucket edges (vllm/v1/metrics/loggers.py), so router- and worker-side
# latencies can be compared bucket for bucket.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
               40.0, 80.0)
DECISION_BUCKETS = (1e-5, 2.5e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 5e-2)
# Router-internal latencies include waiting for the event loop, which reaches tens of
# ms under a burst: finer edges up to 50 ms (the decision edges) and a coarse tail.
OVERHEAD_BUCKETS = (*DECISION_BUCKETS[2:], 1e-1, 2.5e-1, 1.0)


class HistogramBatch:
    """Observations of one (unlabelled) histogram gathered locally and added to it in
    one go: ``Histogram.observe`` takes two locks per call, which at one call per
    streamed token was 3 % of the router's CPU. Flushed every ``every`` observations
    and when the stream ends, so a scrape lags by at most that many per stream. (This
    writes prometheus_client's bucket children directly; a test pins it.)"""

    __slots__ = ("_hist", "_bounds", "_counts", "_sum", "_n", "_every")

    def __init__(self, hist: Histogram, every: int = 64) -> None:
        self._hist = hist
        self._bounds = hist._upper_bounds  # ends with +Inf: every value has a bucket
        self._counts = [0] * len(self._bounds)
        self._sum = 0.0
        self._n = 0
        self._every = every

    def observe(self, value: float, times: int = 1) -> None:
        # bisect_left finds the first bound >= value: prometheus_client's `value <= bound`.
        self._counts[bisect_left(self._bounds, value)] += times
        self._sum += value * times
        self._n += times
        if self._n >= self._every:
            self.flush()

    def flush(self) -> None:
        if not self._n:
            return
        buckets = self._hist._buckets
        for i, c in enumerate(self._counts):
            if c:
                buckets[i].inc(c)
                self._counts[i] = 0
        self._hist._sum.inc(self._sum)
        self._sum = 0.0
        self._n = 0


def exposition(registry: CollectorRegistry) -> bytes:
    """The /metrics body: this process's registry, or, under ``pdserve router
    --processes N`` (prometheus_client's multiprocess mode), all processes combined."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    return generate_latest(registry)


class RouterMetrics:
    def __init__(self, registry: CollectorRegistry | None = None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter("pdserve_router_requests", "Requests by route, mode and HTTP status.",
                                ["route", "mode", "status"], registry=r)
        self.ttft = Histogram("pdserve_router_time_to_first_token_seconds",
                              "Time to first token as the client sees it.", ["mode"], buckets=TTFT_BUCKETS, registry=r)
        self.itl = Histogram("pdserve_router_inter_token_latency_seconds",
                             "Gap between streamed chunks as the client sees it.", buckets=ITL_BUCKETS, registry=r)
        self.e2e = Histogram("pdserve_router_e2e_request_latency_seconds", "Whole request latency.",
                             buckets=TTFT_BUCKETS, registry=r)
        self.decision = Histogram("pdserve_router_routing_decision_seconds",
                                  "Time to pick a worker (policy select).", ["pool"], buckets=DECISION_BUCKETS,
                                  registry=r)
        self.overhead = Histogram("pdserve_router_request_overhead_seconds",
                                  "Router time from a request's arrival to its first upstream request written "
                                  "(read, parse, hash, route, send; includes event-loop queueing).",
                                  buckets=OVERHEAD_BUCKETS, registry=r)
        self.first_chunk = Histogram("pdserve_router_first_chunk_relay_seconds",
                                     "Router time from the first upstream body byte of a stream to its write to "
                                     "the client (includes event-loop queueing).", buckets=OVERHEAD_BUCKETS,
                                     registry=r)
        self.prompt_tokens = Counter("pdserve_router_prompt_tokens", "Prompt tokens routed.", registry=r)
        # A planner sizing from rate() of the counter above sees bursts averaged over a whole
        # scrape period; this gauge is the burst as the router saw it (pdserve.common.burst).
        self.burst_rate = Gauge("pdserve_router_prompt_tokens_burst_rate",
                                "Prompt tokens/s a FIFO pool needed over the last 30 s so that no request waited "
                                "longer than `budget` seconds (budget 0: the peak 1 s rate).", ["budget"],
                                registry=r, multiprocess_mode="livesum")
        self._clock = clock
        self._burst = BurstMeter()
        self._burst_children = {b: self.burst_rate.labels(f"{b:g}") for b in BUDGETS_S}
        # One process: computed when scraped. Several (multiprocess mode reads values from
        # files, not functions): recomputed once per new second, on the next request.
        self._burst_per_second = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
        self._burst_second: int | None = None
        if not self._burst_per_second:
            for b, child in self._burst_children.items():
                child.set_function(partial(self._burst_need, b))
        self.cached_tokens = Counter("pdserve_router_estimated_cached_prompt_tokens",
                                     "Prompt tokens the policy expected to hit a prefix cache.", registry=r)
        self.hit_ratio = Gauge("pdserve_router_estimated_prefix_hit_ratio",
                               "Estimated cached / total prompt tokens since start.", registry=r,
                               multiprocess_mode="livemostrecent")
        self.retries = Counter("pdserve_router_retries", "Requests re-sent to another worker before the first byte.",
                               ["stage"], registry=r)
        self.migrations = Counter("pdserve_router_migrations", "Streams moved to another decode worker mid-flight.",
                                  ["outcome"], registry=r)
        self.handoffs = Counter("pdserve_router_pd_handoffs", "Prefill -> decode handoffs.", ["outcome"], registry=r)
        self.admission = Counter("pdserve_router_rejections", "Requests refused before routing.", ["reason"],
                                 registry=r)
        self.inflight = Gauge("pdserve_router_inflight_requests", "Requests in progress in the router.", registry=r,
                              multiprocess_mode="livesum")
        # With --processes N (multiprocess mode) each gauge says how to combine processes:
        # scraped worker state is the same for all (latest wins), own counts add up.
        self.worker_running = Gauge("pdserve_router_worker_running", "Worker's running requests (scraped).",
                                    ["worker", "role"], registry=r, multiprocess_mode="livemostrecent")
        self.worker_waiting = Gauge("pdserve_router_worker_waiting", "Worker's waiting requests (scraped).",
                                    ["worker", "role"], registry=r, multiprocess_mode="livemostrecent")
        self.worker_kv = Gauge("pdserve_router_worker_kv_usage", "Worker's KV-cache usage 0..1 (scraped).",
                               ["worker", "role"], registry=r, multiprocess_mode="livemostrecent")
        self.worker_inflight = Gauge("pdserve_router_worker_inflight", "Requests the router has in flight there.",
                                     ["worker", "role"], registry=r, multiprocess_mode="livesum")
        self.worker_up = Gauge("pdserve_router_worker_up", "1 if the worker is eligible for routing.",
                               ["worker", "role"], registry=r, multiprocess_mode="livemax")
        self.kv_events = Counter("pdserve_router_kv_events", "KV events applied to the index.", ["worker"], registry=r)
        self.indexed_blocks = Gauge("pdserve_router_indexed_blocks", "Block hashes in the KV index.", registry=r,
                                    multiprocess_mode="livemax")
        self._prompt = 0.0
        self._cached = 0.0
        # labels() costs a lock and a dict build per call: keep the children (hot path).
        self._children: dict[tuple[str, ...], object] = {}

    def _child(self, metric: object, *labels: str):  # type: ignore[no-untyped-def]
        key = (str(id(metric)), *labels)
        c = self._children.get(key)
        if c is None:
            c = self._children[key] = metric.labels(*labels)  # type: ignore[attr-defined]
        return c

    def ttft_by_mode(self, mode: str):  # type: ignore[no-untyped-def]
        return self._child(self.ttft, mode)

    def decision_for(self, pool: str):  # type: ignore[no-untyped-def]
        return self._child(self.decision, pool)

    def request_done(self, route: str, mode: str, status: int) -> None:
        self._child(self.requests, route, mode, str(status)).inc()

    def _burst_need(self, budget_s: float) -> float:
        return self._burst.need(budget_s, self._clock())

    def observe_prefix(self, prompt: int, cached: int) -> None:
        self.prompt_tokens.inc(prompt)
        now = self._clock()
        self._burst.add(now, prompt)
        if self._burst_per_second and int(now) != self._burst_second:
            self._burst_second = int(now)
            for b, child in self._burst_children.items():
                child.set(self._burst.need(b, now))
        self.cached_tokens.inc(cached)
        self._prompt += prompt
        self._cached += cached
        if self._prompt:
            self.hit_ratio.set(self._cached / self._prompt)

    def forget_worker(self, url: str, role: str) -> None:
        for g in (self.worker_running, self.worker_waiting, self.worker_kv, self.worker_inflight, self.worker_up):
            try:
                g.remove(url, role)
            except KeyError:
                pass
