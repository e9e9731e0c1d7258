"""kopf with the operator's real registry, in-process, against kmock's Kubernetes emulator.

Needs no control-plane binaries: proves the handler wiring (login, resume, finalizer,
server-side apply of every child, status) on any machine."""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import AsyncIterator
from typing import Any

import kmock
import kopf
import pytest
from kubernetes import client as k8s

from pdserve.operator.handlers import HandlerConfig, build_registry, settings
from pdserve.kube.api import Kube
from pdserve.operator.reconcile import Reconciler

NS = "ns"
DSVC = "pdserve.io/v1alpha1/disaggregatedservices"
RESOURCES = {
    "v1/namespaces": ("Namespace", False),
    "apiextensions.k8s.io/v1/customresourcedefinitions": ("CustomResourceDefinition", False),
    DSVC: ("DisaggregatedService", True),
    "apps/v1/deployments": ("Deployment", True),
    "v1/pods": ("Pod", True),
    "v1/services": ("Service", True),
    "v1/serviceaccounts": ("ServiceAccount", True),
    "v1/events": ("Event", True),
    "rbac.authorization.k8s.io/v1/roles": ("Role", True),
    "rbac.authorization.k8s.io/v1/rolebindings": ("RoleBinding", True),
}
CHILDREN = {
    "v1/serviceaccounts": "s-router",
    "rbac.authorization.k8s.io/v1/roles": "s-router",
    "rbac.authorization.k8s.io/v1/rolebindings": "s-router",
    "apps/v1/deployments": ("s-prefill", "s-decode", "s-router"),
    "v1/services": "s",
}
BODY: dict[str, Any] = {
    "apiVersion": "pdserve.io/v1alpha1",
    "kind": "DisaggregatedService",
    "metadata": {"name": "s", "namespace": NS, "uid": "u-1", "generation": 1, "resourceVersion": "1"},
    "spec": {"model": {"name": "m"}, "engine": {"kind": "mock"}, "decode": {"replicas": 2}},
}


@pytest.fixture
async def emulator(kmock: kmock.KubernetesEmulator) -> AsyncIterator[kmock.KubernetesEmulator]:
    for key, (kind, namespaced) in RESOURCES.items():
        kmock.resources[key] = kmock_info(kind, namespaced, key == DSVC)
    kmock.objects[DSVC, NS, "s"] = copy.deepcopy(BODY)
    # The emulator patches only existing objects (no create-on-apply): seed empty children.
    for key, names in CHILDREN.items():
        for name in (names,) if isinstance(names, str) else names:
            kmock.objects[key, NS, name] = {"metadata": {"name": name, "namespace": NS}}
    yield kmock


def kmock_info(kind: str, namespaced: bool, status: bool) -> Any:
    import kmock as km

    verbs = ["get", "list", "watch", "create", "patch"]
    return km.ResourceInfo(kind=kind, namespaced=namespaced, verbs=verbs, subresources=["status"] if status else [])


async def _until(what: str, check: Any, timeout_s: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


async def test_operator_reconciles_existing_resource_in_process(emulator: kmock.KubernetesEmulator) -> None:
    url = str(emulator.url).rstrip("/")
    kube = Kube(k8s.ApiClient(k8s.Configuration(host=url)), request_timeout_s=5)
    registry = build_registry(Reconciler(kube), HandlerConfig(resync_seconds=600), connection=kopf.ConnectionInfo(server=url))
    stop = asyncio.Event()
    task = asyncio.create_task(kopf.operator(registry=registry, settings=settings(), standalone=True, clusterwide=True, stop_flag=stop))
    try:
        def obj(key: str, name: str) -> dict[str, Any]:
            return dict(emulator.objects[key, NS, name].raw)

        status = await _until("status written", lambda: obj(DSVC, "s").get("status", {}).get("conditions"))
        assert {c["type"] for c in status} == {"Ready", "Progressing", "Degraded", "ScalingLimited"}
        assert "pdserve.io/operator" in obj(DSVC, "s")["metadata"].get("finalizers", [])
        decode = await _until("decode applied", lambda: obj("apps/v1/deployments", "s-decode").get("spec"))
        assert decode["replicas"] == 2
        assert decode["template"]["spec"]["containers"][0]["command"] == ["pdserve", "worker"]
        assert obj("v1/services", "s")["spec"]["selector"] == {"pdserve.io/service": "s", "pdserve.io/role": "router"}
        assert obj("rbac.authorization.k8s.io/v1/roles", "s-router")["rules"][0]["resources"] == ["pods"]
        applies = [r for r in emulator["patch"] if r.params.get("fieldManager") == "pdserve-operator"]
        assert {r.params.get("force") for r in applies} == {"true"}
        # Condition transitions reach the cluster as Events through kopf's own poster.
        events = await _until("a transition Event", lambda: [e for e in emulator.objects if e[0] == "v1/events"])
        posted = [dict(emulator.objects[e].raw) for e in events]
        assert any(p["involvedObject"]["uid"] == "u-1" and p["reason"] == "RollingOut" for p in posted), posted
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)
        kube.close()


async def test_dropped_and_expired_watches_lose_no_change(emulator: kmock.KubernetesEmulator) -> None:
    import kmock as km

    url = str(emulator.url).rstrip("/")
    expired: list[int] = []

    def expire_once(request: Any) -> Any:
        # The first re-watch answers 410 Gone (history compacted): kopf must re-list.
        if expired:
            raise km.ReactionMismatchError()
        expired.append(1)
        return ({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410, "reason": "Expired", "message": "too old resource version"}},)

    kube = Kube(k8s.ApiClient(k8s.Configuration(host=url)), request_timeout_s=5)
    registry = build_registry(Reconciler(kube), HandlerConfig(resync_seconds=600), connection=kopf.ConnectionInfo(server=url))
    s = settings()
    s.watching.client_timeout = 1.0  # the client drops every watch stream after a second
    stop = asyncio.Event()
    task = asyncio.create_task(kopf.operator(registry=registry, settings=s, standalone=True, clusterwide=True, stop_flag=stop))
    try:
        def decode() -> dict[str, Any]:
            return dict(emulator.objects["apps/v1/deployments", NS, "s-decode"].raw)

        await _until("first apply", lambda: decode().get("spec", {}).get("replicas") == 2)
        emulator["get /apis/pdserve.io/v1alpha1/disaggregatedservices"][{"watch": "true"}] << expire_once
        await _until("a watch expired", lambda: expired, 10)
        # A spec change lands while kopf is re-listing / re-watching.
        emulator.objects[DSVC, NS, "s"] = {**dict(emulator.objects[DSVC, NS, "s"].raw), "spec": {**BODY["spec"], "decode": {"replicas": 3}}}
        await _until("change applied after the dropped watch", lambda: decode()["spec"]["replicas"] == 3, 20)
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)
        kube.close()
