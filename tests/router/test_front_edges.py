"""The client side's edges over raw sockets, on each HTTP server (--http-server): a body cut
short, pipelined requests, ``Expect: 100-continue``, a client that stalls mid-body."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from pdserve.router.shell import lean_server
from tests.router.conftest import MODEL, router_config, serve_router, spawn, wait_for

BODY = json.dumps({"model": MODEL, "prompt": "a b c", "max_tokens": 1}).encode()


@pytest.fixture(scope="module")
def workers() -> Iterator[list]:
    with ExitStack() as stack:
        yield spawn(stack, 1, speedup=1000.0, pd=False, events=False)


def _head(length: int, extra: str = "", rid: str = "r1") -> bytes:
    return (f"POST /v1/completions HTTP/1.1\r\nHost: router\r\nContent-Type: application/json\r\nX-Request-Id: {rid}\r\n"
            f"{extra}Content-Length: {length}\r\n\r\n").encode()


async def _read_all(reader: asyncio.StreamReader) -> bytes:
    return await asyncio.wait_for(reader.read(), 20)  # to the router's close: a hang fails here


async def _read_response(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 20)
    length = next(int(line.split(b":")[1]) for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:"))
    return head, await asyncio.wait_for(reader.readexactly(length), 20)


async def _still_serving(served) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    try:
        writer.write(_head(len(BODY)) + BODY)
        head, _ = await _read_response(reader)
        assert head.startswith(b"HTTP/1.1 200"), head
    finally:
        writer.close()
    await wait_for(lambda: served.state.active == 0, what="the router's requests to finish")


async def test_a_body_cut_short_then_half_closed_is_a_400_or_a_clean_close(workers, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="pdserve")
    async with serve_router(router_config(decode=[w.url for w in workers])) as served:
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        writer.write(_head(len(BODY)) + BODY[:10])
        await writer.drain()
        writer.write_eof()  # the client's side ends 10 bytes into the body
        got = await _read_all(reader)
        writer.close()
        assert got == b"" or got.startswith(b"HTTP/1.1 400"), got
        if got:
            assert f"10 of {len(BODY)} bytes".encode() in got, got
        await _still_serving(served)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_body_cut_short_by_a_client_that_gives_up_leaves_nothing_behind(workers, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="pdserve")
    async with serve_router(router_config(decode=[w.url for w in workers])) as served:
        for _ in range(3):
            reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
            writer.write(_head(len(BODY)) + BODY[:10])
            await writer.drain()
            await asyncio.sleep(0.2)  # the client's own timeout, then it closes
            writer.get_extra_info("socket").shutdown(socket.SHUT_RDWR)
            writer.close()
        await wait_for(lambda: served.connected() == 0, what="the router to drop the connections")
        assert served.state.active == 0
        await _still_serving(served)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_pipelined_requests_are_answered_in_order(workers) -> None:
    async with serve_router(router_config(decode=[w.url for w in workers])) as served:
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        try:
            writer.write(b"".join(_head(len(BODY), rid=f"p{i}") + BODY for i in range(4)))
            for i in range(4):
                head, body = await _read_response(reader)
                assert head.startswith(b"HTTP/1.1 200") and f"x-request-id: p{i}\r\n".encode() in head.lower(), head
                assert json.loads(body)["choices"], body
        finally:
            writer.close()


async def test_expect_100_continue_gets_continue_then_the_answer(workers) -> None:
    async with serve_router(router_config(decode=[w.url for w in workers])) as served:
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        try:
            writer.write(_head(len(BODY), extra="Expect: 100-continue\r\n"))
            interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 20)
            assert interim.startswith(b"HTTP/1.1 100"), interim
            writer.write(BODY)
            head, _ = await _read_response(reader)
            assert head.startswith(b"HTTP/1.1 200"), head
        finally:
            writer.close()


async def test_a_client_stalled_mid_body_gets_408_and_an_idle_one_is_closed(workers, http_server, monkeypatch) -> None:
    if http_server == "aiohttp":
        pytest.skip("aiohttp's server has no timeout on reading a request body: a stalled client holds its "
                    "connection until it leaves (the lean server's keep-alive timer covers it)")
    monkeypatch.setattr(lean_server, "KEEPALIVE_S", 0.5)
    async with serve_router(router_config(decode=[w.url for w in workers])) as served:
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        writer.write(_head(len(BODY)) + BODY[:10])
        got = await _read_all(reader)
        writer.close()
        assert got.startswith(b"HTTP/1.1 408"), got
        # A kept-alive connection left idle after its answer is closed without a word.
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        writer.write(_head(len(BODY)) + BODY)
        head, _ = await _read_response(reader)
        assert head.startswith(b"HTTP/1.1 200"), head
        assert await _read_all(reader) == b""
        writer.close()
        await _still_serving(served)


async def test_small_endpoints_methods_and_versions_answer_alike(workers) -> None:
    """The same answers from either server (each run of this test checks one against these)."""
    async with serve_router(router_config(decode=[w.url for w in workers])) as served:
        async def exchange(raw: bytes) -> tuple[bytes, bytes]:
            reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
            try:
                writer.write(raw)
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 20)
                length = next((int(line.split(b":")[1]) for line in head.lower().split(b"\r\n")
                               if line.startswith(b"content-length:")), None)
                if raw.startswith(b"HEAD"):
                    return head, b""
                body = await asyncio.wait_for(reader.readexactly(length) if length is not None else reader.read(), 20)
                return head, body
            finally:
                writer.close()

        head, body = await exchange(b"HEAD /health HTTP/1.1\r\nHost: r\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and body == b"", head
        head, body = await exchange(b"GET /v1/completions HTTP/1.1\r\nHost: r\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 404") and json.loads(body)["error"]["type"] == "NotFoundError", body
        head, body = await exchange(b"POST /v1/completions HTTP/1.1\r\nHost: r\r\nContent-Length: 2\r\n\r\n{}")
        assert head.startswith(b"HTTP/1.1 400") and json.loads(body)["error"]["param"] == "prompt", body
        head, body = await exchange(b"GET /health HTTP/1.0\r\n\r\n")
        assert head.startswith(b"HTTP/1.0 200") and json.loads(body)["status"] == "ok", (head, body)
