"""The aiohttp server's side of ``exchange``: an aiohttp request as an ``Exchange``, its
streamed response as a ``StreamOut``, a ``Reply`` as an aiohttp response."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import aiohttp
from aiohttp import web
from aiohttp.abc import AbstractStreamWriter

from pdserve.router.core.errors import RequestError
from pdserve.router.shell.exchange import ClientGone, Reply, StreamOut

CLIENT_GONE = (ConnectionResetError, aiohttp.ClientConnectionResetError)


def to_response(reply: Reply) -> web.Response:
    # The type as a header: aiohttp's content_type argument refuses one with parameters (charset).
    return web.Response(body=reply.body, status=reply.status, headers={**reply.headers, "Content-Type": reply.content_type})


class AiohttpExchange:
    __slots__ = ("request", "path", "response")

    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.path = request.path
        self.response: web.StreamResponse | None = None  # the streamed response, once opened

    @property
    def headers(self) -> Mapping[str, str]:
        return self.request.headers  # case-insensitive: lower-case names work

    @property
    def transport(self) -> asyncio.Transport | None:
        return self.request.transport  # type: ignore[return-value]

    def finish(self, result: Reply | StreamOut) -> web.StreamResponse:
        """What the aiohttp handler returns for the completion handler's result."""
        if isinstance(result, Reply):
            return to_response(result)
        assert self.response is not None  # a stream is opened through open_stream
        return self.response

    async def read_body(self, limit: int) -> bytes:
        try:
            return await self._read_body(limit)
        except CLIENT_GONE:
            # aiohttp reports a client that ended its side mid-body as a lost connection: the
            # client's doing (a 400, which a half-closed client still reads), not a router error.
            raise RequestError(f"request body ended (the client closed the connection) before its "
                               f"{self.request.content_length or 'chunked'} bytes", err_type="BadRequestError") from None

    async def _read_body(self, limit: int) -> bytes:
        request = self.request
        if request.content_length is not None and request.content_length > limit:
            raise RequestError(f"request body of {request.content_length} bytes exceeds the limit of {limit} bytes",
                               status=413, err_type="RequestEntityTooLarge")
        if request.content_length is not None and not request.headers.get("Transfer-Encoding"):
            # The usual client body: its length is known (and within the limit), and it is mostly
            # in the buffer already, so one read, not an async iterator ending with an empty read.
            try:
                return await request.content.readexactly(request.content_length)
            except asyncio.IncompleteReadError as e:
                raise RequestError(f"request body ended after {len(e.partial)} of {request.content_length} bytes",
                                   err_type="BadRequestError") from None
        chunks, size = [], 0
        async for chunk in request.content.iter_chunked(65536):
            size += len(chunk)
            if size > limit:
                raise RequestError(f"request body exceeds the limit of {limit} bytes", status=413,
                                   err_type="RequestEntityTooLarge")
            chunks.append(chunk)
        return b"".join(chunks)

    async def open_stream(self, headers: dict[str, str], hold_head: bool) -> AiohttpStream:
        request = self.request
        resp = web.StreamResponse(status=200, headers=headers)
        chunked = request.version >= aiohttp.HttpVersion11
        if chunked:
            resp.enable_chunked_encoding()  # what aiohttp picks anyway; explicit, as the relay frames chunks itself
        if hold_head:
            resp._send_headers_immediately = False  # the head goes with the first chunk (relay._Pipe)
        writer = await resp.prepare(request)
        self.response = resp
        held = hold_head and writer is not None and _writer_coalesces(writer)
        if hold_head and writer is not None and not held:
            _send_head(writer)  # an aiohttp that keeps its head elsewhere: it must be out before the pipe writes
        return AiohttpStream(resp, request, writer if held else None, chunked)


class AiohttpStream:
    """aiohttp holds a prepared response's head (StreamWriter._headers_buf) until the first
    body write when the response opts out of sending it at once; the relay takes it from
    there, and ends the chunked body in its last write (``_eof`` marked). Checked on the
    writer itself, so another aiohttp release that stores it differently falls back to
    aiohttp sending the head and the end on its own (one write more each)."""

    __slots__ = ("resp", "request", "writer", "chunked", "status", "head_held", "ends_inline")

    def __init__(self, resp: web.StreamResponse, request: web.Request, writer: AbstractStreamWriter | None,
                 chunked: bool) -> None:
        self.resp, self.request, self.writer, self.chunked = resp, request, writer, chunked
        self.status = 200
        self.head_held = writer is not None
        self.ends_inline = writer is not None and chunked

    @property
    def transport(self) -> asyncio.Transport | None:
        return self.request.transport  # type: ignore[return-value]

    def take_head(self) -> bytes:
        w = self.writer
        if w is None:
            return b""
        head = w._headers_buf  # type: ignore[attr-defined]
        if not head or w._headers_written:  # type: ignore[attr-defined]
            return b""  # already sent (the head timer, or aiohttp)
        w._headers_written = True  # type: ignore[attr-defined]
        w._headers_buf = None  # type: ignore[attr-defined]
        return bytes(head)

    def send_head(self) -> None:
        if self.writer is not None:
            _send_head(self.writer)

    def mark_ended(self) -> None:
        if self.writer is not None:
            self.writer._eof = True  # type: ignore[attr-defined]

    async def write(self, data: bytes) -> None:
        try:
            await self.resp.write(data)
        except CLIENT_GONE as e:
            raise ClientGone() from e

    async def write_eof(self) -> None:
        try:
            await self.resp.write_eof()
        except CLIENT_GONE as e:
            raise ClientGone() from e


def _writer_coalesces(writer: AbstractStreamWriter) -> bool:
    return (getattr(writer, "_headers_written", None) is False and hasattr(writer, "_headers_buf")
            and getattr(writer, "_eof", None) is False)


def _send_head(writer: AbstractStreamWriter) -> None:
    send = getattr(writer, "send_headers", None)  # aiohttp >= 3.10; before it, prepare() sent the head
    if send is not None:
        try:
            send()
        except (ConnectionError, RuntimeError):
            pass  # the client is gone: the relay finds out at its next write
