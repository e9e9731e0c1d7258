"""A lean HTTP/1.1 client for the router's hot path: POST a JSON body to a worker and
stream the response body back, over pooled keep-alive connections.

aiohttp's client spent about a third of the router's CPU at 256 concurrent streams
(request object construction, a timer re-armed on every received chunk, StreamReader
wake-ups; bench/router/overhead.py). This client does only what the router needs:
one write per request, a small framing parser (Content-Length, chunked, or
read-until-close), a read-silence watchdog re-armed lazily rather than per chunk, and
back-pressure by pausing the socket. Its response duck-types the parts of
``aiohttp.ClientResponse`` the router uses (``status``, ``content_type``,
``content.readany()``/``iter_any()``, ``read()``, ``text()``, ``release()``), and its
failures are aiohttp's exception types, so retries and migration work unchanged.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

import aiohttp

if TYPE_CHECKING:
    from pdserve.router.shell.http1_pool import Http1Pool

_PAUSE_AT = 256 * 1024  # buffered body bytes before the socket is paused
_MAX_HEAD = 64 * 1024


class ConnectError(aiohttp.ClientConnectionError):
    """No connection could be made: the request never left the router (safe to send elsewhere
    even when it carries consumable KV transfer params)."""


class _Conn(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.resp: Response | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:  # tokens are small writes: never wait for Nagle
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except (OSError, AttributeError):
                pass

    def data_received(self, data: bytes) -> None:
        if self.resp is not None:
            self.resp._feed(data)
        elif self.transport is not None:  # bytes on an idle connection: it cannot be reused
            self.transport.close()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.resp is not None:
            self.resp._lost(exc)


class Response:
    """One upstream response; the caller must ``release()`` it."""

    def __init__(
        self, pool: Http1Pool, key: tuple[str, int], conn: _Conn, reused: bool, read_timeout: float | None,
        deadline: float | None = None, total: float | None = None,
    ) -> None:
        self._pool, self._key, self._conn, self.reused = pool, key, conn, reused
        self._loop = asyncio.get_running_loop()
        self.status = 0
        self.headers: dict[str, str] = {}
        self.content_type = "application/octet-stream"
        self.content = self
        self._head = self._loop.create_future()
        self._buf = bytearray()
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._mode = "head"  # head | length | chunk-size | chunk-data | chunk-crlf | trailer | close | done
        self._left = 0
        self._keep_alive = True
        self._exc: BaseException | None = None
        self.got_bytes = False
        # perf_counter() when the request was written and when the first body byte came
        # (router-internal overhead metrics; 0.0 = not yet).
        self.sent_at = 0.0
        self.first_body_at = 0.0
        # set_sink(): body bytes go straight to this callback from the socket's read
        # callback (payload, and the read's raw bytes when they are exactly one chunk).
        self.sink: Callable[[bytes, bytes | None], None] | None = None
        self._batch: list[bytes] | None = None  # payloads parsed from the current read, for the sink
        self._released = False
        self._read_timeout = read_timeout
        # One timer watches both the read silence and the whole response's deadline
        # (``loop.time()`` based, ``total`` seconds after the request started): one
        # timer fewer per request than a timer each.
        self._deadline, self._total = deadline, total
        self._last = self._loop.time()
        self._timer: asyncio.TimerHandle | None = None
        self._arm()

    # -- protocol side -------------------------------------------------------------

    def _feed(self, data: bytes) -> None:
        self.got_bytes = True
        if self._read_timeout:
            self._last = self._loop.time()
        mode = self._mode
        if mode == "close":
            self._push(data)
            return
        sink = self.sink
        if mode == "chunk-size" and sink is not None and not self._buf and self._exc is None:
            # A streamed token: the read is exactly one whole chunk (the common case under a
            # relay). Straight to the sink with its raw bytes, no list or join on the way.
            i = data.find(b"\r\n", 0, 10)
            if i > 0:
                try:
                    size = int(data[:i], 16)
                except ValueError:
                    size = 0
                if size > 0 and i + size + 4 == len(data) and data.endswith(b"\r\n"):
                    if not self.first_body_at:
                        self.first_body_at = time.perf_counter()
                    sink(data[i + 2 : -2], data)
                    return
        if mode == "chunk-size" and not self._buf:
            # Fast path for streamed tokens: whole chunks from the start of this read, found
            # with bytes.find on the read itself (no buffer copies). One whole chunk goes on
            # with its raw bytes; several go on as one payload (one client write per read).
            pos, n = 0, len(data)
            payloads: list[bytes] = []
            ended = False
            while pos < n:
                i = data.find(b"\r\n", pos, pos + 10)
                if i <= pos:
                    break
                try:
                    size = int(data[pos:i], 16)
                except ValueError:
                    break  # extensions or garbage: the full parser decides
                if size <= 0:
                    # The last chunk, without trailers, ending the read: the body is complete.
                    ended = size == 0 and i + 4 == n and data.endswith(b"\r\n\r\n")
                    if ended:
                        pos = n
                    break
                end = i + 2 + size
                if end + 2 > n or data[end : end + 2] != b"\r\n":
                    break
                payloads.append(data[i + 2 : end])
                pos = end + 2
            if pos == n:
                if payloads:
                    if len(payloads) == 1:
                        self._push(payloads[0], None if ended else data)
                    else:
                        self._push(b"".join(payloads), None)
                if ended:
                    self._finish()
                return
            prefix = payloads
            data = data[pos:]  # a cut chunk, extensions or trailers: the full parser
        else:
            prefix = []
        self._buf += data
        # A read holding several chunks (the router fell behind the worker, as under a
        # burst) reaches the sink as one payload: one client write per read, not per chunk.
        # At 256 streams reads averaged two chunks each (bench/router/burst.py).
        batch: list[bytes] | None = prefix if self.sink is not None else None
        if batch is None:
            for p in prefix:
                self._push(p)
        self._batch = batch
        try:
            self._parse()
        except ValueError as e:
            err: ValueError | None = e
        else:
            err = None
        finally:
            self._batch = None
        if batch and self.sink is not None and self._exc is None:
            self.sink(batch[0] if len(batch) == 1 else b"".join(batch), None)
        if err is not None:
            self._fail(aiohttp.ClientPayloadError(f"malformed response from {self._key[0]}:{self._key[1]}: {err}"))

    def _parse(self) -> None:
        buf = self._buf
        while buf:
            mode = self._mode
            if mode == "head":
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(buf) > _MAX_HEAD:
                        raise ValueError("response head too large")
                    return
                head = bytes(buf[:end]).decode("latin-1")
                del buf[: end + 4]
                self._on_head(head)
            elif mode == "length":
                take = min(self._left, len(buf))
                self._push(bytes(buf[:take]))
                del buf[:take]
                self._left -= take
                if self._left == 0:
                    self._finish()
            elif mode == "chunk-size":
                end = buf.find(b"\r\n")
                if end < 0:
                    if len(buf) > 1024:
                        raise ValueError("chunk size line too long")
                    return
                size = int(bytes(buf[:end]).split(b";", 1)[0].strip(), 16)
                del buf[: end + 2]
                if size < 0:
                    raise ValueError("negative chunk size")
                self._left = size
                self._mode = "chunk-data" if size else "trailer"
            elif mode == "chunk-data":
                take = min(self._left, len(buf))
                self._push(bytes(buf[:take]))
                del buf[:take]
                self._left -= take
                if self._left == 0:
                    self._mode = "chunk-crlf"
            elif mode == "chunk-crlf":
                if len(buf) < 2:
                    return
                if buf[:2] != b"\r\n":
                    raise ValueError("chunk not followed by CRLF")
                del buf[:2]
                self._mode = "chunk-size"
            elif mode == "trailer":
                end = buf.find(b"\r\n")
                if end < 0:
                    return
                line = buf[:end]
                del buf[: end + 2]
                if not line:
                    self._finish()
            else:  # done: anything more means the connection is out of sync
                self._keep_alive = False
                buf.clear()

    def _on_head(self, head: str) -> None:
        lines = head.split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
            raise ValueError(f"bad status line {lines[0][:100]!r}")
        status = int(parts[1])
        if 100 <= status < 200:  # informational (100 Continue): the real head follows
            return
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                raise ValueError(f"bad header line {line[:100]!r}")
            headers[name.strip().lower()] = value.strip()
        self.status, self.headers = status, headers
        ctype = headers.get("content-type")
        if ctype:
            self.content_type = ctype.split(";", 1)[0].strip().lower()
        conn = headers.get("connection", "").lower()
        self._keep_alive = parts[0] == "HTTP/1.1" and "close" not in conn
        if status in (204, 304):
            self._finish()
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._mode = "chunk-size"
        elif "content-length" in headers:
            self._left = int(headers["content-length"])
            if self._left < 0:
                raise ValueError("negative Content-Length")
            self._mode = "length"
            if self._left == 0:
                self._finish()
        else:
            self._mode = "close"
            self._keep_alive = False
        if not self._head.done():
            self._head.set_result(None)

    def _push(self, data: bytes, raw: bytes | None = None) -> None:
        if not data or self._exc is not None:
            return
        if not self.first_body_at:
            self.first_body_at = time.perf_counter()
        sink = self.sink
        if sink is not None:
            batch = self._batch
            if batch is not None:
                batch.append(data)
            else:
                sink(data, raw)
            return
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered > _PAUSE_AT and not self._paused and self._conn.transport is not None:
            self._paused = True
            self._conn.transport.pause_reading()
        self._wake()

    def _finish(self) -> None:
        self._mode = "done"
        self._cancel_timers()
        self._wake()

    def _fail(self, exc: BaseException) -> None:
        if self._mode == "done" or self._exc is not None:
            return
        self._exc = exc
        self._keep_alive = False
        self._cancel_timers()
        if not self._head.done():
            self._head.set_exception(exc)
            self._head.exception()  # retrieved here: the waiter may already be gone
        if self._conn.transport is not None:
            self._conn.transport.close()
        self._wake()

    def _lost(self, exc: Exception | None) -> None:
        if self._mode == "close" and exc is None:
            self._finish()  # a read-until-close body ends with the connection
            return
        where = "before the response" if self._mode == "head" else "mid-response"
        err: BaseException
        if self._mode == "head":
            err = aiohttp.ServerDisconnectedError(f"{self._key[0]}:{self._key[1]} disconnected {where}")
        else:
            err = aiohttp.ClientPayloadError(f"{self._key[0]}:{self._key[1]} disconnected {where}")
        if exc is not None:
            err.__cause__ = exc
        self._fail(err)

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _arm(self) -> None:
        """The timer at the earlier of the read-silence limit and the deadline, if any."""
        at = self._last + self._read_timeout if self._read_timeout else None
        if self._deadline is not None and (at is None or self._deadline < at):
            at = self._deadline
        if at is not None:
            self._timer = self._loop.call_at(at, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        now = self._loop.time()
        if self._deadline is not None and now >= self._deadline:
            self._fail(TimeoutError(f"{self._key[0]}:{self._key[1]} did not finish within {self._total:.1f} s"))
            return
        if self._read_timeout:
            idle = now - self._last
            if idle >= self._read_timeout:
                self._fail(TimeoutError(f"no data from {self._key[0]}:{self._key[1]} for {idle:.1f} s"))
                return
        self._arm()  # re-armed only when it fires, not on every chunk

    def _cancel_timers(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- caller side (the aiohttp.ClientResponse subset the router uses) -------------

    def set_sink(self, sink: Callable[[bytes, bytes | None], None] | None) -> None:
        """Deliver the body to ``sink(payload, raw)`` from the socket's read callback instead
        of buffering it for ``readany()``: no task wake-up per chunk. ``raw`` is the read's
        bytes when they were exactly one chunk in wire format (a sink writing chunked
        framing can forward them untouched), else None. Anything already buffered is
        delivered at once. ``readany()`` then only reports the end: b"" or the failure."""
        self.sink = sink
        if sink is not None and self._chunks:
            data = b"".join(self._chunks)
            self._chunks = []
            self._buffered = 0
            if self._paused:
                self.resume()
            sink(data, None)

    def pause(self) -> None:
        """Stop reading from the worker (back-pressure from a slow client)."""
        if not self._paused and self._conn.transport is not None:
            self._paused = True
            self._conn.transport.pause_reading()

    def resume(self) -> None:
        if self._paused and self._conn.transport is not None:
            self._paused = False
            self._conn.transport.resume_reading()

    def abort(self, exc: BaseException) -> None:
        """Fail the response with ``exc`` (raised by ``readany()``) and close the connection."""
        self._fail(exc)

    @property
    def finished(self) -> bool:
        """The body was read to its end, or the response failed."""
        return self._mode == "done" or self._exc is not None

    async def readany(self) -> bytes:
        while not self._chunks:
            if self._exc is not None:
                raise self._exc
            if self._mode == "done":
                return b""
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        chunks = self._chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._chunks = []
        self._buffered = 0
        if self._paused and self._conn.transport is not None:
            self._paused = False
            self._conn.transport.resume_reading()
        return data

    async def iter_any(self) -> AsyncIterator[bytes]:
        while data := await self.readany():
            yield data

    async def read(self) -> bytes:
        out = []
        while data := await self.readany():
            out.append(data)
        return b"".join(out)

    async def text(self) -> str:
        return (await self.read()).decode(errors="replace")

    def release(self) -> None:
        """Return the connection to the pool if the body was read to its end; otherwise
        close it (which also aborts the request on the worker)."""
        if self._released:
            return
        self._released = True
        self._cancel_timers()
        conn = self._conn
        conn.resp = None
        if self._mode == "done" and self._keep_alive and self._exc is None and not conn.closed and not self._buf:
            self._pool._put(self._key, conn)
        elif conn.transport is not None:
            conn.transport.close()

    close = release
