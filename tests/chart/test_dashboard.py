"""The Grafana dashboard is valid JSON, templated by `service`, has the panels the
operators need, and every query it runs is valid PromQL for a real Prometheus."""

from __future__ import annotations

import json
import re

import pytest
from dashboard_queries import DASHBOARD, load, queries, substitute
from prometheus_server import PrometheusServer, available


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return load()


def test_dashboard_is_templated_by_service(dashboard: dict) -> None:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["service"]["type"] == "query"
    assert "$namespace" in variables["service"]["definition"], "services are listed per namespace"
    assert variables["service"]["query"]["query"] == variables["service"]["definition"]
    assert variables["datasource"]["type"] == "datasource"
    panel_queries = [q for q in queries(dashboard) if q.ref not in ("variable",)]
    for q in panel_queries:
        assert "$service" in q.expr and "$namespace" in q.expr, f"{q.panel}/{q.ref} is not filtered by $namespace and $service: {q.expr}"
    assert re.fullmatch(r"[a-z0-9-]{1,40}", dashboard["uid"])


def test_dashboard_has_the_required_views(dashboard: dict) -> None:
    exprs = "\n".join(q.expr for q in queries(dashboard))
    for needle in [
        "pdserve_planner_predicted_request_rate",  # request rate predicted
        "pdserve_router_requests_total",  # request rate actual
        "pdserve_router_time_to_first_token_seconds_bucket",  # TTFT as the client sees it
        "pdserve_router_inter_token_latency_seconds_bucket",
        "pdserve_router_request_overhead_seconds_bucket",
        "pdserve_router_pd_handoffs_total",
        "pdserve_planner_slo_ttft_seconds",
        "pdserve_planner_slo_itl_seconds",
        "pdserve_planner_desired_replicas",
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_hits_total",
        "vllm:num_requests_waiting",
        "pdserve_planner_decisions_total",
        "pdserve_planner_held_decisions_total",  # held decisions and their reason
        "vllm:nixl_xfer_time_seconds_bucket",  # KV transfer time, vLLM's own histogram
    ]:
        assert needle in exprs, f"no dashboard query uses {needle}"
    for quantile in ("0.5", "0.9", "0.99"):
        assert f"histogram_quantile({quantile}, sum by (le) (rate(pdserve_router_time_to_first_token_seconds_bucket" in exprs
    annotations = [a for a in dashboard["annotations"]["list"] if a.get("expr")]
    assert any("pdserve_planner_decisions_total" in a["expr"] for a in annotations), "planner decisions are annotations"
    held = [a for a in annotations if "pdserve_planner_held_decisions_total" in a["expr"]]
    assert held and "reason" in held[0]["tagKeys"], "held decisions are annotations tagged with their reason"


def test_committed_dashboard_is_what_the_typed_builders_generate(dashboard: dict) -> None:
    # The chart ships the JSON; pdserve.dashboard.build (grafana-foundation-sdk) is its
    # only source. Run `make dashboard` after changing it.
    from pdserve.dashboard.build import dashboard_json

    assert DASHBOARD.read_text() == dashboard_json(), "charts/pdserve/dashboards/pdserve.json is stale: make dashboard"


def test_panels_do_not_overlap_and_fit_the_grid(dashboard: dict) -> None:
    cells: set[tuple[int, int]] = set()
    for panel in dashboard["panels"]:
        g = panel["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, panel["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps another panel"
                cells.add((x, y))


def test_substitute_refuses_unknown_variables() -> None:
    assert substitute('rate(x{a="$service"}[$__rate_interval])', {"service": "s"}) == 'rate(x{a="s"}[1m])'
    with pytest.raises(KeyError, match=r"\$pool"):
        substitute('x{a="$pool"}', {"service": "s"})


def test_every_panel_queries_the_selected_datasource(dashboard: dict) -> None:
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"] and all(t["refId"] for t in panel["targets"]), panel["title"]
    assert json.loads(DASHBOARD.read_text()) == dashboard


@pytest.mark.prometheus
@pytest.mark.skipif(not available(), reason="Debian's prometheus binary is not installed")
def test_every_query_parses_in_a_real_prometheus(dashboard: dict) -> None:
    with PrometheusServer() as prom:
        for q in queries(dashboard):
            body = prom.query(substitute(q.expr, {"namespace": "default", "service": "demo", "datasource": "prometheus"}))
            assert body["data"]["resultType"] in ("vector", "matrix", "scalar"), q
        with pytest.raises(ValueError, match="bad_data"):
            prom.query("sum(rate(vllm:num_requests_running[1m])")
