"""A restarted planner's history from a real Prometheus (``PrometheusSource.history``): the same PromQL as each
tick's, as range queries at the ticks' own times; the pools' past sizes from their pods' series; nothing stored
before the service existed; and ``loop.warm_up``'s cold starts, said why."""

from __future__ import annotations

import json
import math
import shutil
import threading
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from pdserve.planner.core.observation import PoolState
from pdserve.planner.shell.loop import Started, warm_up
from pdserve.planner.shell.source_prometheus import PrometheusSource, PromQL
from prometheus_server import PrometheusServer, file_sd

from capacity_profiles import queue_policy

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="needs Debian's prometheus binary"),
]

SEL = 'namespace="test",pdserve_service="svc"'
RATE = 5_000.0  # prompt tokens/s the router counts


def test_history_reads_each_query_at_the_past_ticks(tmp_path: Path):
    reg = CollectorRegistry()
    tokens = Counter("pdserve_router_prompt_tokens", "prompt tokens routed", registry=reg)
    running = Gauge("vllm:num_requests_running", "running", ["pdserve_role", "pod"], registry=reg)
    for role, pod in (("prefill", "a"), ("prefill", "b"), ("decode", "c")):
        running.labels(role, pod).set(1)
    stop = threading.Event()

    def route() -> None:  # 500 tokens every 0.1 s
        while not stop.wait(0.1):
            tokens.inc(RATE / 10)

    server, thread = start_http_server(0, addr="127.0.0.1", registry=reg)
    targets = tmp_path / "targets.json"
    targets.write_text(json.dumps([{"targets": [f"127.0.0.1:{server.server_port}"],
                                    "labels": {"namespace": "test", "pdserve_service": "svc"}}]))
    router = threading.Thread(target=route, daemon=True)
    router.start()
    now_pools = (PoolState(7), PoolState(5))
    try:
        with PrometheusServer([file_sd("svc", targets)]) as prom:
            began = time.time()
            source = PrometheusSource(prom.url, PromQL(SEL, window="5s", peak_range="2s", scrape="1s"), timeout_s=5)
            time.sleep(max(0.0, began + 16 - time.time()))  # the rate window (5 s) full for the last ticks
            now = time.time()
            # from 20 s before Prometheus started (nothing stored) to a second ago, 1 s apart, off the whole second
            ticks = [began - 20.5 + k for k in range(int(now - began) + 20)]
            obs = source.history(ticks, *now_pools)
            assert [o.timestamp for o in obs] == ticks
            before = [o for o in obs if o.timestamp < began - 1]
            assert before and all(math.isnan(o.router_prompt_tokens_rate) for o in before)
            assert all((o.prefill, o.decode) == now_pools for o in before)  # no pods stored: the pools now
            late = obs[-3:]
            assert late and all(o.router_prompt_tokens_rate == pytest.approx(RATE, rel=0.2) for o in late), \
                [o.router_prompt_tokens_rate for o in late]
            assert all((o.prefill.replicas, o.decode.replicas) == (2, 1) for o in late)  # the pods' series count

            pol = queue_policy()
            started = warm_up(pol, source, *now_pools, time.time())
            assert started.line.startswith("warm start: ") and "empty skipped" in started.line, started
            assert not started.failed
    finally:
        stop.set()
        router.join(5)
        server.shutdown()
        server.server_close()


def test_warm_up_starts_cold_and_says_why():
    pol = queue_policy()
    closed = PrometheusSource("http://127.0.0.1:9", PromQL(SEL), timeout_s=1)  # the discard port: refused
    started = warm_up(pol, closed, PoolState(1), PoolState(1), 1000.0)
    assert started.line.startswith("cold start: no history (unreachable") and started.failed, started

    class Scrape:  # a direct scrape keeps no past
        def observe(self, now, prefill, decode): ...

    # by design, not a failure: no Warning
    assert warm_up(pol, Scrape(), PoolState(1), PoolState(1), 1000.0) == Started("cold start: the metric source keeps no history")
