"""CRD lifecycle on the real API server: `pdserve crd --apply` upgrades the CRD under
live DisaggregatedServices and loses nothing; it refuses a CRD that would strand
objects stored in a version it no longer serves.

The "old" CRD is today's with what a newer schema adds taken away (a field and a CEL
rule), which is exactly the shape of an upgrade between two chart releases.
"""

from __future__ import annotations

import copy
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from api.invalid_cases import valid_manifest
from leftovers import remove_services, strip_finalizers
from operator_harness import api_client, eventually
from pdserve.api.crd import build_crd
from pdserve.api.crd_apply import CrdUpgradeRefused, apply_crd, check_upgrade

pytestmark = pytest.mark.controlplane

GROUP, VERSION, PLURAL = "pdserve.io", "v1alpha1", "disaggregatedservices"


def _spec_props(crd: dict[str, Any]) -> dict[str, Any]:
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]


def old_crd() -> dict[str, Any]:
    """Today's CRD minus one optional spec field and one validation rule."""
    crd = copy.deepcopy(build_crd())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rules = spec.get("x-kubernetes-validations") or []
    mentioned = " ".join(f"{r['rule']} {r.get('fieldPath', '')}" for r in rules)
    # An optional field no rule reads (the API server refuses rules on missing paths).
    removed = next(k for k in sorted(spec["properties"])
                   if k not in spec.get("required", []) and k not in mentioned)
    del spec["properties"][removed]
    if rules:
        spec["x-kubernetes-validations"] = rules[1:]
    crd["metadata"].setdefault("annotations", {})["pdserve.io/test-removed-field"] = removed
    return crd


@pytest.fixture
def cluster_api(kube_cluster: Any) -> Iterator[client.ApiClient]:
    # A cluster of its own CRD state: remove the CRD first so the test starts from "old".
    with api_client(kube_cluster.kubeconfig) as api:
        ext, custom = client.ApiextensionsV1Api(api), client.CustomObjectsApi(api)
        name = build_crd()["metadata"]["name"]
        # Deleting the CRD deletes every DisaggregatedService first, and waits for each finalizer: one
        # an earlier test left (or one in a namespace still terminating) would hold the CRD in
        # "terminating" and every later create gets 403. So: none left before, and none while it goes.
        remove_services(custom)
        try:
            ext.delete_custom_resource_definition(name)
        except ApiException as e:
            if e.status != 404:
                raise

        def gone() -> bool:
            strip_finalizers(custom)  # a deleting resource cannot get a new finalizer: this pass converges
            try:
                ext.read_custom_resource_definition(name)
            except ApiException as e:
                return e.status == 404
            return False

        eventually("CRD deleted", gone, 60)
        try:
            yield api
        finally:
            # Leave today's CRD installed, and nothing of this test's, for the tests that share the session cluster.
            remove_services(custom)
            apply_crd(api, build_crd())


def test_apply_upgrades_the_crd_under_live_resources_and_loses_nothing(cluster_api: client.ApiClient,
                                                                      kube_cluster: Any) -> None:
    old = old_crd()
    removed = old["metadata"]["annotations"]["pdserve.io/test-removed-field"]
    created = apply_crd(cluster_api, old)
    assert created.action == "created" and created.stored_versions == (VERSION,)

    ns = f"crdup-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(cluster_api)
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    co = client.CustomObjectsApi(cluster_api)
    try:
        names = [f"svc-{i}" for i in range(5)]
        before = {}
        for n in names:
            co.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, valid_manifest(n, ns))
            # Status written as the operator would, through the status subresource.
            co.patch_namespaced_custom_object_status(
                GROUP, VERSION, ns, PLURAL, n, {"status": {"observedGeneration": 1, "endpoint": f"http://{n}:8000"}})
            before[n] = co.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, n)

        # The upgrade, through the CLI the chart's hook Job runs.
        out = subprocess.run([sys.executable, "-m", "pdserve.cli", "crd", "--apply", "--kubeconfig",
                              str(kube_cluster.kubeconfig)], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert "updated" in out.stdout and f"storedVersions {VERSION}" in out.stdout, out.stdout

        live = client.ApiextensionsV1Api(cluster_api).read_custom_resource_definition(old["metadata"]["name"])
        assert removed in live.spec.versions[0].schema.open_apiv3_schema.properties["spec"].properties, \
            "the new schema is in force"
        after = {o["metadata"]["name"]: o for o in
                 co.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)["items"]}
        assert sorted(after) == names, "no resource lost"
        for n in names:
            assert after[n]["spec"] == before[n]["spec"], n
            assert after[n]["status"] == before[n]["status"], n
            assert after[n]["metadata"]["uid"] == before[n]["metadata"]["uid"], n
        # A second apply is a no-op (idempotent hook on every upgrade).
        assert apply_crd(cluster_api, build_crd()).action == "unchanged"
    finally:
        core.delete_namespace(ns)


def test_apply_refuses_to_strand_a_stored_version(cluster_api: client.ApiClient) -> None:
    apply_crd(cluster_api, build_crd())
    renamed = copy.deepcopy(build_crd())
    renamed["spec"]["versions"][0]["name"] = "v1alpha2"
    with pytest.raises(CrdUpgradeRefused, match=r"v1alpha1.*storedVersions"):
        apply_crd(cluster_api, renamed)
    live = client.ApiextensionsV1Api(cluster_api).read_custom_resource_definition(renamed["metadata"]["name"])
    assert [v.name for v in live.spec.versions] == [VERSION], "nothing was written"


def test_check_upgrade_needs_exactly_one_storage_version() -> None:
    crd = copy.deepcopy(build_crd())
    crd["spec"]["versions"][0]["storage"] = False
    with pytest.raises(CrdUpgradeRefused, match="exactly one version must have storage=true"):
        check_upgrade(crd, [])
