"""A tiny OTLP/HTTP trace receiver on loopback: what a collector sees, for tests and benches.

Accepts ``POST /v1/traces`` with an ``ExportTraceServiceRequest`` in protobuf (the
OTLP/HTTP wire format, gzip or not) and decodes it with ``opentelemetry-proto`` (the
collector's own message definitions), keeping each span's ids, parent, name,
service and attributes. Runs on a thread, so sync and async callers can both use it.
"""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True)
class ReceivedSpan:
    trace_id: str  # 32 hex digits, as in a traceparent
    span_id: str  # 16 hex digits
    parent_span_id: str  # "" for a root
    name: str
    service: str
    kind: int  # opentelemetry.proto Span.SpanKind value (2 = SERVER, 3 = CLIENT)
    start_ns: int
    end_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)


def _value(v: AnyValue) -> Any:
    which = v.WhichOneof("value")
    if which == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, which) if which else None


def decode(body: bytes) -> list[ReceivedSpan]:
    req = ExportTraceServiceRequest()
    req.ParseFromString(body)
    out = []
    for rs in req.resource_spans:
        service = next((_value(a.value) for a in rs.resource.attributes if a.key == "service.name"), "")
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append(ReceivedSpan(s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(), s.name, service,
                                        s.kind, s.start_time_unix_nano, s.end_time_unix_nano,
                                        {a.key: _value(a.value) for a in s.attributes}))
    return out


class OtlpSink:
    """``with OtlpSink() as sink:`` -> ``sink.endpoint`` (give it to --otlp-traces-endpoint),
    ``sink.spans`` (everything received so far), ``sink.requests`` (export calls)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self._lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_error(404, f"no OTLP signal at {self.path}")
                    return
                try:
                    spans = decode(body)
                except Exception as e:  # a malformed export is the sender's fault: say so
                    self.send_error(400, f"not an ExportTraceServiceRequest: {e}")
                    return
                with sink._lock:
                    sink.spans.extend(spans)
                    sink.requests += 1
                out = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://{host}:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, name="otlp-sink", daemon=True)

    def __enter__(self) -> OtlpSink:
        self._thread.start()
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)

    def snapshot(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self.spans)
