"""kopf handlers: small and typed; every decision lives in render / status / drift."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import kopf

from pdserve.kube.constants import GROUP, PLURAL, SERVICE_LABEL, VERSION
from pdserve.kube.errors import KubeError
from pdserve.operator.reconcile import Reconciler, SyncOutcome
from pdserve.planner.hosting.options import HostOptions

RETRY_DELAY_S = 10.0
PLANNER_LOG = logging.getLogger("pdserve.planner.hosted")


@dataclass(frozen=True)
class HandlerConfig:
    resync_seconds: float = 60.0
    # The planner of every autoscaled resource, as a kopf daemon; None: replicas stay as written.
    planner: HostOptions | None = field(default_factory=HostOptions)


def _raise_for(outcome: SyncOutcome | None) -> None:
    if outcome is not None and outcome.error:
        # kopf retries create/update/resume handlers; the timer retries the rest.
        raise kopf.TemporaryError(outcome.error, delay=RETRY_DELAY_S)


def _autoscaled(spec: kopf.Spec, **_: Any) -> bool:
    return bool((spec.get("autoscaling") or {}).get("enabled"))


def build_registry(
    reconciler: Reconciler, config: HandlerConfig, api_client: Any = None, connection: kopf.ConnectionInfo | None = None
) -> kopf.OperatorRegistry:
    """``connection`` overrides the login (kubeconfig or in-cluster) with fixed credentials."""
    registry = kopf.OperatorRegistry()

    @kopf.on.login(id="login", registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return connection or kopf.login_via_client(**kwargs)

    @kopf.on.resume(GROUP, VERSION, PLURAL, id="reconcile", registry=registry)
    @kopf.on.create(GROUP, VERSION, PLURAL, id="reconcile", registry=registry)
    @kopf.on.update(GROUP, VERSION, PLURAL, field="spec", id="reconcile", registry=registry)
    async def reconcile(name: str, namespace: str | None, logger: kopf.Logger, **_: Any) -> None:
        try:
            outcome = await reconciler.sync(str(namespace), name, cause="spec", logger=logger)
        except KubeError as e:
            raise kopf.TemporaryError(str(e), delay=RETRY_DELAY_S) from e
        _raise_for(outcome)

    @kopf.timer(GROUP, VERSION, PLURAL, id="resync", interval=config.resync_seconds, initial_delay=config.resync_seconds, registry=registry)
    async def resync(name: str, namespace: str | None, logger: kopf.Logger, **_: Any) -> None:
        try:
            outcome = await reconciler.sync(str(namespace), name, cause="resync", logger=logger)
        except KubeError as e:
            logger.warning("resync failed, next try in %ss: %s", config.resync_seconds, e)
            return
        if outcome is not None and outcome.error:
            logger.warning("resync failed, next try in %ss: %s", config.resync_seconds, outcome.error)

    @kopf.on.event("apps", "v1", "deployments", id="child", labels={SERVICE_LABEL: kopf.PRESENT}, registry=registry)
    async def child_changed(meta: kopf.Meta, namespace: str | None, logger: kopf.Logger, **_: Any) -> None:
        owner = meta.get("labels", {}).get(SERVICE_LABEL)
        if not owner:
            return
        try:
            await reconciler.sync(str(namespace), owner, cause="child", logger=logger)
        except KubeError as e:
            # The resync timer repairs whatever this event could not.
            logger.warning("sync of %s/%s after a child event failed: %s", namespace, owner, e)

    async def sync_all(keys: list[tuple[str, str]], logger: kopf.Logger) -> None:
        for namespace, owner in keys:
            try:
                await reconciler.sync(namespace, owner, cause="child", logger=logger)
            except KubeError as e:
                logger.warning("sync of %s/%s after a node or pod event failed: %s", namespace, owner, e)

    # A deleted or unreachable node changes nothing in the Deployments that still count its
    # pods as ready: the resources with pods there are synced to say so at once.
    @kopf.on.event("", "v1", "nodes", id="node", registry=registry)
    async def node_changed(name: str, logger: kopf.Logger, **_: Any) -> None:
        await sync_all(reconciler.services_on(name), logger)

    # ... and when Kubernetes finally deletes such a pod, its Deployment's status may not change either.
    @kopf.on.event("", "v1", "pods", id="pod-deleted", labels={SERVICE_LABEL: kopf.PRESENT}, registry=registry)
    async def pod_deleted(type: str | None, meta: kopf.Meta, namespace: str | None, logger: kopf.Logger, **_: Any) -> None:
        owner = meta.get("labels", {}).get(SERVICE_LABEL)
        if type == "DELETED" and owner:
            await sync_all([(str(namespace), owner)], logger)

    if config.planner is not None:
        options = config.planner

        # kopf starts one per resource with autoscaling enabled and stops it when that is
        # switched off, the resource goes, or this replica stops (losing the Lease stops kopf).
        @kopf.daemon(GROUP, VERSION, PLURAL, id="planner", when=_autoscaled, cancellation_timeout=10.0, registry=registry)
        async def planner(name: str, namespace: str | None, stopped: kopf.DaemonStopped, **_: Any) -> None:
            from pdserve.planner.hosting.daemon import run_hosted

            # A plain logger: kopf's would post every held decision as an Event, and the
            # planner already records its decisions (status.planner and its own Events).
            await run_hosted(str(namespace), name, stopped=stopped, logger=PLANNER_LOG, api_client=api_client, options=options)

    return registry


def settings(log_level: int = logging.INFO, namespaced: bool = False) -> kopf.OperatorSettings:
    """Small and quiet: state in our own annotations, few posted events, long-lived watches.

    ``namespaced``: watching a fixed list of namespaces. kopf would otherwise list
    namespaces cluster-wide first (a right a namespace-scoped install does not grant)
    and only fall back to the given list after a minute of retries."""
    s = kopf.OperatorSettings()
    s.scanning.disabled = namespaced
    s.persistence.finalizer = f"{GROUP}/operator"
    s.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    s.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP, key="last-handled-configuration")
    # Our own Events mark condition transitions; kopf posts only its warnings and errors.
    s.posting.level = max(logging.WARNING, log_level)
    s.watching.server_timeout = 300
    s.watching.client_timeout = 330
    s.watching.connect_timeout = 30
    s.watching.reconnect_backoff = 1.0
    s.execution.max_workers = 4
    s.networking.request_timeout = 60
    return s

