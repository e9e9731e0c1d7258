"""HTTP/1.1 server framing for the lean front end (``--http-server lean``), without sockets.

``RequestReader`` turns the bytes of one client connection into complete requests, with
httptools' parser (llhttp, the parser uvicorn uses): pipelined requests come out in order;
a request the router must refuse comes out as a ``Refusal`` (the status, an OpenAI-style
message naming the problem) after which the connection is answered and closed. Limits as
aiohttp's server, which the aiohttp front end has: a header line (name + value) of at most
``max_field_bytes``, at most ``max_headers`` headers, a body of at most ``max_body_bytes``
(Content-Length checked before a byte of the body is read). Header limits answer 431.
``response_head`` writes a response head.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus
from urllib.parse import unquote

import httptools

MAX_FIELD_BYTES = 8190  # aiohttp's max_field_size / max_line_size
MAX_HEADERS = 128
MAX_HEAD_BYTES = 64 * 1024  # the whole head, however split into fields


@dataclass
class Request:
    method: str
    path: str  # decoded, without the query
    version: str  # "1.1" | "1.0"
    headers: dict[str, str]  # lower-case names; a repeated header's values joined with ", "
    body: bytes
    keep_alive: bool


@dataclass
class Refusal:
    status: int
    message: str
    err_type: str
    param: str | None = None


@dataclass
class Continue:
    """The client sent ``Expect: 100-continue``: tell it to send the body."""


Event = Request | Refusal | Continue


class _Stop(Exception):
    """Raised in a parser callback to refuse the request (httptools wraps it)."""


@dataclass
class _Partial:
    url: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    head_bytes: int = 0
    body: list[bytes] = field(default_factory=list)
    body_bytes: int = 0
    content_length: int | None = None


class RequestReader:
    def __init__(self, max_body_bytes: int, max_field_bytes: int = MAX_FIELD_BYTES, max_headers: int = MAX_HEADERS,
                 max_head_bytes: int = MAX_HEAD_BYTES) -> None:
        self.max_body = max_body_bytes
        self.max_field = max_field_bytes
        self.max_headers = max_headers
        self.max_head = max_head_bytes
        self._parser = httptools.HttpRequestParser(self)
        self._events: deque[Event] = deque()
        self._cur: _Partial | None = None
        self._in_head = False
        self._refusal: Refusal | None = None
        self.stopped = False  # a Refusal came out: nothing more is read

    @property
    def in_request(self) -> bool:
        """Part of a request has arrived, not all of it."""
        return self._cur is not None

    def feed(self, data: bytes) -> list[Event]:
        if self.stopped:
            return []
        if self._in_head and self._cur is not None:
            # httptools gathers a header in memory until it is complete: bound it before feeding.
            self._cur.head_bytes += len(data)
            if self._cur.head_bytes > self.max_head + self.max_field:
                self._refuse(Refusal(431, f"request header section exceeds {self.max_head} bytes",
                                     "RequestHeaderFieldsTooLarge"))
                return self._drain()
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._refuse(Refusal(400, "protocol upgrades (Upgrade, CONNECT) are not served", "BadRequestError"))
        except httptools.HttpParserCallbackError:
            if self._refusal is None:
                raise  # a bug here, not the client's doing
            self._refuse(self._refusal)
        except httptools.HttpParserError as e:
            self._refuse(Refusal(400, f"malformed HTTP request: {e}", "BadRequestError"))
        return self._drain()

    def eof(self) -> Refusal | None:
        """The client ended its side: a request it left incomplete is refused (400) by name."""
        cur = self._cur
        if cur is None or self.stopped:
            return None
        if self._in_head:
            why = "the request head ended before its blank line"
        elif cur.content_length is not None:
            why = f"request body ended after {cur.body_bytes} of {cur.content_length} bytes"
        else:
            why = f"chunked request body ended after {cur.body_bytes} bytes, before its last chunk"
        self.stopped = True
        return Refusal(400, why, "BadRequestError")

    def _drain(self) -> list[Event]:
        out = list(self._events)
        self._events.clear()
        return out

    def _refuse(self, refusal: Refusal) -> None:
        self.stopped = True
        self._cur = None
        self._events.append(refusal)

    def _stop(self, refusal: Refusal) -> None:
        self._refusal = refusal
        raise _Stop()

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._cur = _Partial()
        self._in_head = True

    def on_url(self, url: bytes) -> None:
        cur = self._cur
        assert cur is not None
        cur.url += url
        if len(cur.url) > self.max_field:
            self._stop(Refusal(414, f"request target exceeds {self.max_field} bytes", "URITooLong"))

    def on_header(self, name: bytes, value: bytes) -> None:
        cur = self._cur
        assert cur is not None
        if len(name) + len(value) > self.max_field:
            shown = name[:100].decode("latin-1")
            self._stop(Refusal(431, f"request header {shown} is {len(name) + len(value)} bytes, over the limit of "
                                    f"{self.max_field}", "RequestHeaderFieldsTooLarge", param=shown))
        if len(cur.headers) >= self.max_headers:
            self._stop(Refusal(431, f"more than {self.max_headers} request headers", "RequestHeaderFieldsTooLarge"))
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        cur.headers[key] = f"{cur.headers[key]}, {text}" if key in cur.headers else text

    def on_headers_complete(self) -> None:
        cur = self._cur
        assert cur is not None
        self._in_head = False
        length = cur.headers.get("content-length")
        if length is not None:
            # llhttp has checked it is one decimal number; it refuses Content-Length with chunked.
            cur.content_length = int(length)
            if cur.content_length > self.max_body:
                self._stop(Refusal(413, f"request body of {cur.content_length} bytes exceeds the limit of "
                                        f"{self.max_body} bytes", "RequestEntityTooLarge"))
        if (cur.headers.get("expect", "").lower() == "100-continue"
                and self._parser.get_http_version() == "1.1"):
            self._events.append(Continue())

    def on_body(self, body: bytes) -> None:
        cur = self._cur
        assert cur is not None
        cur.body_bytes += len(body)
        if cur.body_bytes > self.max_body:
            self._stop(Refusal(413, f"request body exceeds the limit of {self.max_body} bytes",
                               "RequestEntityTooLarge"))
        cur.body.append(body)

    def on_message_complete(self) -> None:
        cur = self._cur
        assert cur is not None
        p = self._parser
        try:
            path = unquote(httptools.parse_url(cur.url).path.decode("latin-1"), errors="replace")
        except httptools.HttpParserInvalidURLError:
            self._stop(Refusal(400, "malformed request target", "BadRequestError"))
        body = cur.body[0] if len(cur.body) == 1 else b"".join(cur.body)
        self._events.append(Request(p.get_method().decode("latin-1"), path, p.get_http_version(), cur.headers, body,
                                    p.should_keep_alive()))
        self._cur = None


_STATUS_LINES: dict[tuple[str, int], bytes] = {}


def status_line(version: str, status: int) -> bytes:
    key = (version, status)
    line = _STATUS_LINES.get(key)
    if line is None:
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = "Unknown"
        line = _STATUS_LINES[key] = f"HTTP/{version} {status} {reason}\r\n".encode()
    return line


class DateHeader:
    """The Date header, formatted once a second (``now`` injectable for tests)."""

    def __init__(self, now: Callable[[], float] = time.time) -> None:
        self._now = now
        self._second = -1
        self._value = b""

    def __call__(self) -> bytes:
        t = self._now()
        if int(t) != self._second:
            self._second = int(t)
            self._value = f"date: {formatdate(t, usegmt=True)}\r\n".encode()
        return self._value


def _clean(value: str) -> str:
    # A value carrying CR or LF would end the header (response splitting): never sent as is.
    return value.replace("\r", " ").replace("\n", " ") if ("\r" in value or "\n" in value) else value


def response_head(version: str, status: int, headers: dict[str, str], date: bytes, *, content_length: int | None,
                  keep_alive: bool) -> bytes:
    """The head of a response: with ``content_length`` None and HTTP/1.1 the body is chunked;
    HTTP/1.0 without a length runs to the connection's close."""
    parts = [status_line("1.1" if version == "1.1" else "1.0", status), date]
    for k, v in headers.items():
        parts.append(f"{_clean(k)}: {_clean(v)}\r\n".encode("latin-1", "replace"))
    if content_length is not None:
        parts.append(b"content-length: %d\r\n" % content_length)
    elif version == "1.1":
        parts.append(b"transfer-encoding: chunked\r\n")
    if not keep_alive:
        parts.append(b"connection: close\r\n")
    elif version != "1.1":
        parts.append(b"connection: keep-alive\r\n")
    parts.append(b"\r\n")
    return b"".join(parts)
