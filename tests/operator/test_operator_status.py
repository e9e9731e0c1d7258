"""Pure status and drift rules: conditions, transitions, lastTransitionTime stability."""

from __future__ import annotations

import copy
from datetime import datetime, UTC
from typing import Any

from pdserve.api import DisaggregatedService
from pdserve.operator.drift import differences, drift
from pdserve.operator.render import render
from pdserve.operator.status import ChildState, compute_status

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
T1 = datetime(2026, 1, 1, 12, 5, 0, tzinfo=UTC)


def _svc(status: dict[str, Any] | None = None, prefill: int = 2, decode: int = 1) -> DisaggregatedService:
    return DisaggregatedService.from_body(
        {
            "metadata": {"name": "s", "namespace": "ns", "uid": "u", "generation": 4},
            "spec": {"model": {"name": "m"}, "prefill": {"replicas": prefill}, "decode": {"replicas": decode}},
            "status": status or {},
        }
    )


def _child(replicas: int, ready: int, updated: int | None = None, **conds: tuple[str, str, str]) -> ChildState:
    return ChildState(replicas=replicas, ready=ready, updated=replicas if updated is None else updated, generation=2, observed_generation=2, conditions=conds)


def _conds(result: Any) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in result.status["conditions"]}


def _pending_pod(role: str, message: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"pdserve.io/role": role}},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]},
    }


def test_all_ready() -> None:
    r = compute_status(_svc(), {"prefill": _child(2, 2), "decode": _child(1, 1), "router": _child(1, 1)}, [], "http://e", T0)
    assert _conds(r) == {"Ready": ("True", "AllReplicasReady"), "Progressing": ("False", "Complete"), "Degraded": ("False", "AsExpected"), "ScalingLimited": ("False", "AllScheduled")}
    assert r.status["prefill"] == {"desired": 2, "ready": 2, "summary": "2/2"}
    assert r.status["observedGeneration"] == 4 and r.status["endpoint"] == "http://e"
    assert [t.type for t in r.transitions] == ["Ready"]


def test_missing_children_rolling_out() -> None:
    r = compute_status(_svc(), {"prefill": None, "decode": None, "router": None}, [], "http://e", T0)
    assert _conds(r)["Ready"] == ("False", "ReplicasNotReady")
    assert _conds(r)["Progressing"] == ("True", "RollingOut")
    assert r.status["decode"]["summary"] == "0/1"


def test_gpu_shortage_is_scaling_limited_with_reason() -> None:
    msg = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are available"
    pods = [_pending_pod("decode", msg), _pending_pod("decode", msg)]
    r = compute_status(_svc(decode=3), {"prefill": _child(2, 2), "decode": _child(3, 1), "router": _child(1, 1)}, pods, "e", T0)
    cond = next(c for c in r.status["conditions"] if c["type"] == "ScalingLimited")
    assert (cond["status"], cond["reason"]) == ("True", "InsufficientGPU")
    assert "2 decode pod(s) pending" in cond["message"] and "Insufficient nvidia.com/gpu" in cond["message"]
    assert any(t.type == "ScalingLimited" and t.warning for t in r.transitions)


def test_degraded_reasons() -> None:
    kids = {"prefill": _child(2, 2), "decode": _child(1, 1), "router": _child(1, 1)}
    assert _conds(compute_status(_svc(), kids, [], "e", T0, apply_error="403 forbidden"))["Degraded"] == ("True", "ApplyFailed")
    crash = {"metadata": {"labels": {"pdserve.io/role": "prefill"}}, "status": {"containerStatuses": [{"state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}}}]}}
    assert _conds(compute_status(_svc(), kids, [crash], "e", T0))["Degraded"] == ("True", "CrashLoopBackOff")
    stuck = dict(kids, decode=_child(1, 0, Progressing=("False", "ProgressDeadlineExceeded", "")))
    c = _conds(compute_status(_svc(), stuck, [], "e", T0))
    assert c["Degraded"] == ("True", "ProgressDeadlineExceeded") and c["Progressing"] == ("False", "ProgressDeadlineExceeded")


def test_transition_time_kept_without_status_change_and_no_repeat_events() -> None:
    kids = {"prefill": _child(2, 1), "decode": _child(1, 1), "router": _child(1, 1)}
    first = compute_status(_svc(), kids, [], "e", T0)
    again = compute_status(_svc(first.status), {**kids, "prefill": _child(2, 1)}, [], "e", T1)
    assert again.transitions == []
    assert again.status["conditions"] == first.status["conditions"]
    ready = compute_status(_svc(first.status), {**kids, "prefill": _child(2, 2)}, [], "e", T1)
    when = {c["type"]: c["lastTransitionTime"] for c in ready.status["conditions"]}
    assert when["Ready"] == "2026-01-01T12:05:00Z" and when["Degraded"] == "2026-01-01T12:00:00Z"
    assert [(t.type, t.status) for t in ready.transitions] == [("Ready", "True"), ("Progressing", "False")]


def test_drift_subset_semantics() -> None:
    desired = next(m for m in render(_svc()) if m["metadata"]["name"] == "s-prefill")
    live = copy.deepcopy(desired)
    c = live["spec"]["template"]["spec"]["containers"][0]
    # API-server defaults and other managers' additions are not drift.
    c["startupProbe"]["successThreshold"] = 1
    c["env"][1]["valueFrom"]["fieldRef"]["apiVersion"] = "v1"
    c["env"].insert(0, {"name": "INJECTED", "value": "x"})
    live["metadata"]["resourceVersion"] = "7"
    live["status"] = {"readyReplicas": 1}
    assert drift(desired, live) == []
    live["spec"]["replicas"] = 5
    c["args"] = c["args"][:-1]
    assert drift(desired, live) == [".spec.replicas", ".spec.template.spec.containers[0]"]
    assert drift(desired, None) == ["<missing>"]


def test_absent_equals_empty() -> None:
    assert differences({"env": [], "nodeSelector": {}, "a": 1}, {"a": 1}) == []
    assert differences({"env": [{"name": "X"}]}, {}) == [".env"]


def test_differences_scalars() -> None:
    assert differences({"a": "1"}, {"a": 1}) == []
    assert differences({"a": True}, {"a": 1}) == [".a"]
    assert differences(["x", "y"], ["y", "x"]) == [""]


def _pod_on(role: str, node: str, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"s-{role}-x", "labels": {"pdserve.io/role": role}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node}, "status": {"phase": "Running"}}


def test_node_loss_from_the_node_object() -> None:
    from pdserve.operator.status import node_loss

    assert node_loss(None) == "deleted"
    assert node_loss({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}) is None
    unknown = {"status": {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}]}}
    assert node_loss(unknown) == "not ready (NodeStatusUnknown)"
    assert node_loss({"status": {}}) is None  # a node still registering is not lost


def test_pods_on_a_lost_node_do_not_count_as_ready_and_the_status_names_the_node() -> None:
    # The decode Deployment still says 2/2 ready: one of its pods is bound to a deleted node.
    kids = {"prefill": _child(2, 2), "decode": _child(2, 2), "router": _child(1, 1)}
    pods = [_pod_on("prefill", "n1"), _pod_on("prefill", "n3"), _pod_on("decode", "n1"), _pod_on("decode", "n2")]
    before = compute_status(_svc(decode=2), kids, pods, "e", T0, lost_nodes={})
    assert _conds(before)["Ready"] == ("True", "AllReplicasReady")
    r = compute_status(_svc(before.status, decode=2), kids, pods, "e", T1, lost_nodes={"n2": "deleted"})
    assert _conds(r)["Ready"] == ("False", "ReplicasNotReady") and _conds(r)["Degraded"] == ("True", "NodeLost")
    assert r.status["decode"] == {"desired": 2, "ready": 1, "summary": "1/2"} and r.status["prefill"]["ready"] == 2
    degraded = next(c for c in r.status["conditions"] if c["type"] == "Degraded")
    assert degraded["message"].startswith("1 decode pod(s) on lost nodes: n2 deleted")
    # The transitions are posted as Events, Ready and Degraded as warnings (kubectl describe shows them).
    assert {(t.type, t.status, t.warning) for t in r.transitions} == {("Ready", "False", True), ("Degraded", "True", True), ("Progressing", "True", False)}
    # Once Kubernetes deletes the pod (terminating, then gone) and its replacement runs elsewhere, all is well again.
    gone = [_pod_on("prefill", "n1"), _pod_on("prefill", "n3"), _pod_on("decode", "n1"), _pod_on("decode", "n2", deleting=True),
            _pod_on("decode", "n3")]
    assert _conds(compute_status(_svc(r.status, decode=2), kids, gone, "e", T1, lost_nodes={"n2": "deleted"}))["Degraded"] == ("False", "AsExpected")
