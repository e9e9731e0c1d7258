"""The gated-model example through the operator on a real API server: the worker pods carry the
HF token Secret reference, the read-only cache PVC, pull secrets, RDMA and the non-root identity
as stored by the API server, with no drift against render()."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from operator_harness import GROUP, PLURAL, VERSION, OperatorProcess, eventually
from pdserve.api import DisaggregatedService
from pdserve.operator.drift import drift
from pdserve.operator.names import RenderOptions
from pdserve.operator.render import render

pytestmark = pytest.mark.controlplane
GATED = Path(__file__).resolve().parents[2] / "examples/gated-model-cache.yaml"


def _deployments(admin: client.ApiClient, ns: str, name: str) -> dict[str, dict[str, Any]]:
    items = client.AppsV1Api(admin).list_namespaced_deployment(ns, label_selector=f"pdserve.io/service={name}").items
    return {d.metadata.name: client.ApiClient().sanitize_for_serialization(d) for d in items}


def test_gated_example_children_as_stored(admin: client.ApiClient, operator: OperatorProcess, namespace: str) -> None:
    docs = {d["kind"]: d for d in yaml.safe_load_all(GATED.read_text())}
    core = client.CoreV1Api(admin)
    core.create_namespaced_secret(namespace, docs["Secret"])
    core.create_namespaced_persistent_volume_claim(namespace, docs["PersistentVolumeClaim"])
    body = docs["DisaggregatedService"]
    body["metadata"]["namespace"] = namespace
    client.CustomObjectsApi(admin).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)

    def three() -> dict[str, dict[str, Any]] | None:
        found = _deployments(admin, namespace, "llama-70b")
        return found if len(found) == 3 else None

    live = eventually("three Deployments", three, 60)
    stored = client.CustomObjectsApi(admin).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "llama-70b")
    # The operator under test runs with this image for routers (operator_harness).
    expected = {m["metadata"]["name"]: m for m in render(DisaggregatedService.from_body(stored), RenderOptions(pdserve_image="registry.invalid/pdserve:test")) if m["kind"] == "Deployment"}
    assert {n: drift(want, live[n]) for n, want in expected.items()} == {n: [] for n in expected}

    for role in ("prefill", "decode"):
        pod = live[f"llama-70b-{role}"]["spec"]["template"]["spec"]
        c = pod["containers"][0]
        env = {e["name"]: e for e in c["env"]}
        assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "hf-token", "key": "token"}
        assert env["HF_HUB_OFFLINE"]["value"] == "1" and env["UCX_TLS"]["value"] == "rc,cuda_copy,cuda_ipc"
        assert {"name": "model-cache", "persistentVolumeClaim": {"claimName": "hf-cache", "readOnly": True}} in pod["volumes"]
        assert pod["imagePullSecrets"] == [{"name": "regcred"}]
        assert c["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"] and pod["securityContext"]["runAsUser"] == 0
        assert c["resources"]["limits"]["rdma/ib"] == "1" and c["resources"]["limits"]["nvidia.com/gpu"] == "4"
        assert c["resources"]["requests"]["ephemeral-storage"] == "20Gi"
        assert c["image"] == "vllm/vllm-openai:v0.33.0"
    router = live["llama-70b-router"]["spec"]["template"]["spec"]
    assert {e["name"]: e for e in router["containers"][0]["env"]}["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "hf-token"
