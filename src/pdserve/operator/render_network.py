"""The workers' NetworkPolicy (``spec.networkPolicy.enabled``): who may connect to prefill and decode pods.

Admitted, and nothing else (ingress; egress is left open):
- this service's router pods: the HTTP port (completions, /metrics scrapes for load,
  /v1/models) and the KV-events port (the router's ZMQ SUB connects to each worker's PUB);
- this service's workers, on every TCP port: the NIXL side channel (``side_channel_port``,
  plus one per TP rank on vLLM 0.11) and the KV transfer itself, which over UCX's TCP
  transport uses ports the peers pick at run time, so no port list can cover it;
- the metrics scrapers (``metricsPodLabels`` in ``metricsNamespaceLabels`` namespaces,
  default Prometheus Operator's Prometheus pods anywhere): the HTTP port, where /metrics is.
Kubelet probes come from the node and are not subject to pod NetworkPolicies on common
CNIs; the router pods keep their own (open) ingress, as clients must reach them.
"""

from __future__ import annotations

from typing import Any

from pdserve.api import DisaggregatedService
from pdserve.kube.constants import ROLE_LABEL, SERVICE_LABEL
from pdserve.operator.names import HTTP_PORT, KV_EVENTS_PORT, labels, owner_reference


def worker_network_policy(svc: DisaggregatedService) -> list[dict[str, Any]]:
    spec = svc.spec.network_policy
    if not spec.enabled:
        return []
    name = svc.metadata.name
    workers = {"matchLabels": {SERVICE_LABEL: name},
               "matchExpressions": [{"key": ROLE_LABEL, "operator": "In", "values": ["prefill", "decode"]}]}
    router = {"matchLabels": {SERVICE_LABEL: name, ROLE_LABEL: "router"}}
    http = {"protocol": "TCP", "port": HTTP_PORT}
    scrapers: dict[str, Any] = {"podSelector": {"matchLabels": dict(spec.metrics_pod_labels)},
                                "namespaceSelector": {"matchLabels": dict(spec.metrics_namespace_labels)}}
    return [{
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": f"{name}-workers", "namespace": svc.metadata.namespace,
                     "labels": {**{k: v for k, v in labels(svc, "prefill").items() if k != ROLE_LABEL},
                                "app.kubernetes.io/component": "workers"},
                     "ownerReferences": [owner_reference(svc)]},
        "spec": {
            "podSelector": workers,
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"podSelector": router}], "ports": [http, {"protocol": "TCP", "port": KV_EVENTS_PORT}]},
                {"from": [{"podSelector": workers}]},  # every port: NIXL side channel + UCX's run-time TCP ports
                {"from": [scrapers], "ports": [http]},
            ],
        },
    }]
