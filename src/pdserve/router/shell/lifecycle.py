"""What runs beside the router's HTTP server, whichever it is: the upstream clients,
worker discovery, the scrape loop, KV-event subscriptions; and their orderly end."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

import aiohttp

from pdserve.router.shell.config import RouterConfig
from pdserve.router.shell.discovery import Endpoints, FileWatcher, KubernetesWatcher, parse_discovery
from pdserve.router.shell.http1_pool import Http1Pool
from pdserve.router.shell.kv_events import KvEventSubscriber
from pdserve.router.shell.state import RouterState

log = logging.getLogger("pdserve.router")


@contextlib.asynccontextmanager
async def running(state: RouterState) -> AsyncIterator[None]:
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
