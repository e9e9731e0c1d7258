"""The router's aiohttp application: endpoints, background loops, lifecycle."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from pdserve.router.shell.config import RouterConfig
from pdserve.router.shell.auth import ApiKeys
from pdserve.router.shell.discovery import Endpoints, FileWatcher, KubernetesWatcher, parse_discovery
from pdserve.router.shell.handler import CompletionHandler, error_response
from pdserve.router.shell.http1_pool import Http1Pool
from pdserve.router.shell.kv_events import KvEventSubscriber
from pdserve.router.shell.metrics import exposition
from pdserve.router.shell.relay import end_streams
from pdserve.router.shell.state import RouterState

log = logging.getLogger("pdserve.router")
STATE_KEY = web.AppKey("state", RouterState)


def build_app(cfg: RouterConfig) -> web.Application:
    cfg.validate()
    if cfg.prefill or cfg.decode:
        static_endpoints(cfg)  # fail now, with the bad URL named, not at start-up
    state = RouterState(cfg)
    # Our own body limit check gives an OpenAI-style 413; aiohttp's must not fire first.
    app = web.Application(client_max_size=cfg.max_body_bytes + 1024,
                          middlewares=[ApiKeys(cfg.api_keys).middleware()] if cfg.api_keys else [])
    app[STATE_KEY] = state
    handler = CompletionHandler(state)

    async def completions(request: web.Request) -> web.StreamResponse:
        return await handler(request, "completions")

    async def chat(request: web.Request) -> web.StreamResponse:
        return await handler(request, "chat")

    async def models(request: web.Request) -> web.Response:
        ts, cached = state.models_cache
        # Wall time paces how often workers are asked (I/O), not a routing decision.
        if time.monotonic() - ts > 2.0 or not cached:
            assert state.session is not None
            cached = await state.pool.fetch_models(state.session, cfg.connect_timeout_s)
            state.models_cache = (time.monotonic(), cached)
        return web.json_response({"object": "list", "data": cached})

    async def health(request: web.Request) -> web.Response:
        now = state.clock.monotonic()  # cool-downs are on the router's clock
        up = {role: len(state.pool.views(role, now, fail_open=False)) for role in ("prefill", "decode")}
        ok = up["decode"] > 0
        body = {"status": "ok" if ok else "no decode worker available", "workers": up,
                "disaggregated": state.disaggregated, "policy": cfg.routing.policy.value, "inflight": state.active,
                "pid": os.getpid()}  # which process answered, under --processes N
        return web.json_response(body, status=200 if ok else 503)

    async def metrics(request: web.Request) -> web.Response:
        state.refresh_gauges()
        return web.Response(body=exposition(state.metrics.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def not_found(request: web.Request) -> web.Response:
        return error_response(404, f"no route for {request.method} {request.path}", "NotFoundError")

    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    app.router.add_route("*", "/{tail:.*}", not_found)
    app.cleanup_ctx.append(_lifecycle)
    app.on_shutdown.append(_end_streams_before_the_cut)
    return app


async def _end_streams_before_the_cut(app: web.Application) -> None:
    """On SIGTERM aiohttp stops listening, then waits ``shutdown_timeout`` for the handlers
    and cuts the connections of those still running: a client would see a truncated body (over
    HTTP/1.0 indistinguishable from a short answer). A second before that, end the streams
    still relayed with an OpenAI-style error event and [DONE] instead."""
    state = app[STATE_KEY]
    asyncio.get_running_loop().call_later(max(0.0, state.cfg.shutdown_timeout_s - 1.0), end_streams, state)


async def _lifecycle(app: web.Application) -> AsyncIterator[None]:
    state = app[STATE_KEY]
    cfg = state.cfg
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=60, enable_cleanup_closed=True)
    # No cookies between users, no decompression: the router passes bytes through.
    state.session = aiohttp.ClientSession(connector=connector, auto_decompress=False,
                                          cookie_jar=aiohttp.DummyCookieJar())
    if cfg.upstream_client == "http1":
        state.http = Http1Pool()
    if cfg.kv_events:
        state.kv_sub = KvEventSubscriber(state.index, lambda w, n: state.metrics.kv_events.labels(w).inc(n))
    tasks: list[asyncio.Task[None]] = []
    k8s: KubernetesWatcher | None = None
    if cfg.discovery_file is not None:
        watcher = FileWatcher(cfg.discovery_file, state.apply_endpoints, cfg.kv_events_port)
        watcher.poll()
        tasks.append(asyncio.create_task(watcher.run()))
    elif cfg.k8s_service:
        k8s = KubernetesWatcher(cfg.k8s_service, cfg.k8s_namespace, state.apply_endpoints,
                                asyncio.get_running_loop(), cfg.worker_http_port, cfg.kv_events_port)
        k8s.start()
    else:
        state.apply_endpoints(static_endpoints(cfg))
    tasks.append(asyncio.create_task(_scrape_loop(state)))
    try:
        yield
    finally:
        if k8s is not None:
            k8s.stop()
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        if state.kv_sub is not None:
            await state.kv_sub.close()
        await state.session.close()
        if state.http is not None:
            state.http.close()
        if state.tracing is not None:
            state.tracing.shutdown()  # flush the spans still batched


async def _scrape_loop(state: RouterState) -> None:
    assert state.session is not None
    last_models = 0.0
    while True:
        try:
            await state.pool.scrape_once(state.session, max(state.cfg.scrape_interval_s * 2, 1.0))
            # Refresh cadence of /v1/models: I/O pacing on wall time, like the sleep below.
            if time.monotonic() - last_models > 5.0 or not state.pool.known_models():
                state.models_cache = (time.monotonic(), await state.pool.fetch_models(state.session, 2.0))
                last_models = time.monotonic()
        except Exception:  # never let a bad scrape kill the loop
            log.exception("worker scrape failed")
        await asyncio.sleep(state.cfg.scrape_interval_s)


def static_endpoints(cfg: RouterConfig) -> Endpoints:
    return parse_discovery({"prefill": cfg.prefill, "decode": cfg.decode}, cfg.kv_events_port, source="command line")
