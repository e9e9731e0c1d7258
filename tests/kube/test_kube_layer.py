"""pdserve.kube: one answer to "is this pod serving?", typed errors, kopf events, one client setup."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kopf._core.engines import posting
from kubernetes.client.exceptions import ApiException

from pdserve.kube import events
from pdserve.kube.client import NoClusterAccess, load_api_client
from pdserve.kube.constants import ROLE_LABEL, SERVICE_LABEL, pool_selector
from pdserve.kube.errors import KubeError
from pdserve.kube.pods import is_pending, is_ready, is_terminating
from pdserve.router.shell.discovery import pods_to_endpoints


def pod(name: str, phase: str | None, ready: bool, *, ip: str | None = "10.0.0.1", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {SERVICE_LABEL: "svc", ROLE_LABEL: "decode"}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status: dict[str, Any] = {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if phase is not None:
        status["phase"] = phase
    if ip:
        status["podIP"] = ip
    return {"metadata": meta, "status": status}


CASES = [
    (pod("a", "Running", True), True, False),
    (pod("b", "Running", False), False, False),
    (pod("c", "Pending", False), False, True),
    (pod("d", "Running", True, deleting=True), False, False),  # draining: no new traffic
    (pod("e", "Succeeded", True), False, False),
    (pod("f", "Pending", False, deleting=True), False, False),
]


@pytest.mark.parametrize(("p", "ready", "pending"), CASES, ids=[c[0]["metadata"]["name"] for c in CASES])
def test_pod_predicates(p: dict[str, Any], ready: bool, pending: bool) -> None:
    assert is_ready(p) is ready
    assert is_pending(p) is pending
    assert is_terminating(p) is bool(p["metadata"].get("deletionTimestamp"))


def test_router_discovery_serves_exactly_the_ready_pods() -> None:
    pods = [c[0] for c in CASES]
    for i, p in enumerate(pods):
        p["status"]["podIP"] = f"10.0.0.{i + 1}"
    eps = pods_to_endpoints(pods, service="svc")
    assert [e.url for e in eps.decode] == [f"http://{p['status']['podIP']}:8000" for p in pods if is_ready(p)]


def test_selector() -> None:
    assert pool_selector("svc") == "pdserve.io/service=svc"
    assert pool_selector("svc", "prefill") == "pdserve.io/service=svc,pdserve.io/role=prefill"


def test_kube_error_from_the_clients_exception() -> None:
    exc = ApiException(status=409, reason="Conflict")
    exc.body = '{"kind":"Status","message":"the object has been modified"}'
    err = KubeError.from_api_exception(exc, "PATCH", "/x")
    assert (err.status, err.message, err.transient, err.conflict, err.not_found) == (409, "the object has been modified", True, True, False)
    assert not KubeError(403, "forbidden").transient
    assert KubeError(404, "gone").not_found


def test_event_outside_kopf_is_refused_by_name() -> None:
    with pytest.raises(events.NotUnderKopf, match="Scaled"):
        events.post({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}}, "Scaled", "x")


async def test_event_goes_to_kopfs_queue_with_the_object_reference() -> None:
    import kopf

    queue: asyncio.Queue[posting.K8sEvent] = asyncio.Queue()
    tokens = [posting.settings_var.set(kopf.OperatorSettings()), posting.event_queue_var.set(queue),
              posting.event_queue_loop_var.set(asyncio.get_running_loop())]
    try:
        body = {"apiVersion": "pdserve.io/v1alpha1", "kind": "DisaggregatedService", "metadata": {"name": "s", "namespace": "ns", "uid": "u-1"}}
        # From a worker thread, as the planner's actuator posts.
        await asyncio.to_thread(events.post, body, "Scaled", "m" * 5000, warning=False)
        events.post(body, "PlannerHeld", "held", warning=True)
        await asyncio.sleep(0)
        got = [queue.get_nowait() for _ in range(2)]
    finally:
        for var, tok in zip((posting.settings_var, posting.event_queue_var, posting.event_queue_loop_var), tokens):
            var.reset(tok)  # type: ignore[attr-defined]
    assert [(e.type, e.reason, e.ref["uid"], e.ref["kind"]) for e in got] == [
        ("Normal", "Scaled", "u-1", "DisaggregatedService"), ("Warning", "PlannerHeld", "u-1", "DisaggregatedService")]
    assert len(got[0].message) == events.MAX_MESSAGE


def test_client_from_an_explicit_kubeconfig(tmp_path: Path) -> None:
    cfg = tmp_path / "kubeconfig"
    cfg.write_text("""apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: abc}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
""")
    api = load_api_client(str(cfg))
    assert api.configuration.host == "https://127.0.0.1:6443"
    with pytest.raises(NoClusterAccess, match="missing"):
        load_api_client(str(tmp_path / "missing"))
