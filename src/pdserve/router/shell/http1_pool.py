"""Keep-alive connection pool and request writer of the router's lean HTTP/1.1 client
(the response side, its framing parser and the connection protocol live in ``http1``)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from pdserve.router.shell.http1 import ConnectError, Response, _Conn


class Http1Pool:
    """Keep-alive connections per worker (host, port); safe within one event loop."""

    def __init__(self, max_idle_per_host: int = 1024) -> None:
        self._idle: dict[tuple[str, int], list[_Conn]] = {}
        self._targets: dict[str, tuple[tuple[str, int], bytes, bytes]] = {}  # url -> key, path prefix, Host
        self.max_idle_per_host = max_idle_per_host
        self.opened = 0  # connections created (tests and stats)

    def _target(self, base_url: str) -> tuple[tuple[str, int], bytes, bytes]:
        t = self._targets.get(base_url)
        if t is None:
            parts = urlsplit(base_url)
            if parts.scheme != "http" or not parts.hostname:
                raise ValueError(f"http1 client handles plain http:// URLs only, got {base_url!r}")
            port = parts.port or 80
            host_header = parts.netloc.rsplit("@", 1)[-1]
            prefix = parts.path.rstrip("/").encode()
            t = self._targets[base_url] = ((parts.hostname, port), prefix, host_header.encode("idna"))
        return t

    def _put(self, key: tuple[str, int], conn: _Conn) -> None:
        idle = self._idle.setdefault(key, [])
        if len(idle) < self.max_idle_per_host:
            idle.append(conn)
        elif conn.transport is not None:
            conn.transport.close()

    async def _connect(self, key: tuple[str, int], timeout: float | None) -> _Conn:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(loop.create_connection(_Conn, key[0], key[1]), timeout)
        except TimeoutError:
            raise aiohttp.ConnectionTimeoutError(f"connecting to {key[0]}:{key[1]} timed out") from None
        except OSError as e:
            raise ConnectError(f"cannot connect to {key[0]}:{key[1]}: {e}") from e
        self.opened += 1
        return conn

    async def post(
        self,
        base_url: str,
        path: str,
        body: bytes | dict[str, Any],
        headers: dict[str, str],
        timeout: aiohttp.ClientTimeout,
    ) -> Response:
        """POST ``body`` (bytes sent as JSON as is, or a dict to encode) to ``base_url + path``;
        returns once the response head has arrived."""
        key, prefix, host = self._target(base_url)
        data = body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode()
        head = [
            b"POST ",
            prefix,
            path.encode(),
            b" HTTP/1.1\r\nHost: ",
            host,
            b"\r\nContent-Type: application/json\r\nContent-Length: ",
            str(len(data)).encode(),
            b"\r\n",
        ]
        for name, value in headers.items():
            if name.lower() in ("host", "content-length", "content-type", "transfer-encoding", "connection"):
                continue
            if "\r" in value or "\n" in value or "\r" in name or "\n" in name or ":" in name:
                raise ValueError(f"header {name!r} has characters not allowed in HTTP/1.1")
            head += [name.encode("latin-1"), b": ", value.encode("latin-1"), b"\r\n"]
        request = b"".join(head) + b"\r\n" + data
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout.total if timeout.total else None
        idle = self._idle.get(key)
        while True:
            conn: _Conn | None = None
            while idle:
                c = idle.pop()
                if not c.closed and c.transport is not None and not c.transport.is_closing():
                    conn = c
                    break
            reused = conn is not None
            if conn is None:
                conn = await self._connect(key, timeout.sock_connect or timeout.connect)
            resp = Response(self, key, conn, reused, timeout.sock_read, deadline,
                            float(timeout.total) if timeout.total else None)
            conn.resp = resp
            assert conn.transport is not None
            conn.transport.write(request)
            resp.sent_at = time.perf_counter()
            try:
                await resp._head
            except aiohttp.ServerDisconnectedError:
                resp.release()
                # A pooled connection the worker had closed while idle: the request never
                # reached it, so a fresh connection may safely resend it.
                if reused and not resp.got_bytes:
                    continue
                raise
            except BaseException:
                resp.release()
                raise
            return resp

    def close(self) -> None:
        for idle in self._idle.values():
            for c in idle:
                if c.transport is not None:
                    c.transport.close()
        self._idle.clear()
