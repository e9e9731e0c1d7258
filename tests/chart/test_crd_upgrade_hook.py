"""The chart upgrades its CRD: a pre-install/pre-upgrade hook Job runs `pdserve crd --apply`
with rights on that one CRD only (Helm itself never upgrades crds/)."""

from __future__ import annotations

import helm_python as helm

from .conftest import of_kind, render

CRD = "disaggregatedservices.pdserve.io"


def test_hook_job_applies_the_crd_before_install_and_upgrade(chart: helm.Chart) -> None:
    objects = render(chart, hooks=True)
    (job,) = of_kind(objects, "Job")
    annotations = job["metadata"]["annotations"]
    assert set(annotations["helm.sh/hook"].split(",")) == {"pre-install", "pre-upgrade"}
    assert "before-hook-creation" in annotations["helm.sh/hook-delete-policy"]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["crd", "--apply"]
    assert container["image"].startswith("ghcr.io/pdserve/pdserve:")
    sa = job["spec"]["template"]["spec"]["serviceAccountName"]
    # Its identity exists before the Job (lower hook weight) and is bound to the CRD role.
    (hook_sa,) = [o for o in of_kind(objects, "ServiceAccount") if o["metadata"]["name"] == sa]
    assert int(hook_sa["metadata"]["annotations"]["helm.sh/hook-weight"]) < int(annotations["helm.sh/hook-weight"])
    (binding,) = [b for b in of_kind(objects, "ClusterRoleBinding") if b["metadata"]["name"] == sa]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": "pdserve-system"}]
    (role,) = [r for r in of_kind(objects, "ClusterRole") if r["metadata"]["name"] == binding["roleRef"]["name"]]
    for rule in role["rules"]:
        assert rule["resources"] == ["customresourcedefinitions"]
        # Nothing but create (which RBAC cannot scope by name) is allowed on other CRDs.
        assert rule.get("resourceNames") == [CRD] or rule["verbs"] == ["create"], rule
    assert {v for r in role["rules"] for v in r["verbs"]} == {"create", "get", "patch"}


def test_hook_can_be_turned_off(chart: helm.Chart) -> None:
    objects = render(chart, {"crdUpgrade": {"enabled": False}}, hooks=True)
    assert not of_kind(objects, "Job")
    assert all("crd-upgrade" not in o["metadata"]["name"] for o in objects)


def test_hook_is_not_part_of_the_operator_objects(chart: helm.Chart) -> None:
    assert not of_kind(render(chart), "Job")
