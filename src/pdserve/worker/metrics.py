"""vLLM's Prometheus metrics, with its names, types, labels and bucket edges.

Names, help texts and buckets follow ``vllm/v1/metrics/loggers.py`` (PrometheusStatLogger,
vLLM 0.11): labels ``model_name`` and ``engine``; prometheus-client appends ``_total``
to counters on the wire, exactly as it does inside vLLM. Latencies are wall-clock
seconds, as a client observes them. Metrics outside vLLM's set carry a ``pdserve_``
prefix so nobody mistakes them for vLLM's.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder

from pdserve.worker.engine import EngineStats

TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
               20.0, 40.0, 80.0]
REQUEST_LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                           60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]
ITERATION_TOKENS_BUCKETS = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
LOOP_LAG_BUCKETS = [0.0005, 0.001, 0.002, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.05, 0.1, 0.25, 1.0]
FINISH_REASONS = ("stop", "length", "abort")
PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")


def build_1_2_5_buckets(max_value: int) -> list[int]:
    """vLLM's token-count buckets: 1, 2, 5, 10, 20, 50, ... up to ``max_value``."""
    out: list[int] = []
    exp = 0
    while True:
        for m in (1, 2, 5):
            v = m * 10**exp
            if v > max_value:
                return out
            out.append(v)
        exp += 1


NIXL_XFER_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0]
NIXL_BYTES_BUCKETS = [2 ** (10 + i) for i in range(1, 25, 2)]  # vLLM 0.33's "uniform 2kb to 16gb range"


class WorkerMetrics:
    def __init__(self, model_name: str, max_model_len: int, engine: str = "0") -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        ln = ["model_name", "engine"]
        lv = (model_name, engine)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, ln, registry=r).labels(*lv)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, ln, registry=r).labels(*lv)

        def hist(name: str, doc: str, buckets: list[float] | list[int]) -> Histogram:
            return Histogram(name, doc, ln, buckets=buckets, registry=r).labels(*lv)

        self.running = gauge("vllm:num_requests_running", "Number of requests in model execution batches.")
        self.waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
        self.kv_usage = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.prefix_queries = counter(
            "vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.")
        self.prefix_hits = counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.")
        self.preemptions = counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        by_source = Counter("vllm:prompt_tokens_by_source", "Number of prompt tokens by source.",
                            [*ln, "source"], registry=r)
        self.prompt_by_source = {s: by_source.labels(*lv, s) for s in PROMPT_SOURCES}
        self.prompt_tokens_cached = counter(
            "vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external).")
        self.generation_tokens = counter("vllm:generation_tokens", "Number of generation tokens processed.")
        success = Counter("vllm:request_success", "Count of successfully processed requests.",
                          [*ln, "finished_reason"], registry=r)
        self.request_success = {f: success.labels(*lv, f) for f in FINISH_REASONS}
        token_buckets = build_1_2_5_buckets(max_model_len)
        self.request_prompt_tokens = hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.",
                                          token_buckets)
        self.request_generation_tokens = hist(
            "vllm:request_generation_tokens", "Number of generation tokens processed.", token_buckets)
        self.request_max_tokens = hist(
            "vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", token_buckets)
        self.iteration_tokens = hist("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
                                     ITERATION_TOKENS_BUCKETS)
        self.ttft = hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                         TTFT_BUCKETS)
        self.itl = hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                        ITL_BUCKETS)
        self.tpot = hist("vllm:request_time_per_output_token_seconds",
                         "Histogram of time_per_output_token_seconds per request.", ITL_BUCKETS)
        self.e2e = hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                        REQUEST_LATENCY_BUCKETS)
        self.queue_time = hist("vllm:request_queue_time_seconds",
                               "Histogram of time spent in WAITING phase for request.", REQUEST_LATENCY_BUCKETS)
        self.inference_time = hist("vllm:request_inference_time_seconds",
                                   "Histogram of time spent in RUNNING phase for request.", REQUEST_LATENCY_BUCKETS)
        self.prefill_time = hist("vllm:request_prefill_time_seconds",
                                 "Histogram of time spent in PREFILL phase for request.", REQUEST_LATENCY_BUCKETS)
        self.decode_time = hist("vllm:request_decode_time_seconds",
                                "Histogram of time spent in DECODE phase for request.", REQUEST_LATENCY_BUCKETS)
        # pdserve's own: the P/D handoff as the decode side sees it
        kv_ln = [*ln, "reason", "policy"]
        self._kv_failures = Counter("pdserve_worker_kv_load_failures",
                                    "Remote KV loads that failed, by reason and the kv_load_failure_policy applied.",
                                    kv_ln, registry=r)
        self._lv = lv
        self.kv_transfers = counter("pdserve_worker_kv_transfers", "Remote KV loads that succeeded.")
        self.kv_transfer_time = hist("pdserve_worker_kv_transfer_seconds",
                                     "Wall time of successful remote KV loads.", TTFT_BUCKETS)
        # vLLM's own name for it (NixlConnector's stats, vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py
        # in 0.33; absent in 0.11), with its buckets, so the dashboard's KV-transfer panel reads real vLLM too.
        self.nixl_xfer_time = hist("vllm:nixl_xfer_time_seconds",
                                   "Histogram of transfer duration for NIXL KV Cache transfers.", NIXL_XFER_BUCKETS)
        self.nixl_bytes = hist("vllm:nixl_bytes_transferred",
                               "Histogram of bytes transferred per NIXL KV Cache transfers.", NIXL_BYTES_BUCKETS)
        self.loop_lag = hist("pdserve_worker_event_loop_lag_seconds",
                             "How late a 5 ms asyncio timer fires: the serving loop's responsiveness.",
                             LOOP_LAG_BUCKETS)
        self.loop_cpu_lag = hist("pdserve_worker_event_loop_cpu_lag_seconds",
                                 "The part of the loop lag this thread spent running callbacks (excludes time the "
                                 "OS ran other processes): the lag the worker causes itself.", LOOP_LAG_BUCKETS)
        self._last_stats: EngineStats | None = None

    def kv_load_failure(self, reason: str, policy: str) -> None:
        self._kv_failures.labels(*self._lv, reason, policy).inc()

    def update_engine(self, stats: EngineStats) -> None:
        """Refresh gauges and turn the engine's cumulative counts into counter increments."""
        self.running.set(stats.running)
        self.waiting.set(stats.waiting)
        self.kv_usage.set(stats.kv_usage)
        last = self._last_stats
        if last is not None:
            self.prefix_queries.inc(stats.prefix_queries - last.prefix_queries)
            self.prefix_hits.inc(stats.prefix_hits - last.prefix_hits)
            self.preemptions.inc(stats.preemptions - last.preemptions)
        else:
            self.prefix_queries.inc(stats.prefix_queries)
            self.prefix_hits.inc(stats.prefix_hits)
            self.preemptions.inc(stats.preemptions)
        self._last_stats = stats

    def render(self, accept: str = "") -> tuple[bytes, str]:
        """The body and Content-Type vLLM's /metrics answers to this Accept header.

        vLLM mounts ``prometheus_client.make_asgi_app``, which lets the scraper's Accept header
        choose the format: Prometheus 2.x asks for OpenMetrics without an ``escaping=`` term,
        and prometheus_client then writes ``vllm:x`` samples as ``vllm_x`` (client_python#1177),
        so that Prometheus stores ``vllm_`` names. The mock negotiates the same way, so the
        chart's relabeling and the planner's name fallbacks are tested against what vLLM serves."""
        encoder, content_type = choose_encoder(accept)
        return encoder(self.registry), content_type
