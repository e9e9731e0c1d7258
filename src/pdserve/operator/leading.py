"""Run kopf only while this replica holds the operator's Lease.

Two replicas give a fast takeover, never two writers: the follower waits (answering
health checks, so the kubelet keeps it), and starts kopf once it holds the Lease.
The leader renews it; if it cannot for the renew deadline it stops kopf and exits
non-zero (a fresh start re-enters the election), before any follower may take
over. A clean stop (SIGTERM) hands the Lease back so the follower starts at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from pdserve.kube.lease import LeaderElector

log = logging.getLogger("pdserve.operator.leading")
# How long a stopping kopf may take after the Lease is lost (its daemons get 10 s to cancel).
STOP_GRACE_S = 15.0


class StandbyHealth:
    """Answers the liveness URL while kopf (which serves it when leading) is not running."""

    def __init__(self, url: str | None) -> None:
        self.url = url
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        if not self.url:
            return
        parts = urlsplit(self.url)

        async def ok(_: web.Request) -> web.Response:
            return web.json_response({"role": "standby"})

        app = web.Application()
        app.router.add_get(parts.path or "/", ok)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, parts.hostname, parts.port or 80, reuse_address=True).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


RunKopf = Callable[[asyncio.Event], Coroutine[Any, Any, None]]


async def lead_then_run(elector: LeaderElector | None, run_kopf: RunKopf, liveness: str | None) -> int:
    """0 after a clean stop; 1 when the Lease was lost (the process should exit and restart)."""
    if elector is not None:
        standby = StandbyHealth(liveness)
        await standby.start()
        try:
            log.info("waiting for the Lease %s/%s as %s", elector.config.namespace, elector.config.name, elector.config.identity)
            await elector.acquire()
        finally:
            await standby.stop()
    stop = asyncio.Event()
    kopf_task = asyncio.create_task(run_kopf(stop), name="kopf")
    if elector is None:
        await kopf_task
        return 0
    keep_task = asyncio.create_task(elector.keep(), name="lease")
    done, _ = await asyncio.wait({kopf_task, keep_task}, return_when=asyncio.FIRST_COMPLETED)
    if keep_task in done:
        stop.set()  # a follower may take over once the Lease expires: stop writing now
        try:
            await asyncio.wait_for(kopf_task, STOP_GRACE_S)
        except TimeoutError:
            log.error("kopf did not stop within %ss after losing the Lease", STOP_GRACE_S)
        return 1
    keep_task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await keep_task
    try:
        await elector.release()
    except Exception as e:  # the follower then waits out the lease duration instead
        log.warning("could not hand back the Lease: %s", e)
    kopf_task.result()  # re-raise what stopped kopf, if anything
    return 0
