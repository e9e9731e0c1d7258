"""Leader election on a ``coordination.k8s.io/v1`` Lease, the way client-go's leaderelection does it.

Two operator replicas must never both reconcile or both plan: each would patch the
same replicas. Only the replica holding the Lease runs kopf; the others wait. The
rules (``decide``) are pure and take the time in:

- a Lease held by nobody (released on a clean stop) is free at once;
- another holder's Lease is expired when its record has not changed for
  ``leaseDurationSeconds`` *as this replica observed it* (its own monotonic clock, never
  the holder's timestamps, so clock skew between nodes cannot shorten a lease);
- the holder renews every ``retry_s``; if it cannot renew for ``renew_deadline_s``
  (< the duration) it must stop leading before anyone else may take over.

Writes carry the ``resourceVersion`` they read, so when two followers race for an
expired Lease the API server lets exactly one win (409 for the other).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pdserve.common.clock import WALL, Clock, to_utc
from pdserve.kube.api import Kube, object_path
from pdserve.kube.errors import KubeError

LEASE_API = "coordination.k8s.io/v1"
Action = Literal["create", "renew", "take", "wait"]
log = logging.getLogger("pdserve.kube.lease")


def default_identity() -> str:
    """The pod's name where the chart sets POD_NAME (stable across container restarts), else host/pid."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class LeaseConfig:
    name: str
    namespace: str
    identity: str
    duration_s: float = 15.0  # a follower takes over this long after the holder's last renewal
    renew_deadline_s: float = 10.0  # the holder stops leading after failing to renew this long
    retry_s: float = 2.0  # between tries to acquire or renew

    def invalid(self) -> str | None:
        if not self.retry_s > 0:
            return "the lease retry period must be > 0"
        if not self.duration_s > self.renew_deadline_s > self.retry_s:
            return (f"lease timings must satisfy duration ({self.duration_s}) > renew deadline "
                    f"({self.renew_deadline_s}) > retry period ({self.retry_s})")
        return None


@dataclass(frozen=True)
class Record:
    """The Lease's spec, as far as election reads it."""

    holder: str = ""
    duration_s: float = 0.0
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Record:
        spec = body.get("spec") or {}
        return cls(
            holder=spec.get("holderIdentity") or "",
            duration_s=float(spec.get("leaseDurationSeconds") or 0),
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            transitions=int(spec.get("leaseTransitions") or 0),
        )


def decide(record: Record | None, observed_at: float, now: float, me: str) -> Action:
    """What this replica may do with the Lease, ``record`` unchanged since ``observed_at`` (monotonic)."""
    if record is None:
        return "create"
    if record.holder == me:
        return "renew"
    if not record.holder or now >= observed_at + record.duration_s:
        return "take"
    return "wait"


def micro_time(t: float) -> str:
    """A Lease's MicroTime: RFC 3339 with microseconds."""
    return to_utc(t).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def next_spec(record: Record | None, action: Action, me: str, wall_now: float, duration_s: float) -> dict[str, Any]:
    """The Lease spec this replica writes for ``action`` (create, renew or take)."""
    stamp = micro_time(wall_now)
    taking = action in ("create", "take")
    return {
        "holderIdentity": me,
        "leaseDurationSeconds": max(1, round(duration_s)),
        "acquireTime": stamp if taking or record is None else record.acquire_time or stamp,
        "renewTime": stamp,
        "leaseTransitions": (record.transitions + 1 if record is not None and action == "take" else
                             record.transitions if record is not None else 0),
    }


class LeaderElector:
    """The I/O shell around ``decide``: one GET and at most one write per try."""

    def __init__(self, kube: Kube, config: LeaseConfig, clock: Clock = WALL) -> None:
        if (bad := config.invalid()) is not None:
            raise ValueError(bad)
        self.kube, self.config, self.clock = kube, config, clock
        self.path = object_path(LEASE_API, "Lease", config.namespace, config.name)
        self._record: Record | None = None
        self._observed_at = clock.monotonic()
        self.last_renewed: float | None = None  # monotonic; None while not leading

    def _observe(self, record: Record | None) -> None:
        if record != self._record:
            self._record, self._observed_at = record, self.clock.monotonic()

    async def try_once(self) -> bool:
        """Acquire or renew; True when this replica holds the Lease afterwards."""
        c = self.config
        body = await self.kube.get(self.path)
        record = Record.from_body(body) if body is not None else None
        self._observe(record)
        action = decide(record, self._observed_at, self.clock.monotonic(), c.identity)
        if action == "wait":
            return False
        spec = next_spec(record, action, c.identity, self.clock.now(), c.duration_s)
        meta: dict[str, Any] = {"name": c.name, "namespace": c.namespace}
        try:
            if body is None:
                written = await self.kube.call("POST", object_path(LEASE_API, "Lease", c.namespace), None,
                                               {"apiVersion": LEASE_API, "kind": "Lease", "metadata": meta, "spec": spec})
            else:
                meta["resourceVersion"] = body["metadata"]["resourceVersion"]
                written = await self.kube.call("PUT", self.path, None,
                                               {"apiVersion": LEASE_API, "kind": "Lease", "metadata": meta, "spec": spec})
        except KubeError as e:
            if e.status in (409, 422) or e.conflict:  # another replica wrote first: not ours
                return False
            raise
        self._observe(Record.from_body(written))
        if action != "renew":
            log.info("leading as %s (Lease %s/%s, %s)", c.identity, c.namespace, c.name, action)
        self.last_renewed = self.clock.monotonic()
        return True

    async def _try(self) -> bool:
        try:
            return await self.try_once()
        except KubeError as e:
            log.warning("lease %s/%s: %s", self.config.namespace, self.config.name, e)
            return False

    async def acquire(self) -> None:
        """Return once this replica leads (retrying forever, with jitter)."""
        while not await self._try():
            await asyncio.sleep(self.config.retry_s * random.uniform(1.0, 1.2))

    async def keep(self) -> None:
        """Renew until a renewal is overdue by the renew deadline; then return (leadership lost)."""
        c = self.config
        while True:
            await asyncio.sleep(c.retry_s)
            if await self._try():
                continue
            assert self.last_renewed is not None
            if self.clock.monotonic() - self.last_renewed >= c.renew_deadline_s or (
                    self._record is not None and self._record.holder not in ("", c.identity)):
                log.error("lost the Lease %s/%s (last renewed %.1fs ago, holder now %r)", c.namespace, c.name,
                          self.clock.monotonic() - self.last_renewed, self._record.holder if self._record else None)
                self.last_renewed = None
                return

    async def release(self) -> None:
        """Hand the Lease back on a clean stop, so a follower takes over at once."""
        c = self.config
        body = await self.kube.get(self.path)
        if body is None or Record.from_body(body).holder != c.identity:
            return
        spec = dict(body.get("spec") or {}, holderIdentity="", leaseDurationSeconds=1)
        meta = {"name": c.name, "namespace": c.namespace, "resourceVersion": body["metadata"]["resourceVersion"]}
        await self.kube.call("PUT", self.path, None, {"apiVersion": LEASE_API, "kind": "Lease", "metadata": meta, "spec": spec})
        self.last_renewed = None
        log.info("released the Lease %s/%s", c.namespace, c.name)
