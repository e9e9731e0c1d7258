"""Prefill and decode Deployments: `vllm serve` (or the mock `pdserve worker`) with a KV connector."""

from __future__ import annotations

import json
from typing import Any

from pdserve.api import DisaggregatedService
from pdserve.api.spec import GPU_RESOURCE, PoolSpec
from pdserve.operator.names import HTTP_PORT, KV_EVENTS_PORT, RenderOptions, Role, child_name, labels, owner_reference, selector_labels

CACHE_DIR = "/cache"
# Real vLLM downloads and loads weights before /health answers: allow 30 minutes.
VLLM_STARTUP_BUDGET_S = 1800
MOCK_STARTUP_BUDGET_S = 120
# preStop keeps the pod serving while endpoints drop it, then SIGTERM lets in-flight requests finish.
DRAIN_SECONDS = 15
VLLM_GRACE_SECONDS = 120
MOCK_GRACE_SECONDS = 30
RUN_AS_USER = 1000


def _compact(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def kv_transfer_config(connector: str) -> str:
    return _compact({"kv_connector": connector, "kv_role": "kv_both"})


def kv_events_config() -> str:
    return _compact({"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": f"tcp://*:{KV_EVENTS_PORT}"})


def engine_command(svc: DisaggregatedService, role: Role, pool: PoolSpec) -> list[str]:
    spec = svc.spec
    mock = spec.engine.kind == "mock"
    head = ["pdserve", "worker"] if mock else ["vllm", "serve"]
    args = [
        spec.model.name,
        "--port", str(HTTP_PORT),
        "--served-model-name", spec.served_name,
        "--tensor-parallel-size", str(pool.tensor_parallel_size),
        "--enable-prefix-caching",
        "--kv-transfer-config", kv_transfer_config(spec.kv_connector.type),
        "--kv-events-config", kv_events_config(),
    ]  # fmt: skip
    if mock:
        args += ["--mock-profile", spec.engine.mock_profile, "--mock-speedup", _number(spec.engine.mock_speedup)]
    return head + args + list(spec.engine.args) + list(pool.extra_args)


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


def _quantities(values: dict[str, int | str], gpus: int) -> dict[str, str]:
    return {**{k: str(v) for k, v in values.items()}, GPU_RESOURCE: str(gpus)}


def _env(svc: DisaggregatedService, role: Role) -> list[dict[str, Any]]:
    spec = svc.spec
    env: list[dict[str, Any]] = [
        {"name": "PDSERVE_ROLE", "value": role},
        {"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "VLLM_NIXL_SIDE_CHANNEL_PORT", "value": str(spec.kv_connector.side_channel_port)},
        # vLLM seeds its prefix-cache hash chain from PYTHONHASHSEED (random when unset);
        # a fixed seed makes the pods' block hashes match the router's (pdserve.common.hashing).
        {"name": "PYTHONHASHSEED", "value": "0"},
        # Non-root user: keep every cache on the writable volume.
        {"name": "HOME", "value": CACHE_DIR},
        {"name": "HF_HOME", "value": f"{CACHE_DIR}/huggingface"},
    ]
    return env + [{"name": e.name, "value": e.value} for e in spec.engine.env]


def _probe(path: str, period: int, failures: int, timeout: int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": "http"}, "periodSeconds": period, "failureThreshold": failures, "timeoutSeconds": timeout}


def worker_deployment(svc: DisaggregatedService, role: Role, options: RenderOptions) -> dict[str, Any]:
    spec = svc.spec
    pool = spec.prefill if role == "prefill" else spec.decode
    mock = spec.engine.kind == "mock"
    image = spec.engine.image or (options.pdserve_image if mock else options.vllm_image)
    startup_budget = MOCK_STARTUP_BUDGET_S if mock else VLLM_STARTUP_BUDGET_S
    startup_period = 2 if mock else 10
    command = engine_command(svc, role, pool)
    gpus = pool.tensor_parallel_size
    container: dict[str, Any] = {
        "name": "engine",
        "image": image,
        "command": command[:2],
        "args": command[2:],
        "env": _env(svc, role),
        "ports": [
            {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
            {"name": "side-channel", "containerPort": spec.kv_connector.side_channel_port, "protocol": "TCP"},
            {"name": "kv-events", "containerPort": KV_EVENTS_PORT, "protocol": "TCP"},
        ],
        "resources": {
            "requests": _quantities(pool.resources.requests, gpus),
            "limits": _quantities(pool.resources.limits, gpus),
        },
        "startupProbe": _probe("/health", startup_period, startup_budget // startup_period, 5),
        "readinessProbe": _probe("/health", 5, 3, 3),
        "livenessProbe": _probe("/health", 10, 3, 5),
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", str(DRAIN_SECONDS)]}}},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}, {"name": "cache", "mountPath": CACHE_DIR}],
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    pod_spec: dict[str, Any] = {
        "containers": [container],
        "terminationGracePeriodSeconds": MOCK_GRACE_SECONDS if mock else VLLM_GRACE_SECONDS,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_USER,
            "runAsGroup": RUN_AS_USER,
            "fsGroup": RUN_AS_USER,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumes": [
            {"name": "dshm", "emptyDir": {"medium": "Memory"}},
            {"name": "cache", "emptyDir": {}},
        ],
    }
    if pool.node_selector:
        pod_spec["nodeSelector"] = dict(pool.node_selector)
    if pool.tolerations:
        pod_spec["tolerations"] = [t.model_dump(by_alias=True, exclude_none=True) for t in pool.tolerations]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": child_name(svc, role),
            "namespace": svc.metadata.namespace,
            "labels": labels(svc, role),
            "ownerReferences": [owner_reference(svc)],
        },
        "spec": {
            "replicas": pool.replicas,
            "selector": {"matchLabels": selector_labels(svc, role)},
            # GPU pools rarely have a spare GPU to surge onto: replace in place.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "progressDeadlineSeconds": startup_budget + 60,
            "revisionHistoryLimit": 3,
            "template": {"metadata": {"labels": labels(svc, role)}, "spec": pod_spec},
        },
    }
