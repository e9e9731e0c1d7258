"""The PodRunner's pure part: which process a pod's container becomes (no cluster needed)."""

from __future__ import annotations

from typing import Any

from podrunner import plan_pod


def _pod(containers: list[dict[str, Any]], phase: str = "Running", ip: str | None = "127.64.1.7", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "svc-decode-abc", "namespace": "ml", "uid": "u1", "labels": {"pdserve.io/role": "decode"}},
        "spec": {"containers": containers, "serviceAccountName": "svc-router", **spec},
        "status": {"phase": phase, "podIP": ip},
    }


WORKER = {
    "name": "engine",
    "command": ["pdserve", "worker"],
    "args": ["m", "--port", "8000", "--kv-events-config", '{"endpoint":"tcp://*:5557"}'],
    "env": [
        {"name": "PDSERVE_ROLE", "value": "decode"},
        {"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
    ],
}


def test_a_worker_container_becomes_a_worker_bound_to_the_pod_ip() -> None:
    (run,), skipped = plan_pod(_pod([WORKER], automountServiceAccountToken=False))
    assert not skipped
    assert run.argv == ["worker", "m", "--port", "8000", "--kv-events-config", '{"endpoint":"tcp://127.64.1.7:5557"}', "--host", "127.64.1.7"]
    assert run.env == {"PDSERVE_ROLE": "decode", "VLLM_NIXL_SIDE_CHANNEL_HOST": "127.64.1.7"}
    assert run.service_account is None, "the pod does not mount a token, so the process gets no API access"
    assert run.labels == {"pdserve.io/role": "decode"}
    assert run.key == "ml/svc-decode-abc/engine/u1"


def test_entrypoint_images_and_service_accounts() -> None:
    operator = {"name": "operator", "args": ["operator", "--liveness=http://0.0.0.0:8080/healthz", "--all-namespaces"]}
    (run,), _ = plan_pod(_pod([operator]))
    assert run.argv == ["operator", "--liveness=http://127.64.1.7:8080/healthz", "--all-namespaces"]
    assert run.service_account == "svc-router"


def test_pods_that_cannot_or_should_not_run() -> None:
    assert plan_pod(_pod([WORKER], phase="Pending")) == ([], [])
    assert plan_pod(_pod([WORKER], ip=None)) == ([], [])
    terminating = _pod([WORKER])
    terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert plan_pod(terminating) == ([], [])
    runs, skipped = plan_pod(_pod([{"name": "engine", "command": ["vllm", "serve"], "args": ["m"]}]))
    assert runs == [] and "not a pdserve container" in skipped[0].reason
