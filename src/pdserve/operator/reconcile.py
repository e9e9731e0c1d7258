"""One level-based sync of a DisaggregatedService: read it, repair drifted children, write status.

Every trigger (create, update, resume, timer, a child Deployment's event) calls
``Reconciler.sync``; a burst of triggers for one resource coalesces into at most
one running and one queued sync, which keeps CPU flat during rollouts."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError

from pdserve.api import DisaggregatedService
from pdserve.common.clock import WALL, Clock, utc
from pdserve.kube import events
from pdserve.kube.api import Kube
from pdserve.kube.constants import ROLE_LABEL, SERVICE_LABEL
from pdserve.kube.errors import KubeError
from pdserve.operator.drift import drift
from pdserve.operator.names import ROLES, RenderOptions, child_name, endpoint_url
from pdserve.operator.render import render
from pdserve.operator.status import (
    ChildState,
    compute_status,
    node_loss,
    status_changed,
)

Key = tuple[str, str]
# Why a sync runs; a queued sync keeps the strongest cause folded into it.
Cause = Literal["child", "resync", "spec"]
_RANK = {"child": 0, "resync": 1, "spec": 2}


@dataclass
class SyncOutcome:
    applied: list[str] = field(default_factory=list)
    repaired: dict[str, list[str]] = field(default_factory=dict)
    error: str | None = None
    transient: bool = False
    transitions: list[str] = field(default_factory=list)


class Reconciler:
    def __init__(self, kube: Kube, options: RenderOptions | None = None, clock: Clock = WALL, post_event: events.Poster = events.post):
        self.kube = kube
        self.options = options or RenderOptions()
        self.clock = clock
        self.post_event = post_event
        self._locks: dict[Key, asyncio.Lock] = {}
        self._queued: dict[Key, Cause] = {}
        self._nodes: dict[Key, set[str]] = {}  # the nodes each resource's worker pods were bound to at its last sync

    def services_on(self, node: str) -> list[Key]:
        """The resources with worker pods on ``node`` (as of their last sync): a change of the
        node (deleted, NotReady) changes what their status must say."""
        return sorted(key for key, nodes in self._nodes.items() if node in nodes)

    async def _lost_nodes(self, pods: list[dict[str, Any]], logger: logging.Logger | logging.LoggerAdapter[Any]) -> dict[str, str]:
        names = sorted({n for p in pods if (n := (p.get("spec") or {}).get("nodeName"))})

        async def loss(node: str) -> str | None:
            try:
                return node_loss(await self.kube.get(f"/api/v1/nodes/{node}"))
            except KubeError as e:  # e.g. an install whose RBAC predates the nodes rule: report nothing
                logger.debug("cannot read node %s: %s", node, e)
                return None

        found = await asyncio.gather(*(loss(n) for n in names))
        return {n: why for n, why in zip(names, found) if why is not None}

    async def sync(self, namespace: str, name: str, *, cause: Cause, logger: logging.Logger | logging.LoggerAdapter[Any]) -> SyncOutcome | None:
        """Sync now, or fold into the sync already queued for this resource (then returns None).

        Deployments are compared with the render on every cause and re-applied when they
        differ; the other children are re-applied only for spec changes and resyncs."""
        key = (namespace, name)
        lock = self._locks.setdefault(key, asyncio.Lock())
        if key in self._queued:
            self._queued[key] = max(self._queued[key], cause, key=_RANK.__getitem__)
            return None
        self._queued[key] = cause
        async with lock:
            cause = self._queued.pop(key)
            outcome = await self._sync_once(namespace, name, cause, logger)
            if outcome is None:
                self._locks.pop(key, None)
            return outcome

    async def _sync_once(self, namespace: str, name: str, cause: Cause, logger: logging.Logger | logging.LoggerAdapter[Any]) -> SyncOutcome | None:
        key = (namespace, name)
        body = await self.kube.get_service(namespace, name)
        if body is None or body.get("metadata", {}).get("deletionTimestamp"):
            self._nodes.pop(key, None)
            return None  # gone or going: garbage collection removes the children
        outcome = SyncOutcome()
        try:
            svc = DisaggregatedService.from_body(body)
        except ValidationError as e:
            # The API server's schema should have refused this; report instead of guessing.
            logger.error("spec is invalid: %s", e)
            return outcome
        live = {d["metadata"]["name"]: d for d in await self.kube.list("apps/v1", "Deployment", namespace, f"{SERVICE_LABEL}={name}")}
        manifests = render(svc, self.options)
        # Existing Deployments first: a spec change reaches the pods without waiting on
        # the (rarely changing) RBAC and Service applies. New objects keep render order.
        manifests.sort(key=lambda m: 0 if m["kind"] == "Deployment" and m["metadata"]["name"] in live else 1)
        for manifest in manifests:
            kind, child = manifest["kind"], manifest["metadata"]["name"]
            if kind == "Deployment":
                paths = drift(manifest, live.get(child))
                if not paths:
                    continue
                if child in live:
                    outcome.repaired[child] = paths
            elif cause == "child":
                continue
            try:
                applied = await self.kube.apply(manifest)
            except KubeError as e:
                outcome.error, outcome.transient = f"{kind}/{child}: {e.message}", e.transient
                logger.warning("apply %s/%s failed: %s", kind, child, e)
                break
            outcome.applied.append(f"{kind}/{child}")
            if kind == "Deployment":
                live[child] = applied
        for child, paths in outcome.repaired.items():
            if cause == "spec":
                logger.info("rolled out the spec change to Deployment/%s: %s", child, ", ".join(paths[:5]))
            else:
                # A warning on purpose: kopf posts it as an Event on the resource.
                logger.warning("repaired drift in Deployment/%s: %s", child, ", ".join(paths[:5]))
        children = {role: ChildState.from_deployment(live[child_name(svc, role)]) if child_name(svc, role) in live else None for role in ROLES}
        # Always listed: a pod on a deleted or unreachable node looks Ready in its Deployment.
        pods = await self.kube.list("v1", "Pod", namespace, f"{SERVICE_LABEL}={name},{ROLE_LABEL} in (prefill,decode)")
        lost = await self._lost_nodes(pods, logger)
        self._nodes[key] = {n for p in pods if (n := (p.get("spec") or {}).get("nodeName"))}
        result = compute_status(svc, children, pods, endpoint_url(svc, self.options), utc(self.clock), outcome.error, lost)
        if status_changed(body.get("status"), result.status):
            await self.kube.patch_status(namespace, name, result.status)
        for t in result.transitions:
            outcome.transitions.append(f"{t.type}={t.status}")
            # kopf posts it in the background (with retries): a slow API server never blocks a sync.
            self.post_event(body, t.reason, f"{t.type} is {t.status}: {t.message}".rstrip(": "), warning=t.warning)
        return outcome
