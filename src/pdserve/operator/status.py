"""Pure status computation: children's observed state in, the resource's status and its transitions out.

No I/O and an injected clock, so the handlers stay thin and every condition rule
is unit-tested. The operator owns every status key but ``planner``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from pdserve.api import Condition, DisaggregatedService
from pdserve.kube.constants import ROLE_LABEL
from pdserve.operator.names import ROLES, Role

GPU_SHORTAGE = "Insufficient nvidia.com/gpu"
BAD_WAITING_REASONS = ("CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError", "InvalidImageName")


@dataclass(frozen=True)
class ChildState:
    """What the operator needs from one child Deployment."""

    replicas: int = 0
    ready: int = 0
    updated: int = 0
    generation: int = 0
    observed_generation: int = 0
    conditions: Mapping[str, tuple[str, str, str]] = field(default_factory=dict)  # type -> (status, reason, message)

    @classmethod
    def from_deployment(cls, dep: Mapping[str, Any]) -> ChildState:
        spec, status, meta = dep.get("spec") or {}, dep.get("status") or {}, dep.get("metadata") or {}
        conds = {c["type"]: (c.get("status", ""), c.get("reason", ""), c.get("message", "")) for c in status.get("conditions") or []}
        return cls(
            replicas=int(spec.get("replicas", 1)),
            ready=int(status.get("readyReplicas") or 0),
            updated=int(status.get("updatedReplicas") or 0),
            generation=int(meta.get("generation") or 0),
            observed_generation=int(status.get("observedGeneration") or 0),
            conditions=conds,
        )


@dataclass(frozen=True)
class PodProblem:
    role: str
    kind: str  # "unschedulable", "node-lost" or a container waiting reason
    message: str


def pod_problems(pods: Sequence[Mapping[str, Any]]) -> list[PodProblem]:
    out: list[PodProblem] = []
    for pod in pods:
        role = ((pod.get("metadata") or {}).get("labels") or {}).get(ROLE_LABEL, "?")
        status = pod.get("status") or {}
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        for c in status.get("conditions") or []:
            if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable":
                out.append(PodProblem(role, "unschedulable", c.get("message", "")))
        for cs in status.get("containerStatuses") or []:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in BAD_WAITING_REASONS:
                out.append(PodProblem(role, waiting["reason"], waiting.get("message", "")))
    return out


def node_loss(node: Mapping[str, Any] | None) -> str | None:
    """Why a node's pods no longer serve: "deleted" (no Node object), "not ready (<reason>)", or
    None. Kubernetes keeps such pods Ready in their Deployment's counts until it deletes them:
    the pod GC after a Node is deleted (40 s quarantine, then its next pass), the taint
    eviction after an unreachable node's tolerationSeconds (300 s by default)."""
    if node is None:
        return "deleted"
    ready = next((c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), None)
    if ready is None or ready.get("status") == "True":
        return None
    return f"not ready ({ready.get('reason') or ready.get('status')})"


def lost_pods(pods: Sequence[Mapping[str, Any]], lost_nodes: Mapping[str, str]) -> list[PodProblem]:
    """Pods (not already terminating) bound to a lost node, one problem each."""
    out: list[PodProblem] = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        if node in lost_nodes and not meta.get("deletionTimestamp"):
            out.append(PodProblem((meta.get("labels") or {}).get(ROLE_LABEL, "?"), "node-lost", f"{node} {lost_nodes[node]}"))
    return out


@dataclass(frozen=True)
class Transition:
    type: str
    status: str
    reason: str
    message: str
    warning: bool


@dataclass(frozen=True)
class StatusResult:
    status: dict[str, Any]
    transitions: list[Transition]


def _desired(svc: DisaggregatedService, role: Role) -> int:
    return {"prefill": svc.spec.prefill.replicas, "decode": svc.spec.decode.replicas, "router": svc.spec.router.replicas}[role]


def _settled(child: ChildState | None, want: int) -> bool:
    return (
        child is not None
        and child.replicas == want
        and child.observed_generation >= child.generation
        and child.updated >= want
        and child.ready >= want
    )


def _count(problems: Sequence[PodProblem]) -> str:
    by_role: dict[str, int] = {}
    for p in problems:
        by_role[p.role] = by_role.get(p.role, 0) + 1
    return ", ".join(f"{n} {role}" for role, n in sorted(by_role.items()))


def _conditions(
    svc: DisaggregatedService, children: Mapping[Role, ChildState | None], problems: list[PodProblem], apply_error: str | None,
    lost: Sequence[PodProblem] = (),
) -> dict[str, tuple[str, str, str]]:
    want = {r: _desired(svc, r) for r in ROLES}
    unsettled = [r for r in ROLES if not _settled(children.get(r), want[r])]
    counts = ", ".join(f"{r} {(children.get(r) or ChildState()).ready}/{want[r]}" for r in ROLES)
    out: dict[str, tuple[str, str, str]] = {}
    on_lost_nodes = f"{_count(lost)} pod(s) on lost nodes: {', '.join(sorted({p.message for p in lost}))}"

    if unsettled:
        why = f"; {on_lost_nodes}" if lost else ""
        out["Ready"] = ("False", "ReplicasNotReady", f"waiting for {', '.join(unsettled)} ({counts}){why}")
    elif min(want.values()) == 0:
        out["Ready"] = ("False", "ScaledToZero", f"a pool has no replicas ({counts})")
    else:
        out["Ready"] = ("True", "AllReplicasReady", counts)

    deadline = [r for r in ROLES if (children.get(r) or ChildState()).conditions.get("Progressing", ("", "", ""))[1] == "ProgressDeadlineExceeded"]
    stale = [r for r in ROLES if children.get(r) is None or (children[r].updated < want[r] or children[r].observed_generation < children[r].generation)]  # type: ignore[union-attr]
    if deadline:
        out["Progressing"] = ("False", "ProgressDeadlineExceeded", f"{', '.join(deadline)} did not finish rolling out")
    elif stale:
        out["Progressing"] = ("True", "RollingOut", f"updating {', '.join(stale)} ({counts})")
    elif unsettled:
        out["Progressing"] = ("True", "WaitingForReady", f"waiting for {', '.join(unsettled)} to become ready ({counts})")
    else:
        out["Progressing"] = ("False", "Complete", "all pools are up to date")

    failure = [r for r in ROLES if (children.get(r) or ChildState()).conditions.get("ReplicaFailure", ("",))[0] == "True"]
    crashing = [p for p in problems if p.kind != "unschedulable"]
    if apply_error:
        out["Degraded"] = ("True", "ApplyFailed", apply_error)
    elif failure:
        out["Degraded"] = ("True", "ReplicaFailure", "; ".join(children[r].conditions["ReplicaFailure"][2] for r in failure))  # type: ignore[union-attr]
    elif deadline:
        out["Degraded"] = ("True", "ProgressDeadlineExceeded", f"{', '.join(deadline)} did not become available in time")
    elif crashing:
        out["Degraded"] = ("True", crashing[0].kind, f"{_count(crashing)} pod(s): {crashing[0].message or crashing[0].kind}")
    elif lost:
        out["Degraded"] = ("True", "NodeLost", f"{on_lost_nodes}; Kubernetes replaces them once it deletes them "
                           "(pod GC for a deleted node, taint eviction for an unreachable one)")
    else:
        out["Degraded"] = ("False", "AsExpected", "")

    unschedulable = [p for p in problems if p.kind == "unschedulable"]
    gpu = [p for p in unschedulable if GPU_SHORTAGE in p.message]
    if gpu:
        out["ScalingLimited"] = ("True", "InsufficientGPU", f"{_count(gpu)} pod(s) pending: {gpu[0].message}")
    elif unschedulable:
        out["ScalingLimited"] = ("True", "Unschedulable", f"{_count(unschedulable)} pod(s) pending: {unschedulable[0].message}")
    else:
        out["ScalingLimited"] = ("False", "AllScheduled", "")
    return out


_WARN_WHEN_TRUE = {"Degraded", "ScalingLimited"}


def compute_status(
    svc: DisaggregatedService,
    children: Mapping[Role, ChildState | None],
    pods: Sequence[Mapping[str, Any]],
    endpoint: str,
    now: datetime,
    apply_error: str | None = None,
    lost_nodes: Mapping[str, str] | None = None,
) -> StatusResult:
    """The operator's status keys, keeping lastTransitionTime unless a condition's status changed.

    ``lost_nodes``: node name -> ``node_loss`` reason for the nodes the pods are bound to. Their
    pods still count as ready in their Deployments; here they do not."""
    previous: dict[str, Condition] = {c.type: c for c in svc.status.conditions}
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    conditions: list[dict[str, Any]] = []
    transitions: list[Transition] = []
    lost = lost_pods(pods, lost_nodes or {})
    children = {role: child if child is None else replace(child, ready=max(0, child.ready - sum(p.role == role for p in lost)))
                for role, child in children.items()}
    for ctype, (status, reason, message) in _conditions(svc, children, pod_problems(pods), apply_error, lost).items():
        old = previous.get(ctype)
        changed = old is None or old.status != status
        conditions.append(
            {
                "type": ctype,
                "status": status,
                "reason": reason,
                "message": message,
                "lastTransitionTime": stamp if changed else old.last_transition_time,  # type: ignore[union-attr]
                "observedGeneration": svc.metadata.generation,
            }
        )
        # A condition appearing as False is not news; anything else that changes is.
        if changed and not (old is None and status == "False"):
            warning = (ctype in _WARN_WHEN_TRUE and status == "True") or (ctype == "Ready" and status == "False")
            transitions.append(Transition(ctype, status, reason, message, warning))
    status_out: dict[str, Any] = {"observedGeneration": svc.metadata.generation}
    for role in ROLES:
        want, ready = _desired(svc, role), (children.get(role) or ChildState()).ready
        status_out[role] = {"desired": want, "ready": ready, "summary": f"{ready}/{want}"}
    status_out["conditions"] = conditions
    status_out["endpoint"] = endpoint
    return StatusResult(status_out, transitions)


def status_changed(current: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """Whether patching ``new`` would change anything the operator owns."""
    current = current or {}
    return any(current.get(k) != v for k, v in new.items())

