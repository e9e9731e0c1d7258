"""Actuator: the DisaggregatedService resource itself.

- reads the spec (current replicas) and the pools' pods (ready / Pending);
- writes both replica counts in ONE merge patch of the spec, so the operator never
  sees a half-applied decision;
- writes ``status.planner`` through the status subresource every interval;
- records a Kubernetes Event (through kopf) when the sizes change, and when a hold starts;
- with ``dry_run`` it only writes status.planner (what it would have done).
"""

from __future__ import annotations

from typing import Any, cast

from pdserve.common.clock import WALL, Clock, rfc3339
from pdserve.kube import events
from pdserve.kube.constants import (
    GROUP,
    MERGE_PATCH,
    PLURAL,
    ROLE_LABEL,
    SERVICE_LABEL,
    VERSION,
    pool_selector,
)
from pdserve.kube.pods import has_labels, is_pending, is_ready, is_terminating
from pdserve.planner.core.decision import ScalingDecision
from pdserve.planner.core.observation import PoolState


def replicas_patch(decision: ScalingDecision) -> dict[str, Any]:
    return {"spec": {"prefill": {"replicas": decision.prefill}, "decode": {"replicas": decision.decode}}}


def status_patch(decision: ScalingDecision, now: float) -> dict[str, Any]:
    body = decision.to_status()
    body["time"] = rfc3339(now)
    return {"status": {"planner": body}}


class KubernetesActuator:
    def __init__(self, namespace: str, name: str, api_client: Any = None, *, dry_run: bool = False,
                 clock: Clock = WALL, post_event: events.Poster = events.post) -> None:
        from kubernetes import client

        self.namespace, self.name = namespace, name
        self.dry_run = dry_run  # record decisions in status.planner, never touch the spec
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.clock = clock
        self.post_event = post_event
        self.last_body: dict[str, Any] | None = None
        self._last_hold: str | None = None

    # ---- read ---------------------------------------------------------------------
    def read(self) -> dict[str, Any]:
        body = cast(dict[str, Any], self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.name))
        self.last_body = body
        return body

    def pools(self) -> tuple[PoolState, PoolState]:
        body = self.read()
        spec = body.get("spec", {})
        return (self._pool("prefill", int(spec.get("prefill", {}).get("replicas", 1))),
                self._pool("decode", int(spec.get("decode", {}).get("replicas", 1))))

    def _pool(self, role: str, replicas: int) -> PoolState:
        listing = self.core.list_namespaced_pod(self.namespace, label_selector=pool_selector(self.name, role))
        pods = [self.core.api_client.sanitize_for_serialization(p) for p in listing.items]
        # Re-check the selector: cheap, and some API fakes ignore label selectors.
        want = {SERVICE_LABEL: self.name, ROLE_LABEL: role}
        mine = [p for p in pods if has_labels(p, want) and not is_terminating(p)]
        return PoolState(replicas=replicas, ready=sum(map(is_ready, mine)), pending=sum(map(is_pending, mine)))

    # ---- write --------------------------------------------------------------------
    def apply(self, decision: ScalingDecision) -> None:
        now = self.clock.now()
        if decision.changed and not self.dry_run:
            self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.name,
                                                       replicas_patch(decision), _content_type=MERGE_PATCH)
            self.event("Scaled", f"prefill {decision.previous[0]}->{decision.prefill}, decode "
                                  f"{decision.previous[1]}->{decision.decode}: {decision.reason}", warning=False)
        self.custom.patch_namespaced_custom_object_status(GROUP, VERSION, self.namespace, PLURAL, self.name,
                                                          status_patch(decision, now), _content_type=MERGE_PATCH)
        hold = decision.hold_key if decision.held else None
        if hold and hold != self._last_hold:
            self.event("PlannerHeld", decision.reason, warning=True)
        self._last_hold = hold

    def event(self, reason: str, message: str, *, warning: bool) -> None:
        """An Event on the resource last read (none before the first read)."""
        if self.last_body is not None:
            self.post_event(self.last_body, reason, message, warning=warning)
