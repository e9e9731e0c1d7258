"""Actuator: the DisaggregatedService resource itself.

- reads the spec (current replicas) and the pools' pods (ready / Pending);
- writes both replica counts in ONE merge patch of the spec, so the operator never
  sees a half-applied decision;
- writes ``status.planner`` through the status subresource every interval;
- records a Kubernetes Event when the sizes change, and when a hold starts;
- with ``dry_run`` it only writes status.planner (what it would have done).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from pdserve.planner.decision import ScalingDecision
from pdserve.planner.observation import PoolState

GROUP, VERSION, PLURAL, KIND = "pdserve.io", "v1alpha1", "disaggregatedservices", "DisaggregatedService"
COMPONENT = "pdserve-planner"
MERGE = "application/merge-patch+json"


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def replicas_patch(decision: ScalingDecision) -> dict[str, Any]:
    return {"spec": {"prefill": {"replicas": decision.prefill}, "decode": {"replicas": decision.decode}}}


def status_patch(decision: ScalingDecision, when: dt.datetime) -> dict[str, Any]:
    body = decision.to_status()
    body["time"] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"status": {"planner": body}}


class KubernetesActuator:
    def __init__(self, namespace: str, name: str, api_client: Any = None, *, dry_run: bool = False) -> None:
        from kubernetes import client

        self.namespace, self.name = namespace, name
        self.dry_run = dry_run  # record decisions in status.planner, never touch the spec
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self._client_mod = client
        self.last_body: dict[str, Any] | None = None
        self._last_hold: str | None = None

    # ---- read ---------------------------------------------------------------------
    def read(self) -> dict[str, Any]:
        self.last_body = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.name)
        return self.last_body

    def pools(self) -> tuple[PoolState, PoolState]:
        body = self.read()
        spec = body.get("spec", {})
        return (self._pool("prefill", int(spec.get("prefill", {}).get("replicas", 1))),
                self._pool("decode", int(spec.get("decode", {}).get("replicas", 1))))

    def _pool(self, role: str, replicas: int) -> PoolState:
        selector = f"pdserve.io/service={self.name},pdserve.io/role={role}"
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=selector).items
        ready = pending = 0
        want = {"pdserve.io/service": self.name, "pdserve.io/role": role}
        for pod in pods:
            labels = pod.metadata.labels or {}
            # Re-check the selector: cheap, and some API fakes ignore label selectors.
            if any(labels.get(k) != v for k, v in want.items()) or pod.metadata.deletion_timestamp is not None:
                continue
            phase = pod.status.phase if pod.status else None
            if phase == "Pending":
                pending += 1
            elif phase == "Running" and any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or [])):
                ready += 1
        return PoolState(replicas=replicas, ready=ready, pending=pending)

    # ---- write --------------------------------------------------------------------
    def apply(self, decision: ScalingDecision) -> None:
        when = _now()
        if decision.changed and not self.dry_run:
            self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.name,
                                                       replicas_patch(decision), _content_type=MERGE)
            self.event("Scaled", f"prefill {decision.previous[0]}->{decision.prefill}, decode "
                                 f"{decision.previous[1]}->{decision.decode}: {decision.reason}", "Normal", when)
        self.custom.patch_namespaced_custom_object_status(GROUP, VERSION, self.namespace, PLURAL, self.name,
                                                          status_patch(decision, when), _content_type=MERGE)
        hold = decision.hold_key if decision.held else None
        if hold and hold != self._last_hold:
            self.event("PlannerHeld", decision.reason, "Warning", when)
        self._last_hold = hold

    def event(self, reason: str, message: str, type_: str, when: dt.datetime) -> None:
        c = self._client_mod
        uid = (self.last_body or {}).get("metadata", {}).get("uid")
        ev = c.CoreV1Event(
            metadata=c.V1ObjectMeta(generate_name=f"{self.name}-planner-", namespace=self.namespace),
            involved_object=c.V1ObjectReference(api_version=f"{GROUP}/{VERSION}", kind=KIND, name=self.name,
                                                namespace=self.namespace, uid=uid),
            reason=reason, message=message[:1024], type=type_,
            source=c.V1EventSource(component=COMPONENT), reporting_component=COMPONENT,
            first_timestamp=when, last_timestamp=when, count=1,
        )
        self.core.create_namespaced_event(self.namespace, ev)
