"""The lean HTTP/1.1 front end (``--http-server lean``): an asyncio.Protocol per client
connection, framing in ``lean_http`` (httptools), the completion handler and the small
endpoints called directly. Why: aiohttp's server side costs up to 234 µs more per
streamed request than a bare protocol (bench/router/front_cost.py); the relay already
writes the stream's bytes to the transport itself, so what aiohttp adds is request
objects, routing, middlewares and its writer.

One server answers every path (no second server behind it): the small endpoints are the
same functions the aiohttp app calls (``endpoints``). What the aiohttp front end does, this
one does too: API keys (``auth.ApiKeys``), the body guard (the handler's), header limits
(431), OpenAI error bodies, X-Request-Id, tracing and metrics (the handler's), keep-alive,
pipelined requests answered in order, ``Expect: 100-continue``, a client gone mid-stream
(the relay aborts the upstream read), back-pressure (the relay's pipe pauses the upstream
read; other writes wait for the transport to drain; reading pauses past
``MAX_PIPELINED`` queued requests), and the shutdown drain (stop listening, close idle
connections, let requests in flight finish, end streams with an error event a second
before ``shutdown_timeout``, then cut what is left).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections import deque
from collections.abc import AsyncIterator, Mapping
from typing import cast

from pdserve.router.core.errors import RequestError
from pdserve.router.shell import endpoints
from pdserve.router.shell.auth import ApiKeys
from pdserve.router.shell.config import RouterConfig
from pdserve.router.shell.exchange import ClientGone, Reply, StreamOut, error_reply, json_reply
from pdserve.router.shell.handler import CompletionHandler
from pdserve.router.shell.lean_http import Continue, DateHeader, Refusal, Request, RequestReader, response_head
from pdserve.router.shell.lifecycle import running, static_endpoints
from pdserve.router.shell.relay import end_streams
from pdserve.router.shell.state import RouterState

log = logging.getLogger("pdserve.router")
KEEPALIVE_S = 75.0  # an idle connection's life, as aiohttp's keepalive_timeout
MAX_PIPELINED = 16  # complete requests queued on one connection before its reading pauses
_HIGH_WATER, _LOW_WATER = 256 * 1024, 64 * 1024  # as the relay's pipe
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class LeanServer:
    def __init__(self, state: RouterState) -> None:
        self.state = state
        self.handler = CompletionHandler(state)
        self.keys = ApiKeys(state.cfg.api_keys) if state.cfg.api_keys else None
        self.connections: set[Connection] = set()
        self.closing = False
        self.date = DateHeader()
        self.busy = 0  # connections running a request
        self.idle = asyncio.Event()  # set while none does (the drain waits on it)
        self.idle.set()

    @classmethod
    def build(cls, cfg: RouterConfig) -> LeanServer:
        cfg.validate()
        if cfg.prefill or cfg.decode:
            static_endpoints(cfg)  # fail now, with the bad URL named, not at start-up
        return cls(RouterState(cfg))

    async def dispatch(self, req: Request, conn: Connection) -> Reply | StreamOut:
        method, path = req.method, req.path
        if self.keys is not None and self.keys.needs_key(method, path) and not self.keys.verify(
                req.headers.get("authorization")):
            return json_reply({"error": "Unauthorized"}, 401)
        if method == "POST":
            if path == "/v1/chat/completions":
                return await self.handler(LeanExchange(req, conn), "chat")
            if path == "/v1/completions":
                return await self.handler(LeanExchange(req, conn), "completions")
        elif method in ("GET", "HEAD"):
            if path == "/health":
                return endpoints.health(self.state)
            if path == "/live":
                return endpoints.live(self.state)
            if path == "/metrics":
                return endpoints.metrics(self.state)
            if path == "/v1/models":
                return await endpoints.models(self.state)
        return endpoints.not_found(method, path)

    def started(self) -> None:
        self.busy += 1
        self.idle.clear()

    def finished(self) -> None:
        self.busy -= 1
        if self.busy == 0:
            self.idle.set()

    async def shutdown(self, server: asyncio.AbstractServer, timeout_s: float) -> None:
        """Stop listening, close idle connections, let requests in flight finish within
        ``timeout_s`` (streams still relayed a second before it end with an error event and
        [DONE], as on the aiohttp front end), then cut what is left."""
        self.closing = True
        server.close()
        for c in list(self.connections):
            c.close_if_idle()
        loop = asyncio.get_running_loop()
        ender = loop.call_later(max(0.0, timeout_s - 1.0), end_streams, self.state)
        try:
            await asyncio.wait_for(self.idle.wait(), timeout_s)
        except TimeoutError:
            log.warning("shutdown: %d requests still running after %.1f s: cut",
                        sum(c.task is not None for c in self.connections), timeout_s)
        finally:
            ender.cancel()
        for c in list(self.connections):
            if c.task is not None:
                c.task.cancel()
            c.transport.close()


class Connection(asyncio.Protocol):
    def __init__(self, server: LeanServer) -> None:
        self.server = server
        self.reader = RequestReader(server.state.cfg.max_body_bytes)
        self.queue: deque[Request | Refusal] = deque()
        self.task: asyncio.Task[None] | None = None
        self.closed = False
        self.half_closed = False
        self.reading_paused = False
        self.write_paused = False
        self._drain: asyncio.Future[None] | None = None
        self.loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = None
        self._last_data = 0.0

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # (uvloop's is not an asyncio.Transport subclass)
        self.transport.set_write_buffer_limits(high=_HIGH_WATER, low=_LOW_WATER)
        self.server.connections.add(self)
        if self.server.closing:
            transport.close()  # accepted as the listener closed: refused
            return
        self._last_data = self.loop.time()
        self._timer = self.loop.call_later(KEEPALIVE_S, self._check_idle)

    def data_received(self, data: bytes) -> None:
        self._last_data = self.loop.time()
        for ev in self.reader.feed(data):
            if isinstance(ev, Continue):
                if not self.queue and self.task is None:
                    self.transport.write(_CONTINUE)
                else:  # answered when this request's turn comes (after the ones before it)
                    self.queue.append(ev)  # type: ignore[arg-type]
            else:
                self.queue.append(ev)
        self._kick()
        if len(self.queue) > MAX_PIPELINED and not self.reading_paused:
            self.reading_paused = True
            self.transport.pause_reading()

    def eof_received(self) -> bool:
        self.half_closed = True
        refusal = self.reader.eof()
        if refusal is not None:
            self.queue.append(refusal)
        self._kick()
        return self.task is not None  # keep the transport open to answer what is queued

    def connection_lost(self, exc: Exception | None) -> None:
        # A request running goes on (as on aiohttp): a relayed stream sees the transport
        # closing at its next upstream chunk and aborts the upstream request.
        self.closed = True
        self.queue.clear()
        self.server.connections.discard(self)
        if self._timer is not None:
            self._timer.cancel()
        if self._drain is not None and not self._drain.done():
            self._drain.set_exception(ClientGone())

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)

    # the shell
    async def drain(self) -> None:
        if self.closed or self.transport.is_closing():
            raise ClientGone()
        if self.write_paused:
            self._drain = self.loop.create_future()
            await self._drain

    def close_if_idle(self) -> None:
        if self.task is None:
            self.transport.close()

    def _kick(self) -> None:
        if self.queue and self.task is None and not self.closed:
            self.task = self.loop.create_task(self._serve())
            self.server.started()

    def _check_idle(self) -> None:
        """Close a connection silent for KEEPALIVE_S (a request left half-sent gets a 408)."""
        self._timer = None
        if self.closed:
            return
        if self.task is not None:  # a request is being answered: idle time starts after it
            self._timer = self.loop.call_later(KEEPALIVE_S, self._check_idle)
            return
        rest = self._last_data + KEEPALIVE_S - self.loop.time()
        if rest > 0:
            self._timer = self.loop.call_later(rest, self._check_idle)
            return
        if self.reader.in_request:
            self._write_reply(error_reply(408, f"request not completed within {KEEPALIVE_S:.0f} s",
                                          "RequestTimeoutError"), "1.1", keep_alive=False)
        self.transport.close()

    async def _serve(self) -> None:
        try:
            while self.queue and not self.closed:
                item = self.queue.popleft()
                if self.reading_paused and len(self.queue) <= MAX_PIPELINED // 2:
                    self.reading_paused = False
                    self.transport.resume_reading()
                if isinstance(item, Continue):
                    self.transport.write(_CONTINUE)
                    continue
                if isinstance(item, Refusal):
                    self._write_reply(error_reply(item.status, item.message, item.err_type, item.param), "1.1",
                                      keep_alive=False)
                    self.transport.close()
                    return
                if not await self._answer(item):
                    self.transport.close()
                    return
            if self.half_closed and not self.reader.in_request:
                self.transport.close()
        finally:
            self.task = None
            self._last_data = self.loop.time()
            if self.server.closing and not self.closed:
                self.transport.close()  # the drain: no request after the one in flight
            self.server.finished()

    async def _answer(self, req: Request) -> bool:
        """Answer one request; whether the connection may carry the next."""
        keep = req.keep_alive and not self.server.closing
        try:
            result = await self.server.dispatch(req, self)
        except Exception as e:  # a bug outside the handler (which answers its own) still answers in shape
            log.exception("request failed")
            result = error_reply(500, f"internal router error: {type(e).__name__}: {e}", "InternalServerError")
        if isinstance(result, Reply):
            self._write_reply(result, req.version, keep_alive=keep, head_only=req.method == "HEAD")
            return keep and not self.server.closing
        assert isinstance(result, LeanStream)
        return keep and result.keep_alive and result.ended and not self.transport.is_closing() \
            and not self.server.closing

    def _write_reply(self, reply: Reply, version: str, keep_alive: bool, head_only: bool = False) -> None:
        if self.closed:
            return
        headers = {"content-type": reply.content_type, **reply.headers}
        head = response_head(version, reply.status, headers, self.server.date(), content_length=len(reply.body),
                             keep_alive=keep_alive)
        self.transport.write(head if head_only else head + reply.body)


class LeanExchange:
    __slots__ = ("req", "conn", "path")

    def __init__(self, req: Request, conn: Connection) -> None:
        self.req, self.conn, self.path = req, conn, req.path

    @property
    def headers(self) -> Mapping[str, str]:
        return self.req.headers

    @property
    def transport(self) -> asyncio.Transport | None:
        return None if self.conn.closed else self.conn.transport

    async def read_body(self, limit: int) -> bytes:
        if len(self.req.body) > limit:  # the reader holds to the configured limit; a smaller one is checked here
            raise RequestError(f"request body of {len(self.req.body)} bytes exceeds the limit of {limit} bytes",
                               status=413, err_type="RequestEntityTooLarge")
        return self.req.body

    async def open_stream(self, headers: dict[str, str], hold_head: bool) -> LeanStream:
        req, conn = self.req, self.conn
        chunked = req.version == "1.1"
        keep = req.keep_alive and chunked and not conn.server.closing  # HTTP/1.0: the body ends at the close
        head = response_head(req.version, 200, headers, conn.server.date(), content_length=None, keep_alive=keep)
        return LeanStream(conn, head, chunked, keep, hold_head)


class LeanStream:
    __slots__ = ("conn", "_head", "chunked", "keep_alive", "head_held", "ends_inline", "ended", "status")

    def __init__(self, conn: Connection, head: bytes, chunked: bool, keep_alive: bool, hold_head: bool) -> None:
        self.conn, self.chunked, self.keep_alive = conn, chunked, keep_alive
        self.status = 200
        self.head_held = hold_head
        self.ends_inline = chunked
        self.ended = False
        self._head = head
        if not hold_head:
            self.send_head()

    @property
    def transport(self) -> asyncio.Transport | None:
        return None if self.conn.closed else self.conn.transport

    def take_head(self) -> bytes:
        head, self._head = self._head, b""
        return head

    def send_head(self) -> None:
        if self._head and not self.conn.closed:
            self.conn.transport.write(self.take_head())

    def mark_ended(self) -> None:
        self.ended = True

    async def write(self, data: bytes) -> None:
        conn = self.conn
        if conn.closed or conn.transport.is_closing():
            raise ClientGone()
        if not data or self.ended:
            return  # (an empty chunk would end the body)
        conn.transport.write(self.take_head() + (b"%x\r\n%b\r\n" % (len(data), data) if self.chunked else data))
        await conn.drain()

    async def write_eof(self) -> None:
        if self.ended:
            return
        self.ended = True
        conn = self.conn
        if conn.closed or conn.transport.is_closing():
            raise ClientGone()
        conn.transport.write(self.take_head() + (b"0\r\n\r\n" if self.chunked else b""))


@contextlib.asynccontextmanager
async def serving(server: LeanServer, host: str, port: int, backlog: int = 4096,
                  reuse_port: bool | None = None) -> AsyncIterator[asyncio.AbstractServer]:
    """The router on ``host:port`` with its background work; on exit, the shutdown drain."""
    loop = asyncio.get_running_loop()
    async with running(server.state):
        listener = await loop.create_server(lambda: Connection(server), host, port, backlog=backlog,
                                            reuse_port=reuse_port)
        try:
            yield listener
        finally:
            await server.shutdown(listener, server.state.cfg.shutdown_timeout_s)


def run(server: LeanServer, backlog: int, reuse_port: bool | None, loop: asyncio.AbstractEventLoop) -> None:
    """Serve until SIGTERM or SIGINT, then drain (as ``web.run_app`` for the aiohttp front end)."""
    async def main() -> None:
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        cfg = server.state.cfg
        async with serving(server, cfg.host, cfg.port, backlog, reuse_port):
            await stop.wait()

    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(main())
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
