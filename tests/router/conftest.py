"""Fixtures: real ``pdserve worker`` processes and an in-process router on loopback."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass

import aiohttp
import pytest
from aiohttp import web

from pdserve.router.shell.app import STATE_KEY, build_app
from pdserve.router.shell.config import RouterConfig
from pdserve.router.shell.lean_server import LeanServer, serving
from pdserve.router.shell.state import RouterState

MODEL = "mock-llama"
# The router's HTTP server under test (--http-server): every test module that starts a router
# (through run_router, serve_router or server_args) runs once per server (pytest_generate_tests).
# (An environment variable, not a module global: pytest's conftest module and the one tests
# import by name can be two module objects.)
HTTP_SERVERS = ("aiohttp", "lean")
SERVER_ENV = "PDSERVE_TEST_HTTP_SERVER"


def _server_now() -> str:
    return os.environ.get(SERVER_ENV, "aiohttp")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    mod = metafunc.module
    if "http_server" in metafunc.fixturenames and any(
            getattr(mod, name, None) is not None for name in ("run_router", "serve_router", "server_args")):
        metafunc.parametrize("http_server", HTTP_SERVERS, indirect=True)


@pytest.fixture(autouse=True)
def http_server(request: pytest.FixtureRequest) -> Iterator[str]:
    name = getattr(request, "param", "aiohttp")
    os.environ[SERVER_ENV] = name
    try:
        yield name
    finally:
        os.environ.pop(SERVER_ENV, None)


def server_args() -> list[str]:
    """The command-line flag choosing the HTTP server under test, for tests that start ``pdserve router``."""
    return ["--http-server", _server_now()]


def router_config(**kw) -> RouterConfig:
    """A RouterConfig for tests against mock workers: their hash-word tokenizer, named
    explicitly (the router has no implicit tokenizer)."""
    kw.setdefault("tokenizer_mode", "mock")
    return RouterConfig(**kw)


def worker_args(pd: bool = True, events: bool = True) -> list[str]:
    args = ["--mock-side-channel-port", "0"]
    if pd:
        args += ["--kv-transfer-config", json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"})]
    if events:
        args += ["--kv-events-config", json.dumps({"enable_kv_cache_events": True, "publisher": "zmq",
                                                   "endpoint": "tcp://127.0.0.1:*"})]
    return args


def spawn(stack: ExitStack, n: int, speedup: float = 100.0, pd: bool = True, events: bool = True) -> list:
    from pdserve.worker.testing import start_worker

    return [stack.enter_context(start_worker(MODEL, args=worker_args(pd, events), speedup=speedup))
            for _ in range(n)]


def kill(worker) -> None:
    try:
        os.killpg(worker.proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    worker.proc.wait(5)


def entry(w) -> dict:
    return {"url": w.url, "kv_events": w.kv_events_endpoint}


@pytest.fixture(scope="module")
def pd_workers() -> Iterator[tuple[list, list]]:
    """Two prefill and two decode workers, shared by a module's tests."""
    with ExitStack() as stack:
        yield spawn(stack, 2), spawn(stack, 2)


@pytest.fixture
def worker_stack() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


@dataclass
class RouterHandle:
    url: str
    state: RouterState
    session: aiohttp.ClientSession

    async def post(self, path: str, body: object, **kw) -> aiohttp.ClientResponse:
        return await self.session.post(self.url + path, json=body, **kw)

    async def metric(self, name: str) -> float:
        """Sum of a metric's samples on the router's /metrics (0 when absent)."""
        async with self.session.get(self.url + "/metrics") as r:
            return metric_sum(await r.text(), name)


def metric_sum(text: str, name: str, label: str | None = None) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            if label is None or label in line:
                total += float(line.rsplit(" ", 1)[1])
    return total


async def worker_metric(url: str, name: str, label: str | None = None) -> float:
    async with aiohttp.ClientSession() as s, s.get(url + "/metrics") as r:
        return metric_sum(await r.text(), name, label)


@asynccontextmanager
async def serve_app(app: web.Application) -> AsyncIterator[tuple[str, int]]:
    """``app`` on a free loopback port for the block: yields its base URL and port."""
    async with _app_runner(app) as (_runner, port):
        yield f"http://127.0.0.1:{port}", port


@asynccontextmanager
async def _app_runner(app: web.Application) -> AsyncIterator[tuple[web.AppRunner, int]]:
    """``app`` served on a free loopback port for the block: yields its runner and port."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield runner, port
    finally:
        await runner.cleanup()


@dataclass
class Served:
    url: str
    port: int
    state: RouterState
    connected: Callable[[], int]  # client connections the server still holds open


@asynccontextmanager
async def serve_router(cfg: RouterConfig) -> AsyncIterator[Served]:
    """The router on a free loopback port, on the HTTP server under test."""
    cfg.port = 0
    cfg.http_server = _server_now()
    if cfg.http_server == "lean":
        server = LeanServer.build(cfg)
        async with serving(server, "127.0.0.1", 0) as listener:
            port = listener.sockets[0].getsockname()[1]
            yield Served(f"http://127.0.0.1:{port}", port, server.state, lambda: len(server.connections))
        return
    app = build_app(cfg)
    async with _app_runner(app) as (runner, port):
        # aiohttp keeps a lost connection listed until its handler returns; its transport is gone.
        yield Served(f"http://127.0.0.1:{port}", port, app[STATE_KEY],
                     lambda: sum(c.transport is not None for c in runner.server.connections))  # type: ignore[union-attr]


@asynccontextmanager
async def run_router(cfg: RouterConfig) -> AsyncIterator[RouterHandle]:
    async with serve_router(cfg) as served, aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=60)) as session:
        yield RouterHandle(served.url, served.state, session)


async def wait_for(cond: Callable[[], object], timeout: float = 10.0, what: str = "condition") -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def kv_events_flowing(r: RouterHandle, workers: Sequence, model: str = MODEL, timeout: float = 60.0) -> None:
    """Wait until the router's index holds blocks from each of ``workers``.

    A ZMQ PUB drops what it publishes before the router's SUB socket has connected and its
    subscription has arrived (the "slow joiner"); the router subscribes in the background, so
    a request sent right after start-up may store blocks the index never hears of. Each worker
    gets throwaway prompts straight (not through the router, whose counters stay clean) until
    one of its events has reached the index: from then on the subscription is live."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    async with aiohttp.ClientSession() as s:
        for w in workers:
            while r.state.index.blocks_of(w.url) == 0:
                if loop.time() > deadline:
                    raise AssertionError(f"no KV event from {w.url} reached the router's index in {timeout} s")
                # 40 fresh words (a prompt the worker cached before stores no new block): 2 full
                # blocks that match nothing else.
                tag = uuid.uuid4().hex[:8]
                prompt = " ".join(f"warmup{tag}w{i}" for i in range(40))
                async with s.post(w.url + "/v1/completions",
                                  json={"model": model, "prompt": prompt, "max_tokens": 1}) as resp:
                    assert resp.status == 200, await resp.text()
                step_end = min(deadline, loop.time() + 1.0)
                while r.state.index.blocks_of(w.url) == 0 and loop.time() < step_end:
                    await asyncio.sleep(0.02)


async def read_sse(resp: aiohttp.ClientResponse) -> list[dict | str]:
    """All events of an SSE response: parsed JSON objects, or '[DONE]'."""
    out: list[dict | str] = []
    buf = b""
    async for chunk in resp.content.iter_any():
        buf += chunk
        while b"\n\n" in buf:
            raw, buf = buf.split(b"\n\n", 1)
            for line in raw.split(b"\n"):
                if line.startswith(b"data: "):
                    data = line[6:]
                    out.append("[DONE]" if data == b"[DONE]" else json.loads(data))
    return out


def stream_text(events: list, kind: str = "completions") -> str:
    parts = []
    for e in events:
        if isinstance(e, dict):
            for ch in e.get("choices", []):
                parts.append(ch.get("text") if kind == "completions" else (ch.get("delta") or {}).get("content") or "")
    return "".join(p for p in parts if p)
