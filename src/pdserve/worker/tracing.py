"""The mock worker's OpenTelemetry spans, as vLLM emits them (``--otlp-traces-endpoint``).

vLLM 0.33 (``vllm/v1/engine/output_processor.py: OutputProcessor.do_tracing``) ends one
SERVER span named ``llm_request`` when a request finishes: it starts at the request's
arrival, its parent is the context in the request's W3C ``traceparent`` / ``tracestate``
headers (``vllm/tracing/utils.py: TRACE_HEADERS``), and it carries the ``gen_ai.*``
attributes below (``vllm/tracing/utils.py: SpanAttributes``). The resource names the
instrumenting module and the process id, not a service (OTEL_SERVICE_NAME names one).
One difference: vLLM's exporter defaults to OTLP/gRPC (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL
``grpc``); the mock speaks OTLP/HTTP protobuf only and refuses ``grpc`` by name, so a
deployment that traces sets ``http/protobuf`` for both (the router speaks it too).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACE_HEADERS = ("traceparent", "tracestate")  # vllm/tracing/utils.py
PROTOCOL_ENV = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
_PROPAGATOR = TraceContextTextMapPropagator()


def trace_headers(headers: Mapping[str, str]) -> dict[str, str] | None:
    """vLLM's ``extract_trace_headers``: only the W3C trace headers (None when there are none)."""
    out = {h: headers[h] for h in TRACE_HEADERS if h in headers}
    return out or None


def provider_for(endpoint: str) -> TracerProvider:
    protocol = os.environ.get(PROTOCOL_ENV, "http/protobuf")
    if protocol != "http/protobuf":
        raise ValueError(f"{PROTOCOL_ENV}={protocol!r}: the mock worker exports OTLP over http/protobuf only "
                         "(vLLM defaults to grpc; set http/protobuf for both)")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    # vllm/tracing/otel.py: init_otel_tracer's resource attributes.
    resource = Resource.create({"vllm.instrumenting_module_name": "vllm.llm_engine",
                                "vllm.process_id": str(os.getpid())})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    return provider


class WorkerTracer:
    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("vllm.llm_engine")

    def request_done(self, *, headers: Mapping[str, str] | None, arrival_ns: int, request_id: str,
                     prompt_tokens: int, completion_tokens: int, ttft_s: float, e2e_s: float, queued_s: float,
                     prefill_s: float, decode_s: float, inference_s: float,
                     params: Mapping[str, float | int | None]) -> None:
        """One finished request -> vLLM's ``llm_request`` span (ended now, started at arrival)."""
        ctx = _PROPAGATOR.extract(headers) if headers else None
        attributes: dict[str, float | int | str] = {
            "gen_ai.latency.time_to_first_token": ttft_s,
            "gen_ai.latency.e2e": e2e_s,
            "gen_ai.latency.time_in_queue": queued_s,
            "gen_ai.usage.prompt_tokens": prompt_tokens,
            "gen_ai.usage.completion_tokens": completion_tokens,
            "gen_ai.latency.time_in_model_prefill": prefill_s,
            "gen_ai.latency.time_in_model_decode": decode_s,
            "gen_ai.latency.time_in_model_inference": inference_s,
            "gen_ai.request.id": request_id,
        }
        # As vLLM: optional parameters only when truthy.
        for key in ("top_p", "max_tokens", "temperature", "n"):
            value = params.get(key)
            if value:
                attributes[f"gen_ai.request.{key}"] = value
        span = self.tracer.start_span("llm_request", context=ctx, kind=SpanKind.SERVER, start_time=arrival_ns,
                                      attributes=attributes)
        span.end(end_time=time.time_ns())

    def shutdown(self) -> None:
        self.provider.shutdown()
