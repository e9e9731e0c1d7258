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


def test_history_reads_back_what_the_live_ticks_read(tmp_path: Path):
    """Live ticks, then the same ticks as history: the same values, field for field. Each tick falls half way
    between two of the decode pod's scrapes and is read live 0.6 s after it, as a planner's queries reach
    Prometheus some time after its tick: every sample at or before the tick is stored by then, and the decode pod's
    next one too. Evaluated at the tick, the live read is what the store later says of that tick; evaluated when
    Prometheus receives it (before), it reads that next scrape, which the history at the tick does not."""
    from fake_vllm_metrics import FakeVllm

    reg = CollectorRegistry()
    tokens = Counter("pdserve_router_prompt_tokens", "prompt tokens routed", registry=reg)
    router, _ = start_http_server(0, addr="127.0.0.1", registry=reg)
    pods = {role: FakeVllm() for role in ("prefill", "decode")}
    targets = tmp_path / "targets.json"
    targets.write_text(json.dumps(
        [{"targets": [f"127.0.0.1:{router.server_port}"], "labels": {"namespace": "test", "pdserve_service": "svc"}}]
        + [{"targets": [p.url.removeprefix("http://")],
            "labels": {"namespace": "test", "pdserve_service": "svc", "pdserve_role": role}} for role, p in pods.items()]))
    stop = threading.Event()

    def serve() -> None:  # a request every 0.1 s, its lengths and latencies varying
        i = 0
        while not stop.wait(0.1):
            i += 1
            tokens.inc(300 + 37 * (i % 11))
            for p in pods.values():
                p.finish(1, isl=300 + 37 * (i % 11), osl=40 + i % 7, ttft=0.05 * (1 + i % 5), itl=0.02 * (1 + i % 3))
                p.waiting.labels(**p.lab).set(i % 4)
                p.running.labels(**p.lab).set(2 + i % 3)

    feeder = threading.Thread(target=serve, daemon=True)
    feeder.start()
    pools = (PoolState(2), PoolState(1))
    try:
        with PrometheusServer([file_sd("svc", targets)]) as prom:
            source = PrometheusSource(prom.url, PromQL(SEL, window="5s", peak_range="2s", scrape="1s"), timeout_s=5)
            up = 'timestamp(up{pdserve_service="svc", pdserve_role="decode"})'
            deadline = time.time() + 60
            while not prom.query(up)["data"]["result"] and time.time() < deadline:
                time.sleep(0.5)
            time.sleep(8)  # the 5 s rate window full
            scraped = float(prom.query(up)["data"]["result"][0]["value"][1])
            first = scraped + math.ceil(time.time() - scraped) + 1.5  # half way between its scrapes
            ticks = [round(first + k, 3) for k in range(4)]
            live = []
            for t in ticks:
                time.sleep(max(0.0, t + 0.6 - time.time()))
                live.append(source.observe(t, *pools))
            stored = source.history(ticks, *pools)
    finally:
        stop.set()
        feeder.join(5)
        router.shutdown()
        router.server_close()
        for p in pods.values():
            p.close()

    assert all(o.error is None for o in live), live
    for a, b in zip(live, stored, strict=True):
        la, lb = a.metrics_dict(), b.metrics_dict()
        read = {k for k, v in la.items() if isinstance(v, float) and math.isfinite(v)}
        assert {"request_rate", "mean_isl", "ttft_tail_s", "waiting", "router_prompt_tokens_rate"} <= read, la
        assert {k: lb[k] for k in read} == {k: la[k] for k in read}, (a.timestamp, la, lb)
