"""The Grafana dashboard, built with Grafana's own typed builders (grafana-foundation-sdk).

Pure: ``build_dashboard()`` returns the dashboard as a JSON-ready dict; nothing here
reads or writes files. ``pdserve dashboard`` writes it into the chart, and a test
checks the committed JSON is what this code produces, so the queries live in one
place (this module) and the typed builders keep field names and shapes Grafana's.

Every panel query is filtered by ``$namespace`` and ``$service``; the e2e suite runs
each query against a live Prometheus (``e2e/dashboard_queries.py``).
"""

from __future__ import annotations

import json
from typing import Any

from grafana_foundation_sdk.builders import common as common_b
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus, timeseries
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models.dashboard import AnnotationQuery as AnnotationQueryModel
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DataSourceRef,
    GridPos,
    VariableRefresh,
    VariableSort,
)

UID = "pdserve-service"
DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
# Worker series carry the pod labels the PodMonitor copies; planner series carry the
# resource's own name in `service` (its PodMonitor honours their labels).
WORKER = 'namespace="$namespace",pdserve_service="$service"'
PLANNER = 'namespace="$namespace",service="$service"'
GRID_WIDTH = 24
PANEL_HEIGHT = 8


def _quantiles(metric: str, quantiles: tuple[str, ...] = ("0.5", "0.9", "0.99")) -> list[tuple[str, str]]:
    return [(f"histogram_quantile({q}, sum by (le) (rate({metric}_bucket{{{WORKER}}}[$__rate_interval])))",
             f"p{int(float(q) * 100)}") for q in quantiles]


def _panel(title: str, unit: str, queries: list[tuple[str, str]], description: str) -> timeseries.Panel:
    panel = (timeseries.Panel().title(title).description(description).unit(unit).datasource(DATASOURCE)
             .line_width(1).fill_opacity(10).span_nulls(False)
             .legend(common_b.VizLegendOptions().display_mode(common.LegendDisplayMode.LIST)
                     .placement(common.LegendPlacement.BOTTOM).show_legend(True)))
    for i, (expr, legend) in enumerate(queries):
        panel.with_target(prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(chr(ord("A") + i))
                          .datasource(DATASOURCE))
    return panel


def _slo(metric: str) -> tuple[str, str]:
    # The planner exports the SLO of the resource it sizes (spec.slo), so the line is
    # that DisaggregatedService's own target, not a dashboard constant.
    return f"max(pdserve_planner_slo_{metric}_seconds{{{PLANNER}}})", "SLO (from the resource)"


# (row title, [(panel title, unit, queries, description)]) in display order; each row's
# panels share its width evenly.
PanelSpec = tuple[str, str, list[tuple[str, str]], str]
ROWS: list[tuple[str, list[PanelSpec]]] = [
    ("Load", [
        ("Request rate: actual and predicted", "reqps", [
            (f"sum(rate(pdserve_router_requests_total{{{WORKER}}}[$__rate_interval]))", "router requests"),
            (f'sum(rate(vllm:request_success_total{{{WORKER},pdserve_role="decode"}}[$__rate_interval]))',
             "decode completions"),
            (f"max(pdserve_planner_observed_request_rate{{{PLANNER}}})", "planner observed"),
            (f"max(pdserve_planner_predicted_request_rate{{{PLANNER}}})", "planner forecast"),
        ], "Requests per second at the router and completed by decode, with what the planner saw and forecast."),
        ("Queue depth per pool", "short", [
            (f"sum by (pdserve_role) (vllm:num_requests_waiting{{{WORKER}}})", "waiting {{pdserve_role}}"),
            (f"sum by (pdserve_role) (vllm:num_requests_running{{{WORKER}}})", "running {{pdserve_role}}"),
        ], "Requests waiting and running on each pool's workers."),
    ]),
    ("Latency against SLO", [
        ("Time to first token (p50 / p90 / p99)", "s",
         _quantiles("pdserve_router_time_to_first_token_seconds") + [_slo("ttft")],
         "TTFT as the client sees it at the router (with P/D a decode worker's own TTFT leaves out prefill and "
         "the KV transfer), against the resource's TTFT SLO."),
        ("Inter-token latency (p50 / p90 / p99)", "s",
         _quantiles("pdserve_router_inter_token_latency_seconds") + [_slo("itl")],
         "Gaps between streamed tokens at the router, against the resource's ITL SLO."),
    ]),
    ("Pools", [
        ("Replicas per pool: desired and ready", "short", [
            (f"max by (pool) (pdserve_planner_desired_replicas{{{PLANNER}}})", "desired {{pool}}"),
            (f'count by (pdserve_role) (up{{{WORKER},pdserve_role=~"prefill|decode"}} == 1)',
             "ready {{pdserve_role}}"),
            (f"max(pdserve_planner_held{{{PLANNER}}})", "decision held"),
        ], "Replicas the planner decided per pool and workers scraped up; planner decisions and held "
           "decisions (with their reason) are annotations."),
        ("KV cache usage per pool", "percentunit", [
            (f"avg by (pdserve_role) (vllm:kv_cache_usage_perc{{{WORKER}}})", "mean {{pdserve_role}}"),
            (f"max by (pdserve_role) (vllm:kv_cache_usage_perc{{{WORKER}}})", "max {{pdserve_role}}"),
        ], "Fraction of KV-cache blocks in use."),
    ]),
    ("Routing and KV transfer", [
        ("Prefix cache hit ratio", "percentunit", [
            (f"sum by (pdserve_role) (rate(vllm:prefix_cache_hits_total{{{WORKER}}}[$__rate_interval])) / "
             f"sum by (pdserve_role) (rate(vllm:prefix_cache_queries_total{{{WORKER}}}[$__rate_interval]))",
             "{{pdserve_role}}"),
        ], "Prompt tokens served from the prefix cache, per pool (the workers' own counters)."),
        ("KV transfer time (p50 / p99)", "s",
         _quantiles("vllm:nixl_xfer_time_seconds", ("0.5", "0.99")),
         "Duration of NIXL KV-cache transfers as the decode workers report them (vllm:nixl_xfer_time_seconds)."),
        ("Router overhead (p50 / p99)", "s",
         _quantiles("pdserve_router_request_overhead_seconds", ("0.5", "0.99")),
         "Router time from a request's arrival to its first upstream write."),
        ("Prefill → decode handoffs", "reqps", [
            (f"sum by (outcome) (rate(pdserve_router_pd_handoffs_total{{{WORKER}}}[$__rate_interval]))",
             "{{outcome}}"),
        ], "Outcome of each prefill → decode handoff."),
    ]),
]


def _variables() -> list[dash.QueryVariable | dash.DatasourceVariable]:
    def query_var(name: str, label: str, definition: str) -> dash.QueryVariable:
        return (dash.QueryVariable(name).label(label).datasource(DATASOURCE)
                .query({"query": definition, "refId": name}).refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
                .sort(VariableSort.ALPHABETICAL_ASC).include_all(False).multi(False))

    namespace = query_var("namespace", "Namespace", "label_values(vllm:num_requests_running, namespace)")
    service = query_var("service", "DisaggregatedService",
                        'label_values(vllm:num_requests_running{namespace="$namespace"}, pdserve_service)')
    return [dash.DatasourceVariable("datasource").label("Prometheus").type("prometheus"), namespace, service]


def _annotations() -> list[Builder[AnnotationQueryModel]]:
    decisions = (dash.AnnotationQuery().name("Planner decisions").datasource(DATASOURCE).enable(True)
                 .icon_color("orange")
                 .expr(f"changes(pdserve_planner_decisions_total{{{PLANNER}}}[1m]) > 0"))
    held = (dash.AnnotationQuery().name("Planner held decisions").datasource(DATASOURCE).enable(True)
            .icon_color("red")
            .expr(f"sum by (reason) (changes(pdserve_planner_held_decisions_total{{{PLANNER}}}[1m])) > 0"))
    return [decisions, held]


def _with_text_fields(annotation: dict[str, Any], title: str, tags: str, text: str) -> dict[str, Any]:
    # Prometheus annotation fields the SDK's generic AnnotationQuery does not model.
    return {**annotation, "step": "30s", "titleFormat": title, "tagKeys": tags, "textFormat": text}


def build_dashboard() -> dict[str, Any]:
    """The dashboard as Grafana's JSON model (a plain dict)."""
    board = (dash.Dashboard("pdserve: disaggregated service").uid(UID)
             .description("One DisaggregatedService: load and forecast, TTFT/ITL against its SLO, pools and "
                          "planner decisions, KV cache, prefix hits, KV transfer, router overhead.")
             .tags(["pdserve", "llm", "vllm"]).refresh("10s").time("now-30m", "now").timezone("browser")
             .editable().tooltip(DashboardCursorSync.CROSSHAIR).annotations(_annotations()))
    for variable in _variables():
        board.with_variable(variable)
    y = 0
    for row_title, panels in ROWS:
        board.with_row(dash.Row(row_title).grid_pos(GridPos(h=1, w=GRID_WIDTH, x=0, y=y)))
        y += 1
        width = GRID_WIDTH // len(panels)
        for i, (title, unit, queries, description) in enumerate(panels):
            board.with_panel(_panel(title, unit, queries, description)
                             .grid_pos(GridPos(h=PANEL_HEIGHT, w=width, x=i * width, y=y)))
        y += PANEL_HEIGHT
    model: dict[str, Any] = json.loads(json.dumps(board.build(), cls=JSONEncoder))
    # Panel ids are Grafana's to assign but must be unique; number them in order.
    for i, panel in enumerate(model["panels"], start=1):
        panel["id"] = i
    for variable in model["templating"]["list"]:
        if variable["type"] == "query":  # what Grafana shows as the variable's query
            variable["definition"] = variable["query"]["query"]
    decisions, held = model["annotations"]["list"]
    model["annotations"]["list"] = [
        _with_text_fields(decisions, "planner decision", "service", "replicas changed"),
        _with_text_fields(held, "planner held a decision", "reason", "held: {{reason}}"),
    ]
    return model


def dashboard_json() -> str:
    return json.dumps(build_dashboard(), indent=2, sort_keys=False) + "\n"
