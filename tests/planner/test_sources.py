import http.server
import math
import socket
import threading

import pytest

from pdserve.planner.core.observation import PoolState
from pdserve.planner.shell.source_prometheus import PrometheusSource, PromQL
from pdserve.planner.shell.source_scrape import ScrapeSource, Target, histogram_quantile, parse_target

from fake_vllm_metrics import FakeVllm

P, D = PoolState(1), PoolState(2)


@pytest.fixture
def fakes():
    made = []

    def make(**kw):
        f = FakeVllm(**kw)
        made.append(f)
        return f

    yield make
    for f in made:
        f.close()


@pytest.mark.parametrize("old_names", [False, True])
def test_scrape_rates_means_and_quantiles(fakes, old_names):
    pre, dec = fakes(old_names=old_names), fakes(old_names=old_names)
    src = ScrapeSource([Target(pre.url, "prefill"), Target(dec.url + "/metrics", "decode")])
    first = src.observe(100.0, P, D)
    assert math.isnan(first.request_rate) and first.error is None  # no rates from one scrape
    pre.finish(20, isl=1000, osl=1, ttft=0.2, itl=0.02, hit_tokens=250)  # the prefill leg
    dec.finish(20, isl=1000, osl=200, ttft=0.3, itl=0.03)
    dec.running.labels(**dec.lab).set(7)
    dec.kv.labels(**dec.lab).set(0.4)
    o = src.observe(110.0, P, D)
    src.close()
    assert o.request_rate == pytest.approx(2.0)  # 20 decode completions in 10 s
    assert o.mean_isl == pytest.approx(1000) and o.mean_osl == pytest.approx(200)
    assert o.ttft_mean_s == pytest.approx(0.2) and o.itl_mean_s == pytest.approx(0.03)
    assert o.prefill_ttft_mean_s == pytest.approx(0.2) and 0.1 < o.prefill_ttft_tail_s <= 0.25
    assert 0.1 < o.ttft_tail_s <= 0.25 and 0.025 < o.itl_tail_s <= 0.05
    assert o.prefix_hit_ratio == pytest.approx(0.25)
    assert o.running == 7 and o.kv_usage == pytest.approx(0.4)
    assert (o.prefill, o.decode) == (P, D)


def test_scrape_failure_is_an_error_observation(fakes):
    f = fakes()
    url = f.url
    f.close()
    o = ScrapeSource([Target(url)]).observe(1.0, P, D)
    assert o.error and "scrape failed" in o.error and url in o.error


def test_scrape_target_churn(fakes):
    a, b = fakes(), fakes()
    targets = [Target(a.url)]
    src = ScrapeSource(lambda: targets)
    a.finish(10, 100, 10, 0.1, 0.01)
    src.observe(0.0, P, D)
    targets.append(Target(b.url))  # a new worker: contributes from its second scrape on
    a.finish(10, 100, 10, 0.1, 0.01)
    b.finish(50, 100, 10, 0.1, 0.01)
    o = src.observe(10.0, P, D)
    assert o.request_rate == pytest.approx(1.0)
    o = src.observe(20.0, P, D)
    assert o.request_rate == pytest.approx(0.0)


def test_parse_target():
    assert parse_target("http://h:1") == Target("http://h:1")
    assert parse_target("decode=http://h:1") == Target("http://h:1", "decode")
    assert parse_target("router=http://h:1").role == "router"
    with pytest.raises(ValueError, match="role must be prefill, decode or router"):
        parse_target("gateway=http://h:1")
    with pytest.raises(ValueError, match="expected an http"):
        parse_target("prefill=h:1")


def test_histogram_quantile_like_promql():
    b = {0.1: 10.0, 0.5: 30.0, 1.0: 40.0, math.inf: 40.0}
    assert histogram_quantile(0.25, b) == pytest.approx(0.1)
    assert histogram_quantile(0.5, b) == pytest.approx(0.3)
    assert histogram_quantile(0.99, {0.1: 0.0, math.inf: 5.0}) == pytest.approx(0.1)
    assert math.isnan(histogram_quantile(0.5, {0.1: 0.0, math.inf: 0.0}))


def test_promql_queries_have_fallbacks():
    q = PromQL('namespace="ns",pdserve_service="s"', window="30s", quantile=0.99).queries()
    assert q["request_rate"] == ('(sum(rate(vllm:request_success_total{namespace="ns",pdserve_service="s",pdserve_role="decode"}[30s])))'
                                 ' or (sum(rate(vllm:request_success_total{namespace="ns",pdserve_service="s"}[30s])))'
                                 # the spelling a Prometheus 2.x scrape of vLLM stores without the chart's relabeling
                                 ' or (sum(rate(vllm_request_success_total{namespace="ns",pdserve_service="s",pdserve_role="decode"}[30s])))'
                                 ' or (sum(rate(vllm_request_success_total{namespace="ns",pdserve_service="s"}[30s])))')
    assert "vllm:time_per_output_token_seconds_bucket" in q["itl_tail_s"] and "histogram_quantile(0.99" in q["itl_tail_s"]
    assert "vllm:gpu_cache_usage_perc" in q["kv_usage"]
    assert "vllm:gpu_prefix_cache_hits_total" in q["prefix_hit_ratio"]
    assert PromQL("")._sel(None) == "{}"
    # the prefill engines' own TTFT: the prefill role's series only, in both spellings
    assert q["prefill_ttft_mean_s"] == (
        '(sum(rate(vllm:time_to_first_token_seconds_sum{namespace="ns",pdserve_service="s",pdserve_role="prefill"}[30s]))'
        ' / (sum(rate(vllm:time_to_first_token_seconds_count{namespace="ns",pdserve_service="s",pdserve_role="prefill"}[30s])) > 0))'
        ' or (sum(rate(vllm_time_to_first_token_seconds_sum{namespace="ns",pdserve_service="s",pdserve_role="prefill"}[30s]))'
        ' / (sum(rate(vllm_time_to_first_token_seconds_count{namespace="ns",pdserve_service="s",pdserve_role="prefill"}[30s])) > 0))')
    assert q["prefill_ttft_tail_s"].count("pdserve_role=\"prefill\"") == 2 and "histogram_quantile(0.99" in q["prefill_ttft_tail_s"]


def test_prometheus_down_is_an_error_observation():
    o = PrometheusSource("http://127.0.0.1:9", PromQL(""), timeout_s=1).observe(5.0, P, D)
    assert o.error and "prometheus http://127.0.0.1:9" in o.error and o.timestamp == 5.0


def test_prometheus_failures_read_as_one_short_line():
    """status.planner.reason and the PlannerHeld Event carry this: the cause, not requests' kilobyte
    of URL-encoded query (the chaos e2e saw a 1.2 kB reason for a refused connection)."""
    refused = PrometheusSource("http://127.0.0.1:9", PromQL('namespace="ns"'), timeout_s=1).observe(5.0, P, D).error
    assert refused == "prometheus http://127.0.0.1:9: unreachable: ConnectionRefusedError: [Errno 111] Connection refused"

    with socket.socket() as silent:  # accepts connections (backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        hung = PrometheusSource(url, PromQL('namespace="ns"'), timeout_s=0.3).observe(5.0, P, D).error
    assert hung == f"prometheus {url}: timed out: no answer within 0.3 s", hung

    class Failing(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(503)
            self.end_headers()
            self.wfile.write(b"overloaded " * 500)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Failing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        failed = PrometheusSource(url, PromQL('namespace="ns"'), timeout_s=1).observe(5.0, P, D).error
    finally:
        server.shutdown()
        server.server_close()
    assert failed is not None and "HTTP Status Code 503" in failed and len(failed) < 300, failed  # not 5.5 kB of body


def test_router_target_gives_the_wake_up_signal():
    from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

    reg = CollectorRegistry()
    reqs = Counter("pdserve_router_requests", "", ["status"], registry=reg)
    inflight = Gauge("pdserve_router_inflight_requests", "", registry=reg)
    prompt = Counter("pdserve_router_prompt_tokens", "", registry=reg)
    server, _ = start_http_server(0, addr="127.0.0.1", registry=reg)
    try:
        src = ScrapeSource([parse_target(f"router=http://127.0.0.1:{server.server_port}")])
        src.observe(0.0, PoolState(0), PoolState(0))
        reqs.labels(status="503").inc(4)
        inflight.set(2)
        prompt.inc(3000)
        o = src.observe(2.0, PoolState(0), PoolState(0))
        assert o.router_request_rate == pytest.approx(2.0) and o.router_inflight == 2
        assert o.router_prompt_tokens_rate == pytest.approx(1500.0)  # counted as routed, before completion
        assert math.isnan(o.request_rate)  # no worker: the pools' own metrics stay unknown
    finally:
        server.shutdown()
        server.server_close()
    q = PromQL('namespace="ns"').queries()
    assert "pdserve_router_inflight_requests" in q["router_inflight"]
    assert "rate(pdserve_router_prompt_tokens_total" in q["router_prompt_tokens_rate"]
    assert "max_over_time((sum(irate(pdserve_router_prompt_tokens_total{namespace=\"ns\"}[1m])))[30s:15s])" \
        in q["router_prompt_tokens_peak"]
    assert 'pdserve_role="prefill"' in q["prefill_waiting"] and 'pdserve_role="decode"' in q["decode_waiting"]


def test_promql_keys_are_observation_metric_fields():
    from pdserve.planner.shell.source_prometheus import METRIC_FIELDS, _metric_fields

    assert set(PromQL("").queries()) <= METRIC_FIELDS
    # Keys reach Observation(**...) unchecked by the type checker: a non-metric field is refused.
    with pytest.raises(ValueError, match="not an Observation metric field: error"):
        _metric_fields({"request_rate": 1.0, "error": 2.0})


def test_the_peak_is_the_routers_burst_gauge_at_the_planners_budget():
    """The router's own RouterMetrics over real HTTP: with a budget the scrape source reads
    the burst gauge's series for it; without one, the counter's rate as before."""
    from prometheus_client import start_http_server

    from pdserve.router.shell.metrics import RouterMetrics

    clock = [100.0]
    m = RouterMetrics(clock=lambda: clock[0])
    server, _ = start_http_server(0, addr="127.0.0.1", registry=m.registry)
    try:
        target = [parse_target(f"router=http://127.0.0.1:{server.server_port}")]
        with_gauge, without = ScrapeSource(target, burst_budget_s=2.0), ScrapeSource(target)
        for src in (with_gauge, without):
            src.observe(0.0, P, D)
        for i in range(30):  # 270k prompt tokens in 3 s
            clock[0] = 100.0 + i * 0.1
            m.observe_prefix(9000, 0)
        clock[0] = 110.0
        assert with_gauge.observe(15.0, P, D).router_prompt_tokens_peak == pytest.approx(270_000 / 5)
        assert without.observe(15.0, P, D).router_prompt_tokens_peak == pytest.approx(270_000 / 15)
    finally:
        server.shutdown()
        server.server_close()
    q = PromQL('namespace="ns"', burst_budget_s=0.5).queries()["router_prompt_tokens_peak"]
    gauge, fallback = q.split(" or ", 1)
    assert gauge == ('(max_over_time((sum(pdserve_router_prompt_tokens_burst_rate{namespace="ns",budget="0.5"}))'
                     '[30s:15s]))')
    assert "irate(pdserve_router_prompt_tokens_total" in fallback  # a router without the gauge


def test_a_burst_budget_the_router_does_not_export_is_refused():
    from pdserve.planner.core.policy import PolicyConfig

    assert PolicyConfig(burst_budget_s=2.0).invalid() is None
    assert "burst budget 3 s is not one the router exports (0, 0.5, 1, 2, 4)" == PolicyConfig(burst_budget_s=3.0).invalid()
