#!/usr/bin/env python3
"""The floor of a Python data path: the least a Python HTTP/1.1 streaming proxy does per request, for
``burst.py --targets python-floor`` (issue 14: how much of pdserve's CPU per streamed token against the Rust routers
is the language and its event loop, and how much is pdserve's own work).

Not a router anyone should deploy: one event loop (uvloop), httptools' C parsers on both sides, the request body
parsed as JSON once (every router does; nothing is read from it), the worker picked round robin, kept-alive worker
connections, and the worker's response bytes written to the client as they arrive, unparsed but for httptools
finding the end of the message. No tokenizer, no policy state, no metrics, no SSE tracking, no retries, no
back-pressure, no header validation. Whatever pdserve's router costs above this is its features; what this costs
above the Rust routers no Python code can remove.

    python bench/router/python_floor.py --port 8000 --worker-urls http://127.0.0.1:8100
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
from collections import deque
from urllib.parse import urlsplit

import httptools


class Upstream(asyncio.Protocol):
    """One kept-alive connection to a worker; relays one response at a time to its client."""

    def __init__(self, pool: deque[Upstream]) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.client: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.done = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.client is not None:
            self.client.write(data)
        self.parser.feed_data(data)
        if self.done:  # the whole response is through: back to the pool for the next request
            self.done, self.client = False, None
            self.parser = httptools.HttpResponseParser(self)
            self.pool.append(self)

    def on_message_complete(self) -> None:
        self.done = True

    def connection_lost(self, exc: Exception | None) -> None:
        if self in self.pool:
            self.pool.remove(self)
        if self.client is not None:
            self.client.close()


class Front(asyncio.Protocol):
    """One client connection: parse a request, pick a worker, send it there."""

    def __init__(self, floor: Floor) -> None:
        self.floor = floor
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            self.transport.close()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        body, self.body, url, self.url = b"".join(self.body), [], self.url, b""
        if body:
            json.loads(body)  # a router reads the request; this one ignores what it reads
        asyncio.get_running_loop().create_task(self.floor.forward(self.transport, self.parser.get_method(), url, body))


class Floor:
    def __init__(self, workers: list[str]) -> None:
        self.targets = [(u.hostname or "127.0.0.1", u.port or 80, f"{u.hostname}:{u.port}".encode())
                        for u in map(urlsplit, workers)]
        self.next = itertools.cycle(range(len(self.targets)))
        self.pools: list[deque[Upstream]] = [deque() for _ in self.targets]

    async def forward(self, client: asyncio.Transport | None, method: bytes, url: bytes, body: bytes) -> None:
        assert client is not None
        i = next(self.next)
        pool = self.pools[i]
        if pool:
            up = pool.popleft()
        else:
            host, port, _ = self.targets[i]
            _, up = await asyncio.get_running_loop().create_connection(lambda: Upstream(pool), host, port)
        up.client = client
        assert up.transport is not None
        up.transport.write(b"%s %s HTTP/1.1\r\nhost: %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                           % (method, url, self.targets[i][2], len(body), body))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--worker-urls", nargs="+", required=True)
    args = ap.parse_args()
    import uvloop

    async def serve() -> None:
        floor = Floor(args.worker_urls)
        server = await asyncio.get_running_loop().create_server(lambda: Front(floor), args.host, args.port, backlog=4096)
        async with server:
            await server.serve_forever()

    uvloop.run(serve())


if __name__ == "__main__":
    main()
