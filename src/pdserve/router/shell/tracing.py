"""OpenTelemetry tracing of the router: one trace per request, a span per hop.

A request's trace is ``POST /v1/...`` (the router's SERVER span; its parent is the
client's ``traceparent`` when it sent one) with children ``route`` (the scheduler's
decision), ``prefill`` and ``decode`` (CLIENT spans, one per upstream call; their context
goes to the worker as W3C ``traceparent``, so vLLM's own ``llm_request`` span, exported
with vLLM's ``--otlp-traces-endpoint``, joins the trace under them), ``kv_handoff``
(prefill answered with ``kv_transfer_params`` -> the decode worker's first token: the
time the KV read and the decode queue cost) and ``migration`` (a lost stream resumed on
another worker).

Off by default: the handler keeps ``Flow.trace = None`` and each hook is one ``is None``
test, so an untraced request does no OpenTelemetry work at all (bench/router/tracing.py
measures it). Spans go to an OTLP/HTTP exporter through the SDK's batch processor (a
background thread); the provider is the router's own, never the process-global one.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from pdserve.router.policies import Decision
from pdserve.router.shell.exchange import Reply, StreamOut

log = logging.getLogger("pdserve.router")
_PROPAGATOR = TraceContextTextMapPropagator()
SERVICE_NAME = "pdserve-router"


def traces_url(endpoint: str) -> str:
    """OTLP/HTTP takes the full ``/v1/traces`` URL; a bare collector address gets that path
    (vLLM's flag is usually given as ``http://collector:4317``-style base addresses)."""
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"--otlp-traces-endpoint must be an http(s):// URL, got {endpoint!r}")
    return endpoint if parts.path not in ("", "/") else endpoint.rstrip("/") + "/v1/traces"


def provider_for(endpoint: str, sample_ratio: float, service_name: str = SERVICE_NAME) -> TracerProvider:
    """A provider exporting OTLP/HTTP protobuf to ``endpoint``. Sampling is parent-based:
    a client's sampled/unsampled decision is kept, new traces are kept at ``sample_ratio``."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    provider = TracerProvider(resource=Resource.create({"service.name": service_name}),
                              sampler=ParentBased(TraceIdRatioBased(sample_ratio)))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=traces_url(endpoint))))
    return provider


class Tracing:
    """The router's tracer; ``start`` opens one request's trace."""

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("pdserve.router")

    def start(self, headers: Mapping[str, str], path: str, request_id: str) -> RequestTrace:
        parent = _PROPAGATOR.extract(headers) if "traceparent" in headers else None
        span = self.tracer.start_span(f"POST {path}", context=parent, kind=SpanKind.SERVER,
                                      attributes={"http.request.method": "POST", "url.path": path,
                                                  "pdserve.request_id": request_id})
        return RequestTrace(self.tracer, span)

    def shutdown(self) -> None:
        self.provider.shutdown()  # flushes what the batch processor still holds


class RequestTrace:
    """One request's spans. Every method is called only when tracing is on."""

    __slots__ = ("tracer", "root", "ctx", "handoff", "decode", "migrating")

    def __init__(self, tracer: trace.Tracer, root: Span) -> None:
        self.tracer = tracer
        self.root = root
        self.ctx: Context = trace.set_span_in_context(root)
        self.handoff: Span | None = None
        self.decode: Span | None = None
        self.migrating: Span | None = None

    def parsed(self, model: str | None, prompt_tokens: int, stream: bool) -> None:
        if model:
            self.root.set_attribute("gen_ai.request.model", model)
        self.root.set_attribute("gen_ai.usage.prompt_tokens", prompt_tokens)
        self.root.set_attribute("pdserve.stream", stream)

    def routed(self, start_ns: int, end_ns: int, mode: str, prefill: Decision | None, decode: Decision | None,
               notes: list[str]) -> None:
        """The scheduler's decision, timed by the caller (the decision itself stays pure)."""
        span = self.tracer.start_span("route", context=self.ctx, start_time=start_ns)
        span.set_attribute("pdserve.mode", mode)
        for role, d in (("prefill", prefill), ("decode", decode)):
            if d is not None:
                span.set_attributes({f"pdserve.{role}.worker": d.worker_id, f"pdserve.{role}.policy": d.policy,
                                     f"pdserve.{role}.overlap_blocks": d.overlap_blocks,
                                     f"pdserve.{role}.new_prefill_tokens": d.new_prefill_tokens,
                                     f"pdserve.{role}.reason": d.reason})
        if notes:
            span.set_attribute("pdserve.notes", notes)
        span.end(end_time=end_ns)
        self.root.set_attribute("pdserve.mode", mode)

    def call(self, name: str, headers: dict[str, str], **attrs: str | int) -> tuple[Span, dict[str, str]]:
        """A CLIENT span for an upstream call, and ``headers`` with its ``traceparent``:
        the worker's spans become its children."""
        span = self.tracer.start_span(name, context=self.ctx, kind=SpanKind.CLIENT, attributes=attrs)
        out = dict(headers)
        _PROPAGATOR.inject(out, context=trace.set_span_in_context(span))
        if name == "decode":
            self.decode = span
        return span, out

    def handoff_start(self, kv: Mapping[str, Any]) -> None:
        """Prefill returned ``kv_transfer_params``: the hand-off lasts until decode's first token."""
        attrs: dict[str, str | int] = {}
        for key in ("remote_engine_id", "remote_host", "remote_port"):
            if kv.get(key) is not None:
                attrs[f"pdserve.kv.{key}"] = str(kv[key])
        blocks = kv.get("remote_block_ids")
        if isinstance(blocks, list):
            attrs["pdserve.kv.blocks"] = len(blocks)
        self.handoff = self.tracer.start_span("kv_handoff", context=self.ctx, attributes=attrs)

    def first_token(self) -> None:
        if self.handoff is not None:
            self.handoff.end()
            self.handoff = None
        if self.decode is not None:
            self.decode.add_event("first_token")

    def migration(self, failed: str, why: str) -> Span:
        span = self.tracer.start_span("migration", context=self.ctx, attributes={
            "pdserve.migration.from": failed, "pdserve.migration.reason": why})
        self.migrating = span
        return span

    def inject(self, headers: dict[str, str]) -> dict[str, str]:
        """``headers`` plus the ``traceparent`` of the open migration (else the request)."""
        _PROPAGATOR.inject(headers, context=trace.set_span_in_context(self.migrating or self.root))
        return headers

    async def prefill(self, run: Callable[[dict[str, str]], Awaitable[dict[str, Any] | None]],
                      headers: dict[str, str], worker: Callable[[], Decision | None]) -> dict[str, Any] | None:
        """The handler's prefill step inside a ``prefill`` span; a non-empty result opens the hand-off."""
        span, headers = self.call("prefill", headers)
        try:
            kv = await run(headers)
        except BaseException as e:
            end_call(span, _worker(worker), error=type(e).__name__)
            raise
        d = worker()
        if kv is None:
            span.set_attribute("pdserve.prefill.outcome", "fallback_local")
        else:
            span.set_attribute("pdserve.prefill.outcome", "kv" if kv else "no_kv_params")
        end_call(span, d.worker_id if d else None)
        if kv:
            self.handoff_start(kv)
        return kv

    async def decode_call(self, run: Callable[[dict[str, str]], Awaitable[Reply | StreamOut]],
                          headers: dict[str, str], worker: Callable[[], Decision | None]) -> Reply | StreamOut:
        """The handler's decode step (a streamed answer relayed to its end) inside a ``decode`` span."""
        span, headers = self.call("decode", headers)
        try:
            resp = await run(headers)
        except BaseException as e:
            end_call(span, _worker(worker), error=type(e).__name__)
            raise
        end_call(span, _worker(worker), status=resp.status)
        return resp

    def finish(self, status: int, mode: str) -> None:
        if self.handoff is not None:  # decode never produced a token (error, non-streamed answer)
            self.handoff.end()
            self.handoff = None
        self.root.set_attribute("http.response.status_code", status)
        self.root.set_attribute("pdserve.mode", mode)
        if status >= 500:
            self.root.set_status(Status(StatusCode.ERROR))
        self.root.end()


def _worker(worker: Callable[[], Decision | None]) -> str | None:
    d = worker()
    return d.worker_id if d is not None else None


def end_call(span: Span, worker: str | None = None, status: int | None = None, error: str | None = None) -> None:
    if worker is not None:
        span.set_attribute("server.address", worker)
    if status is not None:
        span.set_attribute("http.response.status_code", status)
    if error is not None or (status is not None and status >= 500):
        span.set_status(Status(StatusCode.ERROR, error))
    span.end()
