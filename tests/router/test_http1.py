"""The router's lean HTTP/1.1 client against a scripted raw TCP server on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import aiohttp
import pytest

from pdserve.router.shell.http1_pool import Http1Pool
from tests.router.conftest import wait_for

T = aiohttp.ClientTimeout(total=5, sock_connect=2, sock_read=2)


class RawServer:
    """Answers each request (read up to its body) with ``reply(index, request)``: a list
    of byte pieces written with tiny pauses, or None to close without answering."""

    def __init__(self, reply: Callable[[int, bytes], list[bytes] | None], close_after: bool = False) -> None:
        self.reply = reply
        self.close_after = close_after
        self.requests: list[bytes] = []
        self.connections = 0
        self.server: asyncio.base_events.Server | None = None
        self.url = ""

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(next(ln.split(b":")[1] for ln in head.split(b"\r\n")
                                  if ln.lower().startswith(b"content-length")))
                req = head + await reader.readexactly(length)
                self.requests.append(req)
                pieces = self.reply(len(self.requests) - 1, req)
                if pieces is None:
                    break
                for p in pieces:
                    writer.write(p)
                    await writer.drain()
                    await asyncio.sleep(0.002)
                if self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> RawServer:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()


@pytest.fixture
async def pool() -> AsyncIterator[Http1Pool]:
    p = Http1Pool()
    yield p
    p.close()


def chunked(*parts: bytes) -> bytes:
    return b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in parts) + b"0\r\n\r\n"


def split_every(data: bytes, n: int) -> list[bytes]:
    return [data[i : i + n] for i in range(0, len(data), n)]


HEAD_CHUNKED = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n"


@pytest.mark.parametrize("piece", [1, 3, 7, 1000, 0])
async def test_chunked_body_survives_any_split_and_the_connection_is_reused(pool, piece) -> None:
    events = [b"data: {\"text\":\"a\"}\n\n", b"data: {\"text\":\"b\"}\n\n", b"data: [DONE]\n\n"]
    wire = HEAD_CHUNKED + chunked(*events)
    # piece 0: one chunk per read, as a worker streams tokens (the parser's fast path)
    pieces = [HEAD_CHUNKED, *[chunked(e)[:-5] for e in events], b"0\r\n\r\n"] if piece == 0 else split_every(wire, piece)
    async with RawServer(lambda i, req: pieces) as srv:
        for _ in range(2):
            resp = await pool.post(srv.url, "/v1/completions", {"prompt": "hi"}, {"X-Request-Id": "r1"}, T)
            assert resp.status == 200 and resp.content_type == "text/event-stream"
            body = b"".join([c async for c in resp.content.iter_any()])
            resp.release()
            assert body == b"".join(events)
        assert srv.connections == 1 and pool.opened == 1
        first = srv.requests[0]
        assert first.startswith(b"POST /v1/completions HTTP/1.1\r\n")
        assert b"\r\nX-Request-Id: r1\r\n" in first and first.endswith(b'{"prompt":"hi"}')


async def test_content_length_and_read_until_close_bodies(pool) -> None:
    fixed = b'{"ok":true}'
    async with RawServer(lambda i, req: [b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
                                         b"Content-Length: %d\r\n\r\n" % len(fixed), fixed]) as srv:
        resp = await pool.post(srv.url, "/x", b"{}", {}, T)
        assert resp.status == 400 and await resp.read() == fixed
        resp.release()
    async with RawServer(lambda i, req: [b"HTTP/1.0 200 OK\r\n\r\n", b"part one ", b"part two"],
                         close_after=True) as srv:
        resp = await pool.post(srv.url, "/x", b"{}", {}, T)
        assert await resp.text() == "part one part two"
        resp.release()


async def test_a_pooled_connection_closed_by_the_worker_is_replaced_transparently(pool) -> None:
    ok = [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"]
    async with RawServer(lambda i, req: ok, close_after=True) as srv:
        for _ in range(3):
            resp = await pool.post(srv.url, "/x", b"{}", {}, T)
            assert await resp.read() == b"ok"
            resp.release()
            # The server closes its side: wait until the pooled connection has seen it.
            await wait_for(lambda: all(c.closed for idle in pool._idle.values() for c in idle),
                           what="the worker's close to reach the pooled connection")
        assert srv.connections == 3


async def test_worker_lost_mid_body_is_a_payload_error_and_before_head_a_disconnect(pool) -> None:
    cut = [HEAD_CHUNKED + b"5\r\nhel"]
    async with RawServer(lambda i, req: cut, close_after=True) as srv:
        resp = await pool.post(srv.url, "/x", b"{}", {}, T)
        with pytest.raises(aiohttp.ClientPayloadError):
            await resp.read()
        resp.release()
    async with RawServer(lambda i, req: None) as srv:
        with pytest.raises(aiohttp.ServerDisconnectedError):
            await pool.post(srv.url, "/x", b"{}", {}, T)


async def test_silence_longer_than_the_read_timeout_fails_the_stream(pool) -> None:
    # One chunk, then the server holds the connection open and says nothing.
    async with RawServer(lambda i, req: [HEAD_CHUNKED + b"2\r\nhi\r\n"]) as srv:
        resp = await pool.post(srv.url, "/x", b"{}", {}, aiohttp.ClientTimeout(total=5, sock_read=0.3))
        assert await resp.readany() == b"hi"
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(asyncio.TimeoutError):
            await resp.readany()
        assert 0.2 < loop.time() - t0 < 2.0
        resp.release()


async def test_a_stream_still_talking_at_its_total_deadline_fails(pool) -> None:
    # Chunks keep coming (never silent for the read timeout), but the whole response is over
    # its total: the one timer watching both fails it at the deadline, with the total named.
    trickle = [HEAD_CHUNKED] + [b"2\r\nhi\r\n"] * 2000
    async with RawServer(lambda i, req: trickle) as srv:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        resp = await pool.post(srv.url, "/x", b"{}", {}, aiohttp.ClientTimeout(total=0.6, sock_read=0.3))
        with pytest.raises(asyncio.TimeoutError, match="did not finish within 0.6 s"):
            while await resp.readany():
                pass
        assert 0.5 < loop.time() - t0 < 2.0
        resp.release()


async def test_malformed_responses_and_unreachable_workers_are_retryable_errors(pool) -> None:
    async with RawServer(lambda i, req: [b"SPDY/9 200 OK\r\n\r\n"]) as srv:
        with pytest.raises(aiohttp.ClientPayloadError, match="bad status line"):
            await pool.post(srv.url, "/x", b"{}", {}, T)
    async with RawServer(lambda i, req: [HEAD_CHUNKED + b"zz\r\n"]) as srv:
        resp = await pool.post(srv.url, "/x", b"{}", {}, T)
        with pytest.raises(aiohttp.ClientPayloadError):
            await resp.read()
        resp.release()
    async with RawServer(lambda i, req: None) as srv:
        dead = srv.url
    with pytest.raises(aiohttp.ClientConnectionError, match="cannot connect"):
        await pool.post(dead, "/x", b"{}", {}, T)


async def test_header_injection_and_non_http_urls_are_refused(pool) -> None:
    with pytest.raises(ValueError, match="not allowed"):
        await pool.post("http://127.0.0.1:1", "/x", b"{}", {"X-Request-Id": "a\r\nEvil: 1"}, T)
    with pytest.raises(ValueError, match="plain http://"):
        await pool.post("https://127.0.0.1:1", "/x", b"{}", {}, T)


@pytest.mark.parametrize("piece", [0, 5])
async def test_a_sink_gets_the_body_from_the_read_callback_with_raw_chunks_when_whole(pool, piece) -> None:
    events = [b"data: {\"text\":\"a\"}\n\n", b"data: {\"text\":\"b\"}\n\n", b"data: [DONE]\n\n"]
    wire = HEAD_CHUNKED + chunked(*events)
    pieces = [HEAD_CHUNKED, *[chunked(e)[:-5] for e in events], b"0\r\n\r\n"] if piece == 0 else split_every(wire, piece)
    async with RawServer(lambda i, req: pieces) as srv:
        for _ in range(2):  # the connection goes back to the pool after a sunk body too
            resp = await pool.post(srv.url, "/v1/completions", {"prompt": "hi"}, {}, T)
            got: list[tuple[bytes, bytes | None]] = []
            resp.set_sink(lambda data, raw, got=got: got.append((data, raw)))
            assert await resp.readany() == b""  # only the end is reported
            resp.release()
            assert b"".join(d for d, _ in got) == b"".join(events)
            for data, raw in got:  # raw, when given, is that payload in chunk framing
                assert raw is None or raw == f"{len(data):x}\r\n".encode() + data + b"\r\n"
            if piece == 0:  # one whole chunk per read: every payload comes with its raw bytes
                assert [raw for _, raw in got] == [chunked(e)[:-5] for e in events]
        assert pool.opened == 1


async def test_a_sink_can_abort_the_response(pool) -> None:
    async with RawServer(lambda i, req: [HEAD_CHUNKED, b"2\r\nhi\r\n", b"2\r\nho\r\n", b"0\r\n\r\n"]) as srv:
        resp = await pool.post(srv.url, "/x", b"{}", {}, T)

        class Gone(Exception):
            pass

        resp.set_sink(lambda data, raw: resp.abort(Gone()))
        with pytest.raises(Gone):
            await resp.readany()
        assert resp.finished
        resp.release()


async def test_a_read_of_several_chunks_reaches_the_sink_as_one_payload(pool) -> None:
    """A router that fell behind its worker reads several chunks at once: the client gets
    them in one write (one sink call), not one write per chunk."""
    from pdserve.router.shell.http1 import Response, _Conn

    resp = Response(pool, ("127.0.0.1", 1), _Conn(), False, None)
    resp._on_head("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked")
    got: list[tuple[bytes, bytes | None]] = []
    resp.set_sink(lambda data, raw: got.append((data, raw)))
    events = [b"data: {\"text\":\"a\"}\n\n", b"data: {\"text\":\"b\"}\n\n", b"data: {\"text\":\"c\"}\n\n"]
    resp._feed(chunked(*events)[:-5])  # three whole chunks in one read
    assert got == [(b"".join(events), None)]
    resp._feed(chunked(events[0])[:-5])  # one whole chunk: passed on with its raw bytes
    assert got[-1] == (events[0], chunked(events[0])[:-5])
    wire = chunked(events[1], b"data: [DONE]\n\n")
    resp._feed(wire[:7])  # a chunk cut in two reads, then the rest with the end of the body
    resp._feed(wire[7:])
    assert b"".join(d for d, _ in got[2:]) == events[1] + b"data: [DONE]\n\n"
    assert len(got) == 4 and resp.finished
    resp.release()


@pytest.mark.parametrize("cut", [None, 3, 30, -3])
async def test_whole_chunks_and_the_last_chunk_in_one_read_end_the_body(pool, cut) -> None:
    """The fast path parses whole chunks from the read itself; whatever it cannot (a cut
    chunk, the end split off) goes to the full parser, in order."""
    from pdserve.router.shell.http1 import Response, _Conn

    resp = Response(pool, ("127.0.0.1", 1), _Conn(), False, None)
    resp._on_head("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked")
    got: list[bytes] = []
    resp.set_sink(lambda data, raw: got.append(data))
    events = [b"data: {\"text\":\"a\"}\n\n", b"data: [DONE]\n\n"]
    wire = chunked(*events)
    for piece in ([wire] if cut is None else [wire[:cut], wire[cut:]]):
        resp._feed(piece)
    assert b"".join(got) == b"".join(events)
    assert resp.finished and resp._mode == "done"
    assert len(got) == (2 if cut == 30 else 1)  # one write per read that completed a payload
    resp.release()


async def test_a_read_of_one_whole_chunk_reaches_the_sink_as_it_came_and_times_the_first_byte(pool) -> None:
    """The relay's common read (one streamed token, one whole chunk) goes to the sink with its
    raw bytes; reads the fast path cannot take (a chunk extension) go through the parser."""
    from pdserve.router.shell.http1 import Response, _Conn

    resp = Response(pool, ("127.0.0.1", 1), _Conn(), False, None)
    resp._on_head("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked")
    got: list[tuple[bytes, bytes | None]] = []
    resp.set_sink(lambda data, raw: got.append((data, raw)))
    assert resp.first_body_at == 0.0
    one = chunked(b"data: {\"text\":\"a\"}\n\n")[:-5]
    resp._feed(one)
    assert got == [(b"data: {\"text\":\"a\"}\n\n", one)] and resp.first_body_at > 0.0
    resp._feed(b"3;ext=1\r\nabc\r\n")  # an extension: the parser's path, same payload
    assert got[-1][0] == b"abc"
    resp._feed(b"0\r\n\r\n")
    assert resp.finished and resp._mode == "done"
    resp.release()
