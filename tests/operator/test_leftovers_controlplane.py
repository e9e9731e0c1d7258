"""The one teardown (e2e/leftovers.remove_services) on the real API server: a DisaggregatedService whose
operator is gone still holds kopf's finalizer; after remove_services nothing is left, its namespace
can go and the CRD could be deleted. With its operator alive, the operator releases it itself."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from leftovers import list_services, remove_services
from operator_harness import GROUP, PLURAL, VERSION, OperatorProcess, eventually, load_example

from api.invalid_cases import valid_manifest

pytestmark = pytest.mark.controlplane
MOCK_EXAMPLE = Path(__file__).resolve().parents[2] / "examples/mock-disagg.yaml"
FINALIZER = f"{GROUP}/operator"  # kopf's, as the operator configures it (operator/handlers.py)


def _with_finalizer(name: str, namespace: str) -> dict[str, Any]:
    body = valid_manifest(name, namespace)
    body["metadata"]["finalizers"] = [FINALIZER]  # what an operator that died left behind
    return body


def test_a_resource_its_operator_left_is_removed_and_its_namespace_goes(admin: client.ApiClient) -> None:
    core, custom = client.CoreV1Api(admin), client.CustomObjectsApi(admin)
    ns = f"left-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns}})
    try:
        for name in ("held", "deleting"):
            custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, _with_finalizer(name, ns))
        # One already being deleted: it waits for its finalizer, with no one to release it.
        custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "deleting")
        assert list_services(custom, ns)[0]["metadata"]["finalizers"] == [FINALIZER]
        assert sorted(remove_services(custom, ns)) == [f"{ns}/deleting", f"{ns}/held"]
        assert list_services(custom, ns) == []
    finally:
        core.delete_namespace(ns)

    def namespace_gone() -> bool:
        try:
            core.read_namespace(ns)
        except ApiException as e:
            return e.status == 404
        return False

    eventually("the namespace deleted", namespace_gone, 60)


def test_a_live_operator_releases_its_own_finalizer(admin: client.ApiClient, operator: OperatorProcess, namespace: str) -> None:
    custom = client.CustomObjectsApi(admin)
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, load_example(MOCK_EXAMPLE, namespace, "live"))
    eventually("the operator's finalizer", lambda: FINALIZER in (custom.get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "live")["metadata"].get("finalizers") or []), 30)
    assert remove_services(custom, namespace, grace_s=30.0) == [], "the operator handled the deletion within the grace"
    assert list_services(custom, namespace) == []
