"""Fault paths against kmock (an HTTP Kubernetes API emulator): 409, 5xx, 403, vanished resources."""

from __future__ import annotations

import json
import logging
from typing import Any

import kopf
import kmock
import pytest
from kubernetes import client as k8s

from pdserve.operator.handlers import _raise_for
from pdserve.kube.errors import KubeError
from pdserve.kube.api import Kube
from pdserve.operator.reconcile import Reconciler

# Plain HTTP reactions: each test scripts exactly the answers the API server gives.
pytestmark = pytest.mark.kmock(cls=kmock.RawHandler)
NS, NAME = "ns", "s"
BASE = f"/apis/pdserve.io/v1alpha1/namespaces/{NS}/disaggregatedservices/{NAME}"
LOG = logging.getLogger("test")

BODY: dict[str, Any] = {
    "apiVersion": "pdserve.io/v1alpha1",
    "kind": "DisaggregatedService",
    "metadata": {"name": NAME, "namespace": NS, "uid": "u-1", "generation": 2},
    "spec": {"model": {"name": "m"}, "engine": {"kind": "mock"}},
}


class Events(list[tuple[str, str, str, bool]]):
    """What the reconciler hands to kopf's Event poster."""

    def __call__(self, involved: Any, reason: str, message: str, *, warning: bool = False) -> None:
        self.append((involved["metadata"]["uid"], reason, message, warning))


def _reconciler(server: kmock.RawHandler, events: Events | None = None) -> Reconciler:
    cfg = k8s.Configuration(host=str(server.url).rstrip("/"))
    return Reconciler(Kube(k8s.ApiClient(cfg), request_timeout_s=5), post_event=events if events is not None else Events())


def _cluster(server: kmock.RawHandler, body: dict[str, Any] | None = BODY) -> None:
    server[f"get {BASE}"] << (body if body is not None else 404)
    server[f"get /apis/apps/v1/namespaces/{NS}/deployments"] << {"items": []}
    server[f"get /api/v1/namespaces/{NS}/pods"] << {"items": []}
    server[f"patch {BASE}/status"] << {}


def _json(req: Any) -> Any:
    # kmock parses only application/json bodies; patches arrive as text.
    return req.data if isinstance(req.data, (dict, list)) else json.loads(req.data)


def _status_patch(server: kmock.RawHandler) -> dict[str, Any]:
    patches = server[f"patch {BASE}/status"]
    assert len(patches) == 1
    return _json(patches[0])["status"]  # type: ignore[no-any-return]


def _condition(status: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == ctype)


async def test_conflict_on_apply_is_transient_and_reported(kmock: kmock.RawHandler) -> None:
    _cluster(kmock)
    kmock[f"patch /api/v1/namespaces/{NS}/serviceaccounts/s-router"] << 409 << {"kind": "Status", "code": 409, "message": "Apply failed with 1 conflict: conflict with \"kubectl\""}
    events = Events()
    outcome = await _reconciler(kmock, events).sync(NS, NAME, cause="spec", logger=LOG)
    assert outcome is not None and outcome.transient
    assert outcome.error == 'ServiceAccount/s-router: Apply failed with 1 conflict: conflict with "kubectl"'
    degraded = _condition(_status_patch(kmock), "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "ApplyFailed")
    assert "conflict" in degraded["message"]
    with pytest.raises(kopf.TemporaryError):
        _raise_for(outcome)
    # The SSA request itself was well-formed: our field manager, forced, apply content type.
    req = kmock[f"patch /api/v1/namespaces/{NS}/serviceaccounts/s-router"][0]
    assert req.params == {"fieldManager": "pdserve-operator", "force": "true"}
    assert req.headers["Content-Type"] == "application/apply-patch+yaml"
    assert _json(req)["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    # A Warning event on the resource marks the transition (kopf posts it).
    assert any(uid == "u-1" and reason == "ApplyFailed" and warning for uid, reason, _, warning in events)


async def test_server_error_while_listing_raises_transient(kmock: kmock.RawHandler) -> None:
    kmock[f"get {BASE}"] << BODY
    kmock[f"get /apis/apps/v1/namespaces/{NS}/deployments"] << 503 << {"kind": "Status", "code": 503, "message": "etcdserver: leader changed"}
    with pytest.raises(KubeError) as err:
        await _reconciler(kmock).sync(NS, NAME, cause="spec", logger=LOG)
    assert err.value.status == 503 and err.value.transient
    assert "leader changed" in str(err.value)
    assert len(kmock[f"patch {BASE}/status"]) == 0


async def test_forbidden_apply_is_permanent_and_named(kmock: kmock.RawHandler) -> None:
    _cluster(kmock)
    msg = 'roles.rbac.authorization.k8s.io "s-router" is forbidden: user "op" is attempting to grant RBAC permissions not currently held'
    kmock[f"patch /apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/roles/s-router"] << 403 << {"kind": "Status", "code": 403, "message": msg}
    kmock[f"patch /api/v1/namespaces/{NS}/serviceaccounts/s-router"] << {}
    outcome = await _reconciler(kmock).sync(NS, NAME, cause="spec", logger=LOG)
    assert outcome is not None and not outcome.transient
    assert outcome.applied == ["ServiceAccount/s-router"]
    assert "attempting to grant RBAC permissions" in _condition(_status_patch(kmock), "Degraded")["message"]


async def test_vanished_resource_is_left_alone(kmock: kmock.RawHandler) -> None:
    _cluster(kmock, body=None)
    assert await _reconciler(kmock).sync(NS, NAME, cause="spec", logger=LOG) is None
    assert len(kmock["patch"]) == 0 and len(kmock["post"]) == 0


async def test_children_created_when_missing_and_status_written(kmock: kmock.RawHandler) -> None:
    _cluster(kmock)
    kmock["patch"] << (lambda req: _json(req))  # SSA echoes the object back
    outcome = await _reconciler(kmock).sync(NS, NAME, cause="spec", logger=LOG)
    assert outcome is not None and outcome.error is None
    # Nothing exists yet: render order, RBAC before the pods that need it.
    assert outcome.applied == [
        "ServiceAccount/s-router", "Role/s-router", "RoleBinding/s-router",
        "Deployment/s-prefill", "Deployment/s-decode", "Deployment/s-router", "Service/s",
    ]  # fmt: skip
    status = _status_patch(kmock)
    assert status["observedGeneration"] == 2
    assert status["endpoint"] == "http://s.ns.svc.cluster.local:8000/v1"
    assert _condition(status, "Progressing")["status"] == "True"


async def test_burst_of_triggers_coalesces(kmock: kmock.RawHandler) -> None:
    import asyncio

    _cluster(kmock)
    kmock["patch"] << (lambda req: _json(req))
    reconciler = _reconciler(kmock)
    outcomes = await asyncio.gather(*(reconciler.sync(NS, NAME, cause="child", logger=LOG) for _ in range(10)))
    ran = [o for o in outcomes if o is not None]
    # One sync runs, one is queued behind it; the other eight fold into the queued one.
    assert len(ran) == 2 and len(kmock[f"get {BASE}"]) == 2
