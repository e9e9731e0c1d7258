"""OpenTelemetry tracing: the router's spans (SDK in-memory exporter) against real mock
workers on loopback, and the W3C traceparent the workers receive."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import pytest
from aiohttp import web
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

from pdserve.router.shell.cli import build_parser, config_from_args
from pdserve.router.core.spec import RoutingSpec
from pdserve.router.shell.tracing import Tracing, traces_url
from tests.router.conftest import (MODEL, RouterHandle, kill, read_sse, router_config, run_router, serve_app, spawn,
                                  stream_text, wait_for)

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"


def traced(r: RouterHandle, ratio: float = 1.0) -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(ratio)))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    r.state.tracing = Tracing(provider)
    return exporter


def by_name(spans: tuple[ReadableSpan, ...]) -> dict[str, list[ReadableSpan]]:
    out: dict[str, list[ReadableSpan]] = {}
    for s in spans:
        out.setdefault(s.name, []).append(s)
    return out


async def finished(exporter: InMemorySpanExporter, *names: str) -> dict[str, list[ReadableSpan]]:
    """The finished spans once every one of ``names`` has ended. A stream's body is complete
    for the client when the relay writes its [DONE] chunk (with the body's end), before the
    relay sees the worker's end and the handler returns, so the decode and request spans end
    a little after the client's last read: the test waits for them."""
    await wait_for(lambda: set(names) <= set(by_name(exporter.get_finished_spans())), timeout=10.0,
                   what=f"spans {names} to end")
    return by_name(exporter.get_finished_spans())


@asynccontextmanager
async def recording_proxy(upstream: str) -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    """A loopback hop in front of a real mock worker that records the headers it is sent
    (non-streamed requests only: it reads the whole answer)."""
    seen: list[dict[str, str]] = []
    session = aiohttp.ClientSession()

    async def forward(request: web.Request) -> web.Response:
        if request.method == "POST":  # completions, not the router's scrapes
            seen.append({k.lower(): v for k, v in request.headers.items()})
        hdrs = {k: v for k, v in request.headers.items() if k.lower() in ("traceparent", "x-request-id")}
        async with session.request(request.method, upstream + request.path_qs, data=await request.read(),
                                   headers={**hdrs, "Content-Type": "application/json"}) as resp:
            return web.Response(body=await resp.read(), status=resp.status, content_type=resp.content_type)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", forward)
    try:
        async with serve_app(app) as (url, _port):
            yield url, seen
    finally:
        await session.close()


async def test_pd_stream_is_one_trace_under_the_clients_traceparent(pd_workers) -> None:
    prefill, decode = pd_workers
    cfg = router_config(prefill=[w.url for w in prefill], decode=[w.url for w in decode], scrape_interval_s=60)
    async with run_router(cfg) as r:
        exporter = traced(r)
        body = {"model": MODEL, "messages": [{"role": "user", "content": "trace me " * 40}], "max_tokens": 8,
                "stream": True}
        resp = await r.post("/v1/chat/completions", body,
                            headers={"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"})
        assert resp.status == 200
        events = await read_sse(resp)
        assert events[-1] == "[DONE]" and stream_text(events, "chat")
        spans = await finished(exporter, "POST /v1/chat/completions", "decode")
    assert set(spans) == {"POST /v1/chat/completions", "route", "prefill", "kv_handoff", "decode"}, spans
    (root,) = spans["POST /v1/chat/completions"]
    # The client's trace is honoured: same trace id, its span is the router's parent.
    assert f"{root.context.trace_id:032x}" == CLIENT_TRACE
    assert root.parent is not None and f"{root.parent.span_id:016x}" == CLIENT_SPAN
    assert root.attributes["pdserve.mode"] == "pd" and root.attributes["http.response.status_code"] == 200
    assert root.attributes["gen_ai.request.model"] == MODEL
    for name in ("route", "prefill", "kv_handoff", "decode"):
        (s,) = spans[name]
        assert s.context.trace_id == root.context.trace_id and s.parent is not None
        assert s.parent.span_id == root.context.span_id, name
    route, pre, handoff, dec = (spans[n][0] for n in ("route", "prefill", "kv_handoff", "decode"))
    assert route.attributes["pdserve.prefill.worker"] == pre.attributes["server.address"]
    assert pre.attributes["server.address"] in {w.url for w in prefill}
    assert dec.attributes["server.address"] in {w.url for w in decode}
    assert pre.attributes["pdserve.prefill.outcome"] == "kv"
    assert handoff.attributes["pdserve.kv.blocks"] >= 1 and handoff.attributes["pdserve.kv.remote_engine_id"]
    # Order in time: decide, prefill, then hand-off up to decode's first token, inside decode.
    assert route.end_time <= pre.start_time and pre.end_time <= handoff.start_time
    assert [e.name for e in dec.events] == ["first_token"]
    assert dec.start_time <= handoff.end_time <= dec.end_time <= root.end_time


async def test_workers_receive_the_call_spans_traceparent(worker_stack) -> None:
    (p,) = spawn(worker_stack, 1, pd=True, events=False)
    (d,) = spawn(worker_stack, 1, pd=True, events=False)
    async with recording_proxy(p.url) as (purl, pseen), recording_proxy(d.url) as (durl, dseen):
        cfg = router_config(prefill=[purl], decode=[durl], scrape_interval_s=60)
        async with run_router(cfg) as r:
            body = {"model": MODEL, "prompt": "propagate " * 40, "max_tokens": 4}
            resp = await r.post("/v1/completions", body)  # tracing off: nothing is added
            assert resp.status == 200, await resp.text()
            assert [h for h in pseen + dseen if "traceparent" in h] == []
            exporter = traced(r)
            resp = await r.post("/v1/completions", body)
            assert resp.status == 200, await resp.text()
            spans = by_name(exporter.get_finished_spans())
    (pre,), (dec,) = spans["prefill"], spans["decode"]
    # Each worker's parent is the router's span for that call: vLLM's llm_request span nests under it.
    for seen, span in ((pseen, pre), (dseen, dec)):
        version, trace_id, parent_id, flags = seen[-1]["traceparent"].split("-")
        assert (version, trace_id, parent_id) == ("00", f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}")
        assert int(flags, 16) & 1  # sampled


async def test_unsampled_client_trace_records_nothing_but_still_propagates(worker_stack) -> None:
    (d,) = spawn(worker_stack, 1, pd=False, events=False)
    async with recording_proxy(d.url) as (durl, seen):
        async with run_router(router_config(decode=[durl], scrape_interval_s=60)) as r:
            exporter = traced(r)
            resp = await r.post("/v1/completions", {"model": MODEL, "prompt": "quiet", "max_tokens": 2},
                                headers={"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-00"})
            assert resp.status == 200
            assert exporter.get_finished_spans() == ()
    # The client's decision (not sampled) reaches the worker, so vLLM does not trace it either.
    assert seen[-1]["traceparent"].startswith(f"00-{CLIENT_TRACE}-") and seen[-1]["traceparent"].endswith("-00")


async def test_migration_is_a_span_under_the_request(worker_stack) -> None:
    workers = spawn(worker_stack, 2, speedup=1.0, pd=False, events=False)
    cfg = router_config(decode=[w.url for w in workers], routing=RoutingSpec(policy="round_robin"),
                        scrape_interval_s=60)
    async with run_router(cfg) as r:
        exporter = traced(r)
        body = {"model": MODEL, "prompt": "a long story " * 10, "max_tokens": 40, "ignore_eos": True, "stream": True}
        resp = await r.post("/v1/completions", body)
        assert resp.status == 200
        victim_url = resp.headers["x-pdserve-route"].split("decode=")[1].split(" ")[0]
        seen = 0
        async for chunk in resp.content.iter_any():
            seen += chunk.count(b'"text"')
            if seen >= 5:
                break
        kill(next(w for w in workers if w.url == victim_url))
        assert (await read_sse(resp))[-1] == "[DONE]"
        spans = await finished(exporter, "migration", "POST /v1/completions")
    (mig,), (root,) = spans["migration"], spans["POST /v1/completions"]
    assert mig.parent is not None and mig.parent.span_id == root.context.span_id
    assert mig.attributes["pdserve.migration.from"] == victim_url
    (note,) = mig.attributes["pdserve.migration.notes"]
    assert note.startswith(f"migrated {victim_url} -> ")


def test_cli_flags_and_refusals() -> None:
    args = build_parser().parse_args(["--decode", "http://w:8000", "--tokenizer-mode", "mock",
                                      "--otlp-traces-endpoint", "http://otel:4318", "--otlp-traces-sample-ratio", "0.25"])
    cfg = config_from_args(args)
    cfg.validate()
    assert (cfg.otlp_traces_endpoint, cfg.otlp_traces_sample_ratio) == ("http://otel:4318", 0.25)
    assert traces_url("http://otel:4318") == "http://otel:4318/v1/traces"
    assert traces_url("http://otel:4318/custom/traces") == "http://otel:4318/custom/traces"
    for bad, msg in ((dict(otlp_traces_sample_ratio=1.5), "sample-ratio"), (dict(otlp_traces_endpoint="otel:4317"),
                                                                            "otlp-traces-endpoint")):
        with pytest.raises(ValueError, match=msg):
            router_config(decode=["http://w:8000"], **bad).validate()
    assert router_config(decode=["http://w:8000"]).otlp_traces_endpoint is None  # off by default
