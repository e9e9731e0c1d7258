"""The operator on a real control plane, running as `pdserve operator` under exactly RULES."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from leftovers import remove_services
from operator_harness import GROUP, PLURAL, VERSION, OperatorProcess, eventually, load_example
from pdserve.api import DisaggregatedService
from pdserve.operator.drift import drift
from pdserve.operator.render import render

pytestmark = pytest.mark.controlplane
ROOT = Path(__file__).resolve().parents[2]
MOCK_EXAMPLE = ROOT / "examples/mock-disagg.yaml"
LLAMA_EXAMPLE = ROOT / "examples/llama-8b-disagg.yaml"


def _get(admin: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    return client.CustomObjectsApi(admin).get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)  # type: ignore[no-any-return]


def _create(admin: client.ApiClient, body: dict[str, Any]) -> dict[str, Any]:
    ns = body["metadata"]["namespace"]
    return client.CustomObjectsApi(admin).create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)  # type: ignore[no-any-return]


def _patch_spec(admin: client.ApiClient, ns: str, name: str, spec: dict[str, Any]) -> None:
    client.CustomObjectsApi(admin).patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name, {"spec": spec})


def _condition(obj: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == ctype), {})


def _manual(body: dict[str, Any]) -> dict[str, Any]:
    """Autoscaling off: the operator hosts the planner of every autoscaled resource, and these
    tests play the planner's part by hand (or must see no planner Events)."""
    body["spec"]["autoscaling"]["enabled"] = False
    return body


def _ready(admin: client.ApiClient, ns: str, name: str, timeout_s: float = 60) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        obj = _get(admin, ns, name)
        done = _condition(obj, "Ready").get("status") == "True" and obj["status"].get("observedGeneration") == obj["metadata"]["generation"]
        return obj if done else None

    return eventually(f"{ns}/{name} Ready", check, timeout_s)


def _deployments(admin: client.ApiClient, ns: str, name: str) -> dict[str, dict[str, Any]]:
    items = client.AppsV1Api(admin).list_namespaced_deployment(ns, label_selector=f"pdserve.io/service={name}").items
    return {d.metadata.name: client.ApiClient().sanitize_for_serialization(d) for d in items}


def _engine(dep: dict[str, Any]) -> dict[str, Any]:
    return dep["spec"]["template"]["spec"]["containers"][0]  # type: ignore[no-any-return]


def _events(admin: client.ApiClient, ns: str, name: str) -> list[Any]:
    return [e for e in client.CoreV1Api(admin).list_namespaced_event(ns).items if e.involved_object.name == name and e.involved_object.kind == "DisaggregatedService"]


def test_example_becomes_ready_with_exact_children(admin: client.ApiClient, operator: OperatorProcess, namespace: str, kube_cluster: Any) -> None:
    body = load_example(LLAMA_EXAMPLE, namespace)
    _create(admin, body)
    obj = _ready(admin, namespace, "llama-8b")
    assert obj["status"]["prefill"] == {"desired": 2, "ready": 2, "summary": "2/2"}
    assert obj["status"]["decode"]["summary"] == "2/2" and obj["status"]["router"]["ready"] == 2
    assert obj["status"]["endpoint"] == f"http://llama-8b.{namespace}.svc.cluster.local:8000/v1"
    assert {c["type"]: c["status"] for c in obj["status"]["conditions"]} == {"Ready": "True", "Progressing": "False", "Degraded": "False", "ScalingLimited": "False"}

    # The live Deployments carry exactly what render() produces for the stored resource.
    expected = {m["metadata"]["name"]: m for m in render(DisaggregatedService.from_body(obj), _options()) if m["kind"] == "Deployment"}
    live = _deployments(admin, namespace, "llama-8b")
    assert sorted(live) == ["llama-8b-decode", "llama-8b-prefill", "llama-8b-router"]
    for name, want in expected.items():
        got = _engine(live[name])
        assert got["args"] == _engine(want)["args"]
        assert got["command"] == _engine(want)["command"]
        assert [(p["name"], p["containerPort"]) for p in got["ports"]] == [(p["name"], p["containerPort"]) for p in _engine(want)["ports"]]
        assert live[name]["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]
    # As the API server stores them (defaults added), the children show no drift.
    assert {name: drift(want, live[name]) for name, want in expected.items()} == {name: [] for name in expected}
    prefill = _engine(live["llama-8b-prefill"])
    assert '{"kv_connector":"NixlConnector","kv_role":"kv_both"}' in prefill["args"]
    assert prefill["resources"]["limits"]["nvidia.com/gpu"] == "1" and prefill["resources"]["requests"]["nvidia.com/gpu"] == "1"
    assert prefill["env"][1]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert prefill["startupProbe"]["httpGet"]["path"] == "/health" and prefill["readinessProbe"]["httpGet"]["path"] == "/health"
    service = client.CoreV1Api(admin).read_namespaced_service("llama-8b", namespace)
    assert service.spec.selector == {"pdserve.io/service": "llama-8b", "pdserve.io/role": "router"}
    eventually("AllReplicasReady event", lambda: any(e.reason == "AllReplicasReady" for e in _events(admin, namespace, "llama-8b")), 15)

    # Printer columns, as `kubectl get dsvc` shows them.
    with kube_cluster.http() as http:
        resp = http.get(f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}", headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
    doc = resp.json()
    columns = [c["name"] for c in doc["columnDefinitions"]]
    row = dict(zip(columns, doc["rows"][0]["cells"]))
    assert (row["Prefill"], row["Decode"], row["Router"], row["Ready"]) == ("2/2", "2/2", 2, "True")


def _options() -> Any:
    from pdserve.operator.names import RenderOptions

    return RenderOptions(pdserve_image="registry.invalid/pdserve:test")


def test_drift_is_repaired(admin: client.ApiClient, operator: OperatorProcess, namespace: str) -> None:
    _create(admin, load_example(MOCK_EXAMPLE, namespace, "drift"))
    _ready(admin, namespace, "drift")
    apps = client.AppsV1Api(admin)
    apps.patch_namespaced_deployment("drift-decode", namespace, {"spec": {"replicas": 4, "template": {"spec": {"containers": [{"name": "engine", "args": ["tampered"]}]}}}})
    restored = eventually(
        "decode drift repaired",
        lambda: (d := apps.read_namespaced_deployment("drift-decode", namespace)).spec.replicas == 1 and d.spec.template.spec.containers[0].args[0] == "meta-llama/Llama-3.1-8B-Instruct",
        30,
    )
    assert restored
    apps.delete_namespaced_deployment("drift-prefill", namespace)
    eventually("deleted prefill recreated", lambda: _deployments(admin, namespace, "drift").get("drift-prefill"), 30)
    client.CoreV1Api(admin).delete_namespaced_service("drift", namespace)
    eventually("deleted service recreated (resync)", lambda: client.CoreV1Api(admin).read_namespaced_service("drift", namespace), 30)
    _ready(admin, namespace, "drift")


def test_replica_change_propagates(admin: client.ApiClient, operator: OperatorProcess, namespace: str) -> None:
    _create(admin, _manual(load_example(MOCK_EXAMPLE, namespace, "scale")))
    _ready(admin, namespace, "scale")
    # What the planner does: both pools in one merge patch.
    _patch_spec(admin, namespace, "scale", {"prefill": {"replicas": 2}, "decode": {"replicas": 3}})
    deps = eventually(
        "replicas applied",
        lambda: (d := _deployments(admin, namespace, "scale"))["scale-prefill"]["spec"]["replicas"] == 2 and d["scale-decode"]["spec"]["replicas"] == 3 and d,
        30,
    )
    assert deps
    obj = _ready(admin, namespace, "scale")
    assert obj["status"]["decode"] == {"desired": 3, "ready": 3, "summary": "3/3"}
    # The planner's status key survives the operator's status writes.
    decision = {"lastDecision": {"prefill": 2, "decode": 3}, "reason": "forecast 41 rps", "time": "2026-01-01T00:00:00Z"}
    client.CustomObjectsApi(admin).patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, "scale", {"status": {"planner": decision}})
    _patch_spec(admin, namespace, "scale", {"decode": {"replicas": 1}})
    obj = eventually("scaled back", lambda: (o := _ready(admin, namespace, "scale"))["status"]["decode"]["desired"] == 1 and o, 30)
    assert obj["status"]["planner"] == decision


def test_delete_removes_children(admin: client.ApiClient, operator: OperatorProcess, namespace: str) -> None:
    _create(admin, load_example(MOCK_EXAMPLE, namespace, "gone"))
    _ready(admin, namespace, "gone")
    client.CustomObjectsApi(admin).delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "gone")
    eventually("children garbage-collected", lambda: not _deployments(admin, namespace, "gone"), 60)
    eventually("service garbage-collected", lambda: not client.CoreV1Api(admin).list_namespaced_service(namespace).items, 60)

    def resource_gone() -> bool:
        try:
            _get(admin, namespace, "gone")
        except ApiException as e:
            return e.status == 404
        return False

    eventually("resource deleted (finalizer released)", resource_gone, 30)


def test_restart_mid_reconcile_no_duplicates_no_flapping(admin: client.ApiClient, operator: OperatorProcess, namespace: str) -> None:
    _create(admin, _manual(load_example(MOCK_EXAMPLE, namespace, "restart")))
    # Kill the operator as soon as it has started creating children.
    eventually("first child", lambda: _deployments(admin, namespace, "restart"), 30, interval_s=0.02)
    operator.stop(signal.SIGKILL)
    operator.start()
    obj = _ready(admin, namespace, "restart")
    ready_since = _condition(obj, "Ready")["lastTransitionTime"]
    assert sorted(_deployments(admin, namespace, "restart")) == ["restart-decode", "restart-prefill", "restart-router"]
    assert len(client.AppsV1Api(admin).list_namespaced_replica_set(namespace).items) == 3
    # Several resync periods later nothing has moved: same conditions, one Ready event.
    time.sleep(operator.resync_seconds * 3)
    later = _get(admin, namespace, "restart")
    assert _condition(later, "Ready")["lastTransitionTime"] == ready_since
    assert later["status"]["conditions"] == obj["status"]["conditions"]
    assert sum(1 for e in _events(admin, namespace, "restart") if e.reason == "AllReplicasReady") == 1
    assert not any(e.type == "Warning" and e.reason != "ReplicasNotReady" for e in _events(admin, namespace, "restart"))
    stored = _deployments(admin, namespace, "restart")
    for name, dep in stored.items():
        assert dep["metadata"]["generation"] == 1, f"{name} was rewritten after creation"
    for want in render(DisaggregatedService.from_body(later), _options()):
        if want["kind"] == "Deployment":
            assert drift(want, stored[want["metadata"]["name"]]) == []


def test_gpu_shortage_reports_scaling_limited(admin: client.ApiClient, operator: OperatorProcess, namespace: str) -> None:
    # 2 fake nodes x 8 GPUs: three TP-8 decode workers plus a TP-8 prefill cannot all fit.
    body = load_example(MOCK_EXAMPLE, namespace, "greedy")
    body["spec"]["autoscaling"] = {"enabled": False}
    body["spec"]["prefill"] = {"replicas": 1, "tensorParallelSize": 8}
    body["spec"]["decode"] = {"replicas": 3, "tensorParallelSize": 8}
    _create(admin, body)

    def limited() -> dict[str, Any] | None:
        cond = _condition(_get(admin, namespace, "greedy"), "ScalingLimited")
        return cond if cond.get("status") == "True" else None

    cond = eventually("ScalingLimited", limited, 60)
    assert cond["reason"] == "InsufficientGPU"
    assert "Insufficient nvidia.com/gpu" in cond["message"] and "pending" in cond["message"]
    obj = _get(admin, namespace, "greedy")
    assert _condition(obj, "Ready")["status"] == "False"
    # The Event follows the status write.
    eventually("InsufficientGPU event", lambda: any(e.reason == "InsufficientGPU" and e.type == "Warning" for e in _events(admin, namespace, "greedy")), 15)


def test_changes_missed_while_operator_is_down_are_caught_up(admin: client.ApiClient, operator: OperatorProcess, namespace: str) -> None:
    # What a dropped watch amounts to: events the operator never saw. Level-based
    # reconciliation on resume must converge anyway.
    _create(admin, load_example(MOCK_EXAMPLE, namespace, "missed"))
    _ready(admin, namespace, "missed")
    operator.stop(signal.SIGKILL)
    try:
        _patch_spec(admin, namespace, "missed", {"decode": {"replicas": 2}})
        client.AppsV1Api(admin).delete_namespaced_deployment("missed-router", namespace)
    finally:
        operator.start()
    obj = _ready(admin, namespace, "missed")
    assert obj["status"]["decode"]["summary"] == "2/2"
    assert sorted(_deployments(admin, namespace, "missed")) == ["missed-decode", "missed-prefill", "missed-router"]


def test_the_operator_hosts_the_planner_of_an_autoscaled_resource(admin: client.ApiClient, operator: OperatorProcess, namespace: str) -> None:
    # The same identity (exactly RULES) runs the planner loop in a kopf daemon: no other host.
    body = load_example(MOCK_EXAMPLE, namespace, "planned")
    # No Prometheus there: the planner must hold (never scale on missing data) and say why.
    body["spec"]["autoscaling"].update(intervalSeconds=5, prometheusUrl="http://127.0.0.1:9")
    _create(admin, body)
    _ready(admin, namespace, "planned")
    planner = eventually("status.planner", lambda: (_get(admin, namespace, "planned")["status"] or {}).get("planner"), 60)
    assert planner["held"] is True and "metrics unavailable" in planner["reason"]
    obj = _get(admin, namespace, "planned")
    assert (obj["spec"]["prefill"]["replicas"], obj["spec"]["decode"]["replicas"]) == (1, 1)
    assert _condition(obj, "Ready")["status"] == "True"
    # Its hold is an Event on the resource, posted through kopf.
    eventually("PlannerHeld event", lambda: any(e.reason == "PlannerHeld" and e.type == "Warning" for e in _events(admin, namespace, "planned")), 30)


def test_namespace_scoped_operator_needs_no_cluster_wide_rights(
    admin: client.ApiClient, operator: OperatorProcess, namespace: str, kube_cluster: Any
) -> None:
    from operator_harness import bind_namespaced_operator

    other = f"{namespace}-other"
    client.CoreV1Api(admin).create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}})
    user = f"pdserve-operator-{namespace}"
    bind_namespaced_operator(admin, user, namespace)
    operator.stop()
    scoped = OperatorProcess(Path(kube_cluster.kubeconfig_for(user)), operator.log_path, operator.resync_seconds, namespaces=[namespace])
    try:
        scoped.start()
        _create(admin, load_example(MOCK_EXAMPLE, namespace, "scoped"))
        _create(admin, load_example(MOCK_EXAMPLE, other, "outside"))
        _ready(admin, namespace, "scoped")
        # The other namespace is not this operator's business.
        assert not _get(admin, other, "outside").get("status")
        assert not _deployments(admin, other, "outside")
    finally:
        scoped.stop()
        operator.start()
        # The cluster-wide operator, back, takes "outside" on (its finalizer): delete it while it runs.
        remove_services(client.CustomObjectsApi(admin), other, grace_s=5.0)
        client.CoreV1Api(admin).delete_namespace(other)
