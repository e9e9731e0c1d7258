"""A request in flight while a scale-down stops its prefill worker is still served.

The planner's actuator takes a worker out of discovery, then SIGTERMs it; the worker drains
its HTTP requests and exits. A prefill that answered just before is then unreadable: the
decode worker's KV pull finds the side channel gone and vLLM answers 500. The router goes
back through prefill on a remaining worker; when the pool has one decode worker, that worker
must get the new (fresh) ``kv_transfer_params``. Before the fix the router excluded it and
answered 503 "no worker available" (seen in tests/planner/test_prometheus_loop.py under load).

Real ``pdserve worker`` processes and a real router; the race is made deterministic by a
loopback proxy in front of the victim prefill worker that, once the prefill answer is in
hand, does the actuator's two steps (drop the worker from the router, SIGTERM it and wait)
before passing the answer on.
"""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from pdserve.router.core.spec import RoutingSpec
from pdserve.router.shell.discovery import Endpoint, Endpoints
from tests.router.conftest import MODEL, router_config, run_router, serve_app, spawn

PROMPT = "scale down while the decode worker reads " * 20


async def test_prefill_worker_stopped_before_its_kv_is_read(worker_stack) -> None:
    victim, remaining = spawn(worker_stack, 2, events=False)
    (decode,) = spawn(worker_stack, 1, events=False)
    holder: dict = {}

    async def proxy(request: web.Request) -> web.Response:
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("x-request-id", "content-type")}
        async with aiohttp.ClientSession() as s, s.post(victim.url + request.path, data=await request.read(),
                                                        headers=headers) as up:
            status, raw = up.status, await up.read()
        # The actuator's scale-down, in its order: out of the router's discovery, then stop.
        holder["router"].state.apply_endpoints(Endpoints((Endpoint(remaining.url),), (Endpoint(decode.url),)))
        await asyncio.to_thread(victim.terminate, 20.0)
        return web.Response(body=raw, status=status, content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/completions", proxy)
    async with serve_app(app) as (purl, _):
        # Round robin takes the first prefill worker listed first: the one about to be stopped.
        # No cool-down: the proxy has no /metrics, and a failed scrape must not hide it.
        cfg = router_config(prefill=[purl, remaining.url], decode=[decode.url], scrape_interval_s=60,
                            worker_cooldown_s=0.0,
                            routing=RoutingSpec(policy="round_robin", decode_policy="round_robin"))
        async with run_router(cfg) as r:
            holder["router"] = r
            resp = await r.post("/v1/completions", {"model": MODEL, "prompt": PROMPT, "max_tokens": 8,
                                                    "ignore_eos": True})
            body = await resp.json()
            route = resp.headers.get("x-pdserve-route", "")
    assert victim.proc.poll() is not None, (resp.status, body, route)  # the race happened
    assert resp.status == 200, body
    assert body["usage"]["completion_tokens"] == 8
    # It really raced: the first decode failed to read the stopped worker's KV, the second
    # used the remaining prefill worker's.
    assert "prefill again" in route and f"prefill={remaining.url}" in route, route
    assert f"decode={decode.url}" in route, route
