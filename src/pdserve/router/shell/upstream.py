"""Calls to workers, with retry on another worker for failures before the first byte.

A decode request that carries ``kv_transfer_params`` is not idempotent: once a worker may
have read the prefilled blocks (NIXL READ, then a notification that frees them on the
prefill side), the same params can name blocks that now hold another request's KV. Such a
request is resent elsewhere only when it provably never reached a worker (no connection);
any later failure raises :class:`UpstreamFailed` with ``spent=True`` and the caller goes
back through prefill.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from pdserve.router.shell.http1 import ConnectError
from pdserve.router.shell.http1 import Response as Http1Response
from pdserve.router.policies import Policy, RouteRequest
from pdserve.router.shell.state import Choice, RouterState

# Failures that mean "this worker could not serve it", worth another worker.
RETRYABLE = (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, asyncio.TimeoutError, ConnectionError)
# Failures that prove the request never reached the worker: no connection was made.
NOT_SENT = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError, ConnectError)


_JSON = {"Content-Type": "application/json"}


class UpstreamFailed(Exception):
    """Every eligible worker failed (or none was left)."""

    def __init__(self, stage: str, detail: str, no_workers: bool = False, spent: bool = False,
                 tried: list[str] | None = None) -> None:
        super().__init__(f"{stage}: {detail}")
        self.stage = stage
        self.detail = detail
        self.no_workers = no_workers  # nothing was even tried
        self.spent = spent  # a worker may have consumed the request's KV transfer params
        self.tried = tried or []


@dataclass
class Attempt:
    """An upstream response that got as far as its status line."""

    choice: Choice
    resp: aiohttp.ClientResponse | Http1Response
    started: float
    tried: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.choice.decision.worker_id


async def send_with_retries(
    state: RouterState,
    *,
    stage: str,
    pool: str,
    policy: Policy,
    req: RouteRequest,
    first: Choice | None,
    path: str,
    body: dict[str, Any] | bytes,
    headers: dict[str, str],
    timeout: aiohttp.ClientTimeout,
    exclude: set[str] | None = None,
    on_attempt: Callable[[Choice], Awaitable[None] | None] | None = None,
    consumable: bool = False,
) -> Attempt:
    """POST ``body`` (a dict, or JSON bytes sent as is) to a worker of ``pool``, trying others on connection errors,
    timeouts and 5xx before any byte of the body was read. The caller owns (and must
    release) ``Attempt.resp``. 4xx responses are returned: the request is at fault.

    ``consumable``: the body carries KV transfer params a worker consumes by reading; it is
    resent only after failures that prove it was never sent (:data:`NOT_SENT`), any other
    failure raises ``UpstreamFailed(spent=True)``."""
    assert state.session is not None
    tried: set[str] = set(exclude or ())
    order: list[str] = []
    last = "no worker available"
    choice = first
    for _attempt in range(state.cfg.max_retries + 1):
        if choice is None or choice.decision.worker_id in tried:
            choice = state.choose(pool, policy, req, tried)
        if choice is None:
            break
        url = choice.decision.worker_id
        if order:
            state.metrics.retries.labels(stage).inc()
        order.append(url)
        state.scheduler.on_routed(policy, choice.decision, req, state.clock.monotonic())
        if on_attempt is not None:
            r = on_attempt(choice)
            if r is not None:
                await r
        started = time.perf_counter()
        try:
            if state.http is not None and url.startswith("http://"):
                resp: aiohttp.ClientResponse | Http1Response = await state.http.post(url, path, body, headers, timeout)
            elif isinstance(body, bytes):
                resp = await state.session.post(url + path, data=body, headers={**headers, **_JSON}, timeout=timeout)
            else:
                resp = await state.session.post(url + path, json=body, headers=headers, timeout=timeout)
        except RETRYABLE as e:
            last = f"{url}: {type(e).__name__}: {e}"
            spent = consumable and not isinstance(e, NOT_SENT)
        else:
            if resp.status < 500:
                state.pool.mark_ok(url)
                return Attempt(choice, resp, started, order)
            text = (await resp.text())[:200]
            resp.release()
            last = f"{url}: HTTP {resp.status}: {text}"
            spent = consumable  # e.g. vLLM's 500 for a failed KV load: a READ may have happened
        state.scheduler.on_finished(policy, req.request_id, url, state.clock.monotonic())
        state.pool.mark_failed(url)
        tried.add(url)
        if spent:
            raise UpstreamFailed(stage, f"{url} may have read the prefilled KV, not resent: {last}", spent=True,
                                 tried=order)
        choice = None
    raise UpstreamFailed(stage, f"tried {order or 'no workers'}; last error: {last}", no_workers=not order,
                         tried=order)
