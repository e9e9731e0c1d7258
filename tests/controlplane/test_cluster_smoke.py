"""The local control plane behaves like a real cluster: scheduling onto fake GPU
nodes, kwok readiness with loopback pod IPs, RBAC enforcement, garbage collection."""

from __future__ import annotations

import ipaddress
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from controlplane.cluster import LocalCluster
from controlplane.fixtures import FAKE_NODES, GPUS_PER_NODE
from controlplane.nodes import KWOK_TAINT

pytestmark = pytest.mark.controlplane

T = TypeVar("T")
LOOPBACK = ipaddress.ip_network("127.0.0.0/8")


def eventually(what: str, fn: Callable[[], T | None], timeout_s: float = 60) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        result = fn()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.25)


@pytest.fixture
def admin(kube_cluster: LocalCluster) -> Iterator[client.ApiClient]:
    with kube_cluster.api_client() as api:
        yield api


@pytest.fixture
def namespace(admin: client.ApiClient) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(admin)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


def gpu_deployment(name: str, replicas: int, gpus: int, node_selector: dict[str, str]) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": node_selector,
                    "tolerations": [{"key": KWOK_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [{
                        "name": "worker",
                        "image": "registry.invalid/pdserve/mock-worker:test",
                        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                    }],
                },
            },
        },
    }


def ready_pods(core: client.CoreV1Api, ns: str, selector: str) -> list[client.V1Pod]:
    pods = core.list_namespaced_pod(ns, label_selector=selector).items
    return [
        p for p in pods
        if p.metadata.deletion_timestamp is None
        and any(c.type == "Ready" and c.status == "True" for c in (p.status.conditions or []))
    ]


@pytest.fixture
def private_nodes(kube_cluster: LocalCluster, admin: client.ApiClient, namespace: str) -> Iterator[dict[str, str]]:
    """Two tainted 8-GPU nodes only this test's pods use (the cluster is shared by the session).

    Yields the node selector that targets them."""
    selector = {"pdserve.io/test-pool": namespace}
    names = kube_cluster.add_gpu_nodes(2, gpus=8, prefix=f"{namespace}-gpu", labels=selector, taint=True)
    yield selector
    for name in names:
        client.CoreV1Api(admin).delete_node(name)


def test_fake_gpu_nodes_are_ready_with_gpu_capacity(admin: client.ApiClient) -> None:
    nodes = [n for n in client.CoreV1Api(admin).list_node().items if n.metadata.name.startswith("gpu-node-")]
    assert len(nodes) == FAKE_NODES
    for node in nodes:
        assert node.status.allocatable["nvidia.com/gpu"] == str(GPUS_PER_NODE)
        assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)


def test_gpu_deployment_is_scheduled_and_ready_with_loopback_pod_ips(
    admin: client.ApiClient, namespace: str, private_nodes: dict[str, str]
) -> None:
    core, apps = client.CoreV1Api(admin), client.AppsV1Api(admin)
    # Two 6-GPU pods cannot share an 8-GPU node, so the scheduler must spread them.
    apps.create_namespaced_deployment(namespace, gpu_deployment("decode", replicas=2, gpus=6, node_selector=private_nodes))
    pods = eventually("2 ready pods", lambda: (p := ready_pods(core, namespace, "app=decode")) and len(p) == 2 and p)
    assert len({p.spec.node_name for p in pods}) == 2
    for pod in pods:
        assert ipaddress.ip_address(pod.status.pod_ip) in LOOPBACK
        assert ipaddress.ip_address(pod.status.pod_ip) in ipaddress.ip_network(
            core.read_node(pod.spec.node_name).spec.pod_cidr
        )
    status = eventually(
        "deployment to report 2 available replicas",
        lambda: (d := apps.read_namespaced_deployment_status("decode", namespace).status).available_replicas == 2 and d,
    )
    assert status.ready_replicas == 2

    # A third 6-GPU pod fits nowhere: the scheduler must keep it Pending.
    apps.patch_namespaced_deployment_scale("decode", namespace, {"spec": {"replicas": 3}})

    def unschedulable() -> bool:
        for pod in core.list_namespaced_pod(namespace, label_selector="app=decode").items:
            for c in pod.status.conditions or []:
                if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
                    return "nvidia.com/gpu" in (c.message or "")
        return False

    eventually("an Unschedulable pod citing nvidia.com/gpu", unschedulable)


def test_rbac_denies_until_a_role_binding_grants(kube_cluster: LocalCluster, admin: client.ApiClient, namespace: str) -> None:
    with kube_cluster.api_client(kube_cluster.kubeconfig_for("alice", ["pdserve-testers"])) as alice_api:
        alice = client.CoreV1Api(alice_api)
        with pytest.raises(ApiException) as denied:
            alice.list_namespaced_pod(namespace)
        assert denied.value.status == 403
        assert "alice" in denied.value.body

        rbac = client.RbacAuthorizationV1Api(admin)
        rbac.create_namespaced_role(namespace, {
            "metadata": {"name": "pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
        })
        rbac.create_namespaced_role_binding(namespace, {
            "metadata": {"name": "testers-read-pods"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "pdserve-testers"}],
        })

        def can_list() -> bool:
            try:
                alice.list_namespaced_pod(namespace)
                return True
            except ApiException as exc:
                if exc.status != 403:
                    raise
                return False

        eventually("alice to be allowed to list pods", can_list, timeout_s=30)
        # The grant is exactly what the role says: still no writes, no other namespaces.
        with pytest.raises(ApiException) as still_denied:
            alice.delete_collection_namespaced_pod(namespace)
        assert still_denied.value.status == 403
        with pytest.raises(ApiException) as other_ns:
            alice.list_namespaced_pod("default")
        assert other_ns.value.status == 403


def test_garbage_collector_deletes_owned_objects(admin: client.ApiClient, namespace: str) -> None:
    core, apps = client.CoreV1Api(admin), client.AppsV1Api(admin)
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    core.create_namespaced_config_map(namespace, {
        "metadata": {
            "name": "child",
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}],
        },
    })
    core.delete_namespaced_config_map("owner", namespace, propagation_policy="Background")

    def child_gone() -> bool:
        try:
            core.read_namespaced_config_map("child", namespace)
            return False
        except ApiException as exc:
            return exc.status == 404

    eventually("the owned ConfigMap to be collected", child_gone)

    # Deployment -> ReplicaSet -> Pods: the chain the operator's workloads rely on.
    apps.create_namespaced_deployment(namespace, gpu_deployment("prefill", replicas=1, gpus=1, node_selector={}))
    eventually("a ready prefill pod", lambda: ready_pods(core, namespace, "app=prefill"))
    apps.delete_namespaced_deployment("prefill", namespace, propagation_policy="Background")
    eventually(
        "ReplicaSets and pods of the deleted Deployment to vanish",
        lambda: not apps.list_namespaced_replica_set(namespace, label_selector="app=prefill").items
        and not core.list_namespaced_pod(namespace, label_selector="app=prefill").items,
    )


def test_service_account_token_kubeconfig_acts_as_the_account(
    kube_cluster: LocalCluster, admin: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(admin)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "operator"}})
    with kube_cluster.api_client(kube_cluster.kubeconfig_for_service_account(namespace, "operator")) as sa_api:
        review = client.AuthenticationV1Api(sa_api).create_self_subject_review({})
        assert review.status.user_info.username == f"system:serviceaccount:{namespace}:operator"
        assert "system:serviceaccounts" in review.status.user_info.groups
        with pytest.raises(ApiException) as denied:
            client.CoreV1Api(sa_api).list_namespaced_config_map(namespace)
        assert denied.value.status == 403
    with pytest.raises(Exception, match="ServiceAccount .*/missing"):
        kube_cluster.kubeconfig_for_service_account(namespace, "missing")
