"""The planner's burst peak through a real Prometheus: the router's own RouterMetrics scraped,
the planner's PromQL (``max_over_time`` of the burst gauge at its budget) evaluated by Prometheus."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from prometheus_client import start_http_server

from pdserve.planner.core.observation import PoolState
from pdserve.planner.shell.source_prometheus import PrometheusSource, PromQL
from pdserve.router.shell.metrics import RouterMetrics
from prometheus_server import PrometheusServer, file_sd

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="needs Debian's prometheus binary"),
]


def test_prometheus_returns_the_burst_gauge_at_the_planners_budget(tmp_path: Path):
    # 270k prompt tokens routed in 3 s, then a clock that stands still: the gauge reads the
    # same at every scrape (budget 2 s: 270k / (3 s + 2 s) = 54k tokens/s; budget 0: 90k),
    # while the counter's irate(), the old peak, is 0 once the counter stops moving.
    clock = [100.0]
    m = RouterMetrics(clock=lambda: clock[0])
    for i in range(30):
        clock[0] = 100.0 + i * 0.1
        m.observe_prefix(9000, 0)
    clock[0] = 110.0
    server, _ = start_http_server(0, addr="127.0.0.1", registry=m.registry)
    targets = tmp_path / "targets.json"
    targets.write_text(json.dumps([{"targets": [f"127.0.0.1:{server.server_port}"],
                                    "labels": {"namespace": "test", "pdserve_service": "svc"}}]))
    try:
        with PrometheusServer([file_sd("router", targets)]) as prom:
            url = prom.url
            sel = 'namespace="test",pdserve_service="svc"'
            sources = {b: PrometheusSource(url, PromQL(sel, window="10s", peak_range="10s", scrape="1s",
                                                       burst_budget_s=b), timeout_s=2) for b in (2.0, 0.0, None)}
            seen: dict = {}
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline:
                seen = {b: s.observe(time.time(), PoolState(1), PoolState(1)).router_prompt_tokens_peak for b, s in sources.items()}
                if seen[2.0] > 0 and seen[0.0] > 0 and seen[None] == seen[None]:
                    break
                time.sleep(0.5)
            assert seen[2.0] == pytest.approx(54_000), seen
            assert seen[0.0] == pytest.approx(90_000), seen
            assert seen[None] == pytest.approx(0.0), seen  # the scrape-resolution irate peak of a still counter
    finally:
        server.shutdown()
        server.server_close()
