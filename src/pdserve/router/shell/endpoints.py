"""The router's small endpoints (/v1/models, /health, /live, /metrics) as ``Reply``s, for both HTTP servers."""

from __future__ import annotations

import os
import time

from prometheus_client import CONTENT_TYPE_LATEST

from pdserve.router.shell.exchange import Reply, error_reply, json_reply
from pdserve.router.shell.metrics import exposition
from pdserve.router.shell.state import RouterState


async def models(state: RouterState) -> Reply:
    ts, cached = state.models_cache
    # Wall time paces how often workers are asked (I/O), not a routing decision.
    if time.monotonic() - ts > 2.0 or not cached:
        assert state.session is not None
        cached = await state.pool.fetch_models(state.session, state.cfg.connect_timeout_s)
        state.models_cache = (time.monotonic(), cached)
    return json_reply({"object": "list", "data": cached})


def health(state: RouterState) -> Reply:
    now = state.clock.monotonic()  # cool-downs are on the router's clock
    up = {role: len(state.pool.views(role, now, fail_open=False)) for role in ("prefill", "decode")}
    status = "ok" if up["decode"] > 0 else "no decode worker available"
    if status == "ok" and state.siblings is not None:
        # Any of the set may answer the next request: ready only when each has a decode worker (siblings.py).
        status = state.siblings.not_ready() or status
    ok = status == "ok"
    body = {"status": status, "workers": up,
            "disaggregated": state.disaggregated, "policy": state.cfg.routing.policy.value, "inflight": state.active,
            "pid": os.getpid()}  # which process answered, under --processes N
    return json_reply(body, 200 if ok else 503)


def live(state: RouterState) -> Reply:
    """The process answers (a liveness probe): 200 with or without workers, unlike /health."""
    return json_reply({"status": "alive", "pid": os.getpid(), "inflight": state.active})


def metrics(state: RouterState) -> Reply:
    state.refresh_gauges()
    return Reply(200, exposition(state.metrics.registry), content_type=CONTENT_TYPE_LATEST)


def not_found(method: str, path: str) -> Reply:
    return error_reply(404, f"no route for {method} {path}", "NotFoundError")
