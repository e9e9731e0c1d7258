"""The router: Deployment, its Service (the user-facing endpoint) and the RBAC it needs to discover pods."""

from __future__ import annotations

from typing import Any

from pdserve.api import DisaggregatedService
from pdserve.router.shell.config import routing_flags
from pdserve.router.shell.cpus import processes_for_cpu
from pdserve.operator.names import HTTP_PORT, KV_EVENTS_PORT, RenderOptions, child_name, labels, owner_reference, selector_labels, service_name
from pdserve.operator.render_workers import HF_HOME, PDSERVE_UID, SMALL_CACHE, cache_volume, hf_env, tokenizer_args

ROUTER_HOME = "/home/pdserve"
ROUTER_ROLE_RULES: list[dict[str, Any]] = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]


def _meta(svc: DisaggregatedService, name: str) -> dict[str, Any]:
    return {"name": name, "namespace": svc.metadata.namespace, "labels": labels(svc, "router"), "ownerReferences": [owner_reference(svc)]}


def router_command(svc: DisaggregatedService) -> list[str]:
    return [
        "pdserve", "router",
        "--host", "0.0.0.0",
        "--port", str(HTTP_PORT),
        "--k8s-service", svc.metadata.name,
        "--k8s-namespace", svc.metadata.namespace,
        "--worker-port", str(HTTP_PORT),
        *routing_flags(svc.spec.router.routing(svc.spec.engine.block_size)),
        "--kv-events",
        "--kv-events-port", str(KV_EVENTS_PORT),
        # The router tokenizes as the workers do: the same --tokenizer / --tokenizer-mode (render_workers),
        # and preprocesses chats as the workers' vLLM release does.
        *tokenizer_args(svc),
        "--vllm-version", svc.spec.engine.vllm_version,
        # One event loop per whole CPU requested: a pod with a request but no limit has no cgroup
        # quota, and the router's own default would take every core of the node.
        "--processes", str(processes_for_cpu(router_resources(svc)["requests"].get("cpu"))),
        *tracing_args(svc),
    ]  # fmt: skip


def tracing_args(svc: DisaggregatedService) -> list[str]:
    t = svc.spec.tracing
    if not t.traces_url:
        return []
    return ["--otlp-traces-endpoint", t.traces_url, "--otlp-traces-sample-ratio", repr(t.sample_ratio)]


def router_resources(svc: DisaggregatedService) -> dict[str, dict[str, int | str]]:
    spec = svc.spec.router.resources
    return {"requests": {"cpu": "250m", "memory": "256Mi", **spec.requests}, "limits": {"memory": "1Gi", **spec.limits}}


def router_env(svc: DisaggregatedService) -> list[dict[str, Any]]:
    # The router loads the workers' tokenizer: same token Secret, HF cache layout under a writable HOME.
    env = [{"name": "HOME", "value": ROUTER_HOME}, *hf_env(svc)]
    ref = svc.spec.router.api_key_secret
    if ref is not None:  # read by the router as vLLM reads it (router/shell/auth.py): never on the command line
        env.append({"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}})
    return env


def _router_volumes(svc: DisaggregatedService) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, mounts): a writable HOME (the root filesystem is read-only) and the model cache
    when it can be shared (hostPath, or a read-only PVC, i.e. ReadOnlyMany), so a tokenizer given
    as a path in the cache resolves in the router as in the workers. Otherwise the cache is an
    emptyDir the router's tokenizer download lands in."""
    cache = svc.spec.model_cache
    shared = cache.host_path is not None or (cache.persistent_volume_claim is not None and cache.read_only)
    volumes: list[dict[str, Any]] = [{"name": "home", "emptyDir": {}}, cache_volume(svc) if shared else {"name": "model-cache", "emptyDir": {"sizeLimit": SMALL_CACHE}}]
    mounts: list[dict[str, Any]] = [{"name": "home", "mountPath": ROUTER_HOME}, {"name": "model-cache", "mountPath": HF_HOME, **({"readOnly": True} if cache.read_only else {})}]
    # A writable /tmp: under --processes N (a cpu request of 2 or more) the supervisor keeps the processes' shared
    # metrics and readiness markers in a temporary folder, and on the read-only root Python finds none ("No usable
    # temporary directory found in ['/tmp', '/var/tmp', '/usr/tmp', '/tmp']": the router exits at start).
    volumes.append({"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}})
    mounts.append({"name": "tmp", "mountPath": "/tmp"})
    return volumes, mounts


def router_deployment(svc: DisaggregatedService, options: RenderOptions) -> dict[str, Any]:
    command = router_command(svc)
    volumes, mounts = _router_volumes(svc)
    # Ready on /health (every process has a decode worker); alive on /live (the process answers). /health is 503
    # while the decode pool is empty (workers loading weights, scaled to zero): as the liveness probe it restarted a
    # healthy router every 30 s for as long as that lasted.
    ready = {"httpGet": {"path": "/health", "port": "http"}}
    live = {"httpGet": {"path": "/live", "port": "http"}}
    container: dict[str, Any] = {
        "name": "router",
        "image": svc.spec.router.image or options.pdserve_image,
        "command": command[:2],
        "args": command[2:],
        "env": router_env(svc),
        "ports": [{"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"}],
        "resources": router_resources(svc),
        "readinessProbe": {**ready, "periodSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {**live, "periodSeconds": 10, "failureThreshold": 3},
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", "5"]}}},
        "volumeMounts": mounts,
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
                    "volumes": volumes,
                    **({"imagePullSecrets": [{"name": s.name} for s in svc.spec.image_pull_secrets]} if svc.spec.image_pull_secrets else {}),
                    "terminationGracePeriodSeconds": 30,
                    "enableServiceLinks": False,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": PDSERVE_UID, "runAsGroup": PDSERVE_UID, "seccompProfile": {"type": "RuntimeDefault"}},
                },
            },
        },
    }


def router_service(svc: DisaggregatedService) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(svc, service_name(svc)),
        "spec": {"type": "ClusterIP", "selector": selector_labels(svc, "router"), "ports": [{"name": "http", "port": HTTP_PORT, "targetPort": "http", "protocol": "TCP"}]},
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
