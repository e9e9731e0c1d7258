"""One trace across processes, as a collector receives it: the router's OTLP/HTTP exporter
and the mock workers' vLLM-style ``llm_request`` spans (``--otlp-traces-endpoint``) sent
to a loopback OTLP receiver (opentelemetry-proto decodes them), joined by one trace id."""

from __future__ import annotations

import subprocess
import sys
import time
from contextlib import ExitStack

from pdserve.common.otlp_sink import OtlpSink, ReceivedSpan
from tests.router.conftest import MODEL, read_sse, router_config, run_router, stream_text, worker_args

CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
SERVER, CLIENT = 2, 3  # opentelemetry.proto Span.SpanKind


def wait_spans(sink: OtlpSink, want: int, timeout: float = 20.0) -> list[ReceivedSpan]:
    deadline = time.monotonic() + timeout
    while len(spans := sink.snapshot()) < want and time.monotonic() < deadline:
        time.sleep(0.1)
    return spans


async def test_router_and_workers_export_one_joined_trace() -> None:
    from pdserve.worker.testing import start_worker

    with OtlpSink() as sink, ExitStack() as stack:
        # The workers' batch processor waits 5 s by default; 200 ms keeps the test short.
        env = {"OTEL_BSP_SCHEDULE_DELAY": "200", "OTEL_SERVICE_NAME": "mock-vllm"}
        args = [*worker_args(pd=True, events=False), "--otlp-traces-endpoint", sink.endpoint + "/v1/traces"]
        p = stack.enter_context(start_worker(MODEL, args=args, speedup=100.0, env=env))
        d = stack.enter_context(start_worker(MODEL, args=args, speedup=100.0, env=env))
        cfg = router_config(prefill=[p.url], decode=[d.url], scrape_interval_s=60,
                            otlp_traces_endpoint=sink.endpoint)  # the real exporter: /v1/traces is added
        async with run_router(cfg) as r:
            body = {"model": MODEL, "messages": [{"role": "user", "content": "one trace " * 30}], "max_tokens": 6,
                    "temperature": 0.5, "stream": True}
            resp = await r.post("/v1/chat/completions", body,
                                headers={"traceparent": f"00-{CLIENT_TRACE}-b7ad6b7169203331-01"})
            assert resp.status == 200
            assert stream_text(await read_sse(resp), "chat")
        # Leaving the router shut its provider down, which flushed its spans.
        spans = wait_spans(sink, 7)
    assert {s.trace_id for s in spans} == {CLIENT_TRACE}, spans
    router = {s.name: s for s in spans if s.service == "pdserve-router"}
    assert set(router) == {"POST /v1/chat/completions", "route", "prefill", "kv_handoff", "decode"}
    assert router["prefill"].kind == router["decode"].kind == CLIENT
    engine = [s for s in spans if s.name == "llm_request"]
    assert len(engine) == 2 and {s.service for s in engine} == {"mock-vllm"}
    assert all(s.kind == SERVER for s in engine)
    # Each worker's span is a child of the router's call to it.
    by_parent = {s.parent_span_id: s for s in engine}
    assert set(by_parent) == {router["prefill"].span_id, router["decode"].span_id}
    pre, dec = by_parent[router["prefill"].span_id], by_parent[router["decode"].span_id]
    prompt = router["POST /v1/chat/completions"].attributes["gen_ai.usage.prompt_tokens"]
    assert pre.attributes["gen_ai.usage.prompt_tokens"] == dec.attributes["gen_ai.usage.prompt_tokens"] == prompt
    assert pre.attributes["gen_ai.usage.completion_tokens"] == 1  # vLLM's prefill-only request: max_tokens=1
    assert dec.attributes["gen_ai.usage.completion_tokens"] == 6
    assert dec.attributes["gen_ai.request.max_tokens"] == 6 and dec.attributes["gen_ai.request.temperature"] == 0.5
    for s in engine:
        a = s.attributes
        assert a["gen_ai.request.id"] and 0 < a["gen_ai.latency.time_to_first_token"] <= a["gen_ai.latency.e2e"]
        assert a["gen_ai.latency.time_in_queue"] >= 0 and a["gen_ai.latency.time_in_model_inference"] > 0
    # The worker spans lie inside the router's call spans (same clock: one machine).
    assert router["prefill"].start_ns <= pre.start_ns <= pre.end_ns <= router["prefill"].end_ns
    assert router["decode"].start_ns <= dec.start_ns <= dec.end_ns <= router["decode"].end_ns


def test_worker_refuses_grpc_protocol_by_name() -> None:
    out = subprocess.run([sys.executable, "-m", "pdserve.cli", "worker", MODEL, "--tokenizer-mode", "mock",
                          "--otlp-traces-endpoint", "http://127.0.0.1:9/v1/traces", "--port", "0"],
                         env={"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc", "PATH": "/usr/bin:/bin",
                              "PYTHONPATH": ":".join(sys.path)}, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL='grpc'" in out.stderr and "http/protobuf" in out.stderr
