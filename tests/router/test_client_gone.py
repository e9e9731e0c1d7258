"""A client that hangs up as soon as it has read ``data: [DONE]`` (many SSE clients do,
before the body's terminating chunk) is a client gone, not a router error: no
"stream relay failed" traceback, and the router keeps serving.

The worker is a fake on loopback that holds its response open after ``[DONE]`` until the
test lets it end, so the client's hang-up reaches the router first, every time.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import struct

import pytest
from aiohttp import web

from pdserve.router.core.spec import RoutingSpec
from tests.router.conftest import MODEL, router_config, serve_app, serve_router, wait_for


@pytest.mark.parametrize("kind", ["completions", "chat"])
async def test_client_closing_after_done_is_not_a_router_error(kind: str, caplog: pytest.LogCaptureFixture) -> None:
    release = asyncio.Event()

    async def stream(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        choice = ({"index": 0, "text": "hi", "finish_reason": "length"} if kind == "completions"
                  else {"index": 0, "delta": {"content": "hi"}, "finish_reason": "length"})
        await resp.write(b"data: " + json.dumps({"id": "x", "model": MODEL, "choices": [choice]}).encode()
                         + b"\n\ndata: [DONE]\n\n")
        await asyncio.wait_for(release.wait(), 20)
        await resp.write_eof()
        return resp

    worker = web.Application()
    worker.router.add_post(f"/v1/{'completions' if kind == 'completions' else 'chat/completions'}", stream)
    cfg = router_config(decode=[], routing=RoutingSpec(policy="round_robin"), scrape_interval_s=60)
    async with serve_app(worker) as (wurl, _):
        cfg.decode = [wurl]
        async with serve_router(cfg) as served:
            port, state = served.port, served.state
            try:
                caplog.set_level(logging.WARNING, logger="pdserve")
                for _ in range(2):  # twice: the router serves on after the first hang-up
                    release.clear()
                    body = ({"model": MODEL, "prompt": "a b c", "max_tokens": 1, "stream": True} if kind == "completions"
                            else {"model": MODEL, "messages": [{"role": "user", "content": "a b c"}], "max_tokens": 1,
                                  "stream": True})
                    path = "/v1/completions" if kind == "completions" else "/v1/chat/completions"
                    raw = json.dumps(body).encode()
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                    writer.write(f"POST {path} HTTP/1.1\r\nHost: router\r\nContent-Type: application/json\r\n"
                                 f"Content-Length: {len(raw)}\r\n\r\n".encode() + raw)
                    got = b""
                    while b"data: [DONE]" not in got:
                        data = await asyncio.wait_for(reader.read(65536), 20)
                        assert data, f"the router closed before [DONE]: {got!r}"
                        got += data
                    # Hang up before the terminating chunk, with a reset (SO_LINGER 0), so the router sees it
                    # now rather than at its next write.
                    sock = writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    writer.close()
                    await wait_for(lambda: served.connected() == 0, what="the router to see the hang-up")
                    release.set()  # now the worker ends its body and the router ends the client's
                    await wait_for(lambda: state.active == 0, what="the request to finish in the router")
                    assert b" 200 " in got.split(b"\r\n", 1)[0]
            finally:
                release.set()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]
