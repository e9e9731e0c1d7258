"""A real /metrics endpoint with vLLM's metric names, driven by the test (no engine)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

LAT = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
TOK = (16, 64, 256, 1024, 4096, 16384)


class FakeVllm:
    def __init__(self, *, old_names: bool = False) -> None:
        self.registry = r = CollectorRegistry()
        lab = ["model_name", "engine"]
        self.success = Counter("vllm:request_success", "", lab + ["finished_reason"], registry=r)
        self.prompt = Histogram("vllm:request_prompt_tokens", "", lab, buckets=TOK, registry=r)
        self.gen = Histogram("vllm:request_generation_tokens", "", lab, buckets=TOK, registry=r)
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "", lab, buckets=LAT, registry=r)
        itl_name = "vllm:time_per_output_token_seconds" if old_names else "vllm:inter_token_latency_seconds"
        self.itl = Histogram(itl_name, "", lab, buckets=LAT, registry=r)
        self.running = Gauge("vllm:num_requests_running", "", lab, registry=r)
        self.waiting = Gauge("vllm:num_requests_waiting", "", lab, registry=r)
        self.kv = Gauge("vllm:gpu_cache_usage_perc" if old_names else "vllm:kv_cache_usage_perc", "", lab, registry=r)
        pre = "vllm:gpu_prefix_cache_" if old_names else "vllm:prefix_cache_"
        self.queries = Counter(pre + "queries", "", lab, registry=r)
        self.hits = Counter(pre + "hits", "", lab, registry=r)
        self.lab = {"model_name": "m", "engine": "0"}
        self._server, self._thread = start_http_server(0, addr="127.0.0.1", registry=r)
        self.url = f"http://127.0.0.1:{self._server.server_port}"

    def finish(self, n: int, isl: int, osl: int, ttft: float, itl: float, hit_tokens: int = 0) -> None:
        for _ in range(n):
            self.success.labels(**self.lab, finished_reason="length").inc()
            self.prompt.labels(**self.lab).observe(isl)
            self.gen.labels(**self.lab).observe(osl)
            self.ttft.labels(**self.lab).observe(ttft)
            for _ in range(3):
                self.itl.labels(**self.lab).observe(itl)
            self.queries.labels(**self.lab).inc(isl)
            self.hits.labels(**self.lab).inc(hit_tokens)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
