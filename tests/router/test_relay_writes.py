"""The streamed relay writes to the client once per upstream read, the response head and the
body's end included (router/shell/relay.py ``_Pipe``): aiohttp itself writes nothing for a
streamed response, and what the client gets is one well-formed chunked response after which
the connection serves the next request.

The worker is a fake on loopback that writes each SSE event on its own, with pauses, so
every event reaches the router in a read of its own, then ``[DONE]`` and the terminating
chunk in two more writes (as uvicorn and the mock worker do).
"""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web
from aiohttp.http_writer import StreamWriter

from pdserve.router.core.spec import RoutingSpec
from pdserve.router.shell import relay
from tests.router.conftest import MODEL, router_config, run_router, serve_app

EVENTS = [b'data: {"id":"x","model":"mock-llama","choices":[{"index":0,"text":"%d","finish_reason":null}]}\n\n' % i
          for i in range(5)]


def _worker(first_delay_s: float = 0.0) -> web.Application:
    async def stream(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await asyncio.sleep(first_delay_s)
        for event in EVENTS:
            await resp.write(event)
            await asyncio.sleep(0.02)
        await resp.write(b"data: [DONE]\n\n")
        await asyncio.sleep(0.02)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/completions", stream)
    return app


def _request(port: int) -> bytes:
    raw = json.dumps({"model": MODEL, "prompt": "a b c", "max_tokens": 5, "stream": True}).encode()
    return (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(raw)}\r\n\r\n").encode() + raw


async def _read_response(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """(head, de-chunked body) of one chunked response, read exactly to its end."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 20)
    assert b"transfer-encoding: chunked" in head.lower(), head
    body = b""
    while True:
        size = int((await asyncio.wait_for(reader.readuntil(b"\r\n"), 20)).strip(), 16)
        data = await asyncio.wait_for(reader.readexactly(size + 2), 20)
        assert data.endswith(b"\r\n")
        if size == 0:
            return head, body
        body += data[:-2]


async def test_head_and_end_of_a_streamed_response_go_with_the_relayed_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    router_port: list[int] = []
    aiohttp_writes: list[bytes] = []  # what aiohttp's own writer sent on the router's client connections

    def mine(writer: StreamWriter) -> bool:
        t = writer._protocol.transport
        return t is not None and t.get_extra_info("sockname")[1] in router_port

    real_write, real_writelines = StreamWriter._write, StreamWriter._writelines

    def write(self: StreamWriter, chunk) -> None:  # type: ignore[no-untyped-def]
        if mine(self):
            aiohttp_writes.append(bytes(chunk))
        real_write(self, chunk)

    def writelines(self: StreamWriter, chunks) -> None:  # type: ignore[no-untyped-def]
        chunks = list(chunks)
        if mine(self):
            aiohttp_writes.append(b"".join(bytes(c) for c in chunks))
        real_writelines(self, chunks)

    monkeypatch.setattr(StreamWriter, "_write", write)
    monkeypatch.setattr(StreamWriter, "_writelines", writelines)
    monkeypatch.setattr(relay, "HEAD_WAIT_S", 60.0)  # a loaded CI box must not send the head alone
    cfg = router_config(decode=[], routing=RoutingSpec(policy="round_robin"), scrape_interval_s=60)
    async with serve_app(_worker()) as (wurl, _):
        cfg.decode = [wurl]
        async with run_router(cfg) as r:
            router_port.append(int(r.url.rsplit(":", 1)[1]))
            reader, writer = await asyncio.open_connection("127.0.0.1", router_port[0])
            try:
                for _ in range(2):  # the same connection twice: the first response ended exactly
                    writer.write(_request(router_port[0]))
                    head, body = await _read_response(reader)
                    assert head.startswith(b"HTTP/1.1 200"), head
                    assert b"x-request-id:" in head.lower()
                    assert body == b"".join(EVENTS) + b"data: [DONE]\n\n"
            finally:
                writer.close()
    # Before: aiohttp wrote each response's head on its own, and its terminating chunk.
    assert aiohttp_writes == [], aiohttp_writes


async def test_the_head_goes_alone_when_the_first_chunk_is_late(monkeypatch: pytest.MonkeyPatch) -> None:
    """The head waits for the first chunk at most HEAD_WAIT_S: a client (or a proxy with a
    header timeout) sees the response start before a long prefill ends."""
    monkeypatch.setattr(relay, "HEAD_WAIT_S", 0.05)
    cfg = router_config(decode=[], routing=RoutingSpec(policy="round_robin"), scrape_interval_s=60)
    async with serve_app(_worker(first_delay_s=3.0)) as (wurl, _):
        cfg.decode = [wurl]
        async with run_router(cfg) as r:
            port = int(r.url.rsplit(":", 1)[1])
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                writer.write(_request(port))
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2.0)  # well before the first chunk
                assert head.startswith(b"HTTP/1.1 200"), head
                assert reader._buffer == b""  # type: ignore[attr-defined]  # nothing of the body yet
            finally:
                writer.close()


async def test_an_http10_client_gets_the_stream_until_close() -> None:
    cfg = router_config(decode=[], routing=RoutingSpec(policy="round_robin"), scrape_interval_s=60)
    async with serve_app(_worker()) as (wurl, _):
        cfg.decode = [wurl]
        async with run_router(cfg) as r:
            port = int(r.url.rsplit(":", 1)[1])
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                writer.write(_request(port).replace(b"HTTP/1.1", b"HTTP/1.0", 1))
                got = await asyncio.wait_for(reader.read(), 20)  # to the close
            finally:
                writer.close()
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200"), head
    assert body == b"".join(EVENTS) + b"data: [DONE]\n\n"
