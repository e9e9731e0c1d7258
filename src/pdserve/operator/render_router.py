"""The router: Deployment, its Service (the user-facing endpoint) and the RBAC it needs to discover pods."""

from __future__ import annotations

from typing import Any

from pdserve.api import DisaggregatedService
from pdserve.operator.names import HTTP_PORT, KV_EVENTS_PORT, RenderOptions, child_name, labels, owner_reference, selector_labels, service_name

ROUTER_ROLE_RULES: list[dict[str, Any]] = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]


def _meta(svc: DisaggregatedService, name: str) -> dict[str, Any]:
    return {"name": name, "namespace": svc.metadata.namespace, "labels": labels(svc, "router"), "ownerReferences": [owner_reference(svc)]}


def router_command(svc: DisaggregatedService) -> list[str]:
    spec = svc.spec
    args = [
        "pdserve", "router",
        "--port", str(HTTP_PORT),
        "--served-model-name", spec.served_name,
        "--k8s-service", svc.metadata.name,
        "--k8s-namespace", svc.metadata.namespace,
        "--policy", spec.router.policy,
        "--kv-events", f"zmq:{KV_EVENTS_PORT}",
    ]  # fmt: skip
    weights = spec.router.weights.model_dump(by_alias=True, exclude_none=True)
    for name, value in weights.items():
        args += ["--weight", f"{name}={value:g}"]
    return args


def router_deployment(svc: DisaggregatedService, options: RenderOptions) -> dict[str, Any]:
    command = router_command(svc)
    probe = {"httpGet": {"path": "/health", "port": "http"}}
    container = {
        "name": "router",
        "image": svc.spec.router.image or options.pdserve_image,
        "command": command[:2],
        "args": command[2:],
        "ports": [{"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        "readinessProbe": {**probe, "periodSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {**probe, "periodSeconds": 10, "failureThreshold": 3},
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", "5"]}}},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": True},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(svc, child_name(svc, "router")),
        "spec": {
            "replicas": svc.spec.router.replicas,
            "selector": {"matchLabels": selector_labels(svc, "router")},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "revisionHistoryLimit": 3,
            "template": {
                "metadata": {"labels": labels(svc, "router")},
                "spec": {
                    "serviceAccountName": child_name(svc, "router"),
                    "containers": [container],
                    "terminationGracePeriodSeconds": 30,
                    "enableServiceLinks": False,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 1000,
                        "runAsGroup": 1000,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                },
            },
        },
    }


def router_service(svc: DisaggregatedService) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(svc, service_name(svc)),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(svc, "router"),
            "ports": [{"name": "http", "port": HTTP_PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def router_rbac(svc: DisaggregatedService) -> list[dict[str, Any]]:
    name = child_name(svc, "router")
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(svc, name)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _meta(svc, name), "rules": ROUTER_ROLE_RULES},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _meta(svc, name),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": svc.metadata.namespace}],
        },
    ]
