"""spec.networkPolicy on a real API server: the operator (under exactly its RBAC) applies the
workers' NetworkPolicy, the server accepts it, and it admits what the render says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from operator_harness import GROUP, PLURAL, VERSION, OperatorProcess, eventually, load_example

from pdserve.api import DisaggregatedService
from pdserve.operator.render import render

pytestmark = pytest.mark.controlplane
MOCK_EXAMPLE = Path(__file__).resolve().parents[2] / "examples/mock-disagg.yaml"


def test_operator_applies_the_workers_network_policy(admin: client.ApiClient, operator: OperatorProcess, namespace: str) -> None:
    body = load_example(MOCK_EXAMPLE, namespace, "np")
    body["spec"]["autoscaling"]["enabled"] = False
    body["spec"]["networkPolicy"] = {"enabled": True, "metricsNamespaceLabels": {"kubernetes.io/metadata.name": "monitoring"}}
    client.CustomObjectsApi(admin).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    net = client.NetworkingV1Api(admin)

    def stored() -> dict[str, Any] | None:
        try:
            return admin.sanitize_for_serialization(net.read_namespaced_network_policy("np-workers", namespace))  # type: ignore[no-any-return]
        except client.ApiException as e:
            if e.status == 404:
                return None
            raise

    got = eventually("the workers' NetworkPolicy", stored, 60)
    obj = client.CustomObjectsApi(admin).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "np")
    (want,) = [m for m in render(DisaggregatedService.from_body(obj)) if m["kind"] == "NetworkPolicy"]
    assert got["spec"] == want["spec"]  # as rendered, after the server's validation and defaults
    assert got["metadata"]["ownerReferences"][0]["name"] == "np"  # deleted with the service
    spec = got["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    assert spec["podSelector"]["matchExpressions"] == [{"key": "pdserve.io/role", "operator": "In", "values": ["prefill", "decode"]}]
    router, peers, scrapers = spec["ingress"]
    assert router["from"] == [{"podSelector": {"matchLabels": {"pdserve.io/service": "np", "pdserve.io/role": "router"}}}]
    assert sorted(p["port"] for p in router["ports"]) == [5557, 8000]
    assert "ports" not in peers  # NIXL side channel and UCX's run-time TCP ports: all ports, from the service's workers only
    assert scrapers["ports"] == [{"port": 8000, "protocol": "TCP"}]
    assert scrapers["from"][0]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}
    # Off (the default): no policy rendered, nothing restricted.
    plain = load_example(MOCK_EXAMPLE, namespace, "plain")
    assert not [m for m in render(DisaggregatedService.from_body(plain)) if m["kind"] == "NetworkPolicy"]
