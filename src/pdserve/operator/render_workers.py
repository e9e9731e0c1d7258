"""Prefill and decode Deployments: `vllm serve` (or the mock `pdserve worker`) with a KV connector."""

from __future__ import annotations

import json
from typing import Any

from pdserve.api import DisaggregatedService
from pdserve.api.spec import GPU_RESOURCE, PoolSpec
from pdserve.api.vllm_versions import DEFAULT_VERSION, VERSIONS
from pdserve.operator.names import HTTP_PORT, KV_EVENTS_PORT, RenderOptions, Role, child_name, labels, owner_reference, selector_labels

# The vllm/vllm-openai image has no USER line (it runs as root, WORKDIR /vllm-workspace; vLLM's
# docker/Dockerfile, target vllm-openai). As uid 1000 there is no passwd entry, so
# getpass.getuser() (torch inductor's cache dir, via pwd.getpwuid) raises KeyError; it reads
# LOGNAME/USER first, so setting them, a writable HOME and a writable working directory is what
# vLLM's own non-root wrapper does (docker/entrypoints/vllm-nonroot-entrypoint.sh).
HOME_DIR = "/home/vllm"
RUN_USER_NAME = "vllm"
# The model cache volume is mounted at HF_HOME: its root holds hub/models--org--name/...
HF_HOME = "/cache/huggingface"
# Real vLLM downloads and loads weights before /health answers: allow 30 minutes.
VLLM_STARTUP_BUDGET_S = 1800
MOCK_STARTUP_BUDGET_S = 120
# preStop keeps the pod serving while endpoints drop it, then SIGTERM lets in-flight requests finish.
DRAIN_SECONDS = 15
VLLM_GRACE_SECONDS = 120
MOCK_GRACE_SECONDS = 30
RUN_AS_USER = 1000
# The pdserve image's own user (Dockerfile: useradd --uid 10001, HOME=/tmp): mock workers and routers run as it.
PDSERVE_UID = 10001
EPHEMERAL = "ephemeral-storage"
# An emptyDir cache that only ever holds a tokenizer (mock workers, the router).
SMALL_CACHE = "2Gi"


def _compact(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def kv_transfer_config(connector: str, role: Role = "prefill", version: str = DEFAULT_VERSION) -> str:
    """The connector's kv_role comes from the version table: NIXL is symmetric (kv_both),
    Mooncake and LMCache P/D want kv_producer on prefill and kv_consumer on decode."""
    conn = VERSIONS[version].connectors[connector]
    return _compact({"kv_connector": connector, "kv_role": conn.prefill_role if role == "prefill" else conn.decode_role})


def kv_events_config() -> str:
    return _compact({"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": f"tcp://*:{KV_EVENTS_PORT}"})


def engine_command(svc: DisaggregatedService, role: Role, pool: PoolSpec) -> list[str]:
    spec = svc.spec
    mock = spec.engine.kind == "mock"
    version = spec.engine.version
    head = ["pdserve", "worker"] if mock else ["vllm", "serve"]
    args = [
        spec.model.name,
        "--port", str(HTTP_PORT),
        "--served-model-name", spec.served_name,
        "--tensor-parallel-size", str(pool.tensor_parallel_size),
        # One block size for both pools: NIXL reads whole remote blocks, and the router hashes
        # prompts in blocks of the same size (render_router passes it too).
        "--block-size", str(spec.engine.block_size),
        *tokenizer_args(svc),
        "--enable-prefix-caching",
        "--kv-transfer-config", kv_transfer_config(spec.kv_connector.type, role, version.version),
        "--kv-events-config", kv_events_config(),
        *version.extra_args,
    ]  # fmt: skip
    if spec.tracing.traces_url:
        args += ["--otlp-traces-endpoint", spec.tracing.traces_url]
    if mock:
        # The mock follows the defaults (hashing, events, P/D pairing) of the release it stands in for;
        # it tokenizes as model.tokenizerMode says (`mock`: the hash-word tokenizer, nothing to download).
        args += ["--mock-vllm-version", version.version, "--mock-profile", spec.engine.mock_profile, "--mock-speedup", _number(spec.engine.mock_speedup)]
    return head + args + list(spec.engine.args) + list(pool.extra_args)


def tokenizer_args(svc: DisaggregatedService) -> list[str]:
    """vLLM's own flags, given identically to both pools and the router."""
    model = svc.spec.model
    return ["--tokenizer", model.tokenizer_source, "--tokenizer-mode", model.tokenizer_mode]


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


def _resources(svc: DisaggregatedService, pool: PoolSpec) -> dict[str, dict[str, str]]:
    spec = svc.spec
    extended = {GPU_RESOURCE: str(pool.tensor_parallel_size)}
    if spec.rdma.enabled:
        # Extended resources: requests must equal limits.
        extended |= {k: str(v) for k, v in spec.rdma.resources.items()}
    cache = spec.model_cache
    # The scheduler must find a node with room for the weights (emptyDir cache) or at least for
    # HOME and the compile caches; the user's own ephemeral-storage request wins. Mock workers
    # load no weights: they ask for nothing.
    requests = {} if spec.engine.kind == "mock" else {EPHEMERAL: str(cache.size if cache.ephemeral else cache.scratch)}
    requests |= {k: str(v) for k, v in pool.resources.requests.items()}
    limits = {k: str(v) for k, v in pool.resources.limits.items()}
    return {"requests": requests | extended, "limits": limits | extended}


def hf_env(svc: DisaggregatedService) -> list[dict[str, Any]]:
    """Hugging Face settings shared by the workers and the router (same token, same cache layout)."""
    spec = svc.spec
    env: list[dict[str, Any]] = [{"name": "HF_HOME", "value": HF_HOME}]
    if spec.model.token_secret is not None:
        ref = spec.model.token_secret
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}})
    if spec.model_cache.read_only:
        # A read-only cache cannot take huggingface_hub's lock files: load from it without asking the hub.
        env.append({"name": "HF_HUB_OFFLINE", "value": "1"})
    return env


def _env(svc: DisaggregatedService, role: Role) -> list[dict[str, Any]]:
    spec = svc.spec
    version = spec.engine.version
    conn = version.connectors[spec.kv_connector.type]
    env: list[dict[str, Any]] = [
        {"name": "PDSERVE_ROLE", "value": role},
        {"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": conn.port_env, "value": str(spec.kv_connector.side_channel_port)},
        # vLLM seeds its prefix-cache hash chain from PYTHONHASHSEED when set (else a fixed
        # or random seed, by version and algorithm): a fixed seed keeps a pod's block hashes
        # stable across restarts, so the router's BlockRemoved bookkeeping stays valid.
        {"name": "PYTHONHASHSEED", "value": "0"},
        {"name": "HOME", "value": HOME_DIR},
        {"name": "USER", "value": RUN_USER_NAME},
        {"name": "LOGNAME", "value": RUN_USER_NAME},
        *hf_env(svc),
        *({"name": k, "value": v} for k, v in sorted(version.extra_env.items())),
    ]
    if spec.tracing.traces_url:
        # vLLM's exporter defaults to gRPC; one OTLP/HTTP endpoint serves the router and both pools.
        # Parent-based sampling: the router's decision holds, the ratio applies to direct requests.
        env += [{"name": "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "value": "http/protobuf"},
                {"name": "OTEL_SERVICE_NAME", "value": f"{svc.metadata.name}-{role}"},
                {"name": "OTEL_TRACES_SAMPLER", "value": "parentbased_traceidratio"},
                {"name": "OTEL_TRACES_SAMPLER_ARG", "value": repr(spec.tracing.sample_ratio)}]
    if spec.rdma.enabled:
        if spec.rdma.ucx_tls:
            env.append({"name": "UCX_TLS", "value": spec.rdma.ucx_tls})
        if spec.rdma.ucx_net_devices:
            env.append({"name": "UCX_NET_DEVICES", "value": spec.rdma.ucx_net_devices})
    # The user's entries come last: Kubernetes lets a later entry of the same name win.
    return env + [e.to_k8s() for e in spec.engine.env]


def _ports(svc: DisaggregatedService) -> list[dict[str, Any]]:
    spec = svc.spec
    ports = spec.engine.version.side_channel_ports(spec.kv_connector.type, spec.kv_connector.side_channel_port, spec.prefill.tensor_parallel_size, spec.decode.tensor_parallel_size)
    side = [{"name": "side-channel" + (f"-{i}" if i else ""), "containerPort": p, "protocol": "TCP"} for i, p in enumerate(ports)]
    return [{"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"}, *side, {"name": "kv-events", "containerPort": KV_EVENTS_PORT, "protocol": "TCP"}]


def cache_volume(svc: DisaggregatedService) -> dict[str, Any]:
    cache = svc.spec.model_cache
    if cache.persistent_volume_claim:
        return {"name": "model-cache", "persistentVolumeClaim": {"claimName": cache.persistent_volume_claim, "readOnly": cache.read_only}}
    if cache.host_path:
        return {"name": "model-cache", "hostPath": {"path": cache.host_path, "type": "DirectoryOrCreate"}}
    # Mock workers download at most a tokenizer.
    return {"name": "model-cache", "emptyDir": {"sizeLimit": SMALL_CACHE if svc.spec.engine.kind == "mock" else str(cache.size)}}


def _security(svc: DisaggregatedService) -> tuple[dict[str, Any], dict[str, Any]]:
    """(pod, container) security contexts: uid 1000 for vLLM (10001, the image's user, for the mock), root only when asked for."""
    spec = svc.spec
    seccomp = {"seccompProfile": {"type": "RuntimeDefault"}}
    if spec.engine.run_as_root:
        pod: dict[str, Any] = {"runAsNonRoot": False, "runAsUser": 0, "runAsGroup": 0, **seccomp}
    else:
        uid = PDSERVE_UID if spec.engine.kind == "mock" else RUN_AS_USER
        pod = {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": uid, "fsGroup": uid, **seccomp}
    caps: dict[str, Any] = {"drop": ["ALL"]}
    if spec.rdma.enabled:
        # RDMA registers (pins) GPU and host memory: needs IPC_LOCK past the memlock limit.
        caps["add"] = ["IPC_LOCK"]
    return pod, {"allowPrivilegeEscalation": False, "capabilities": caps}


def _probe(path: str, period: int, failures: int, timeout: int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": "http"}, "periodSeconds": period, "failureThreshold": failures, "timeoutSeconds": timeout}


def worker_deployment(svc: DisaggregatedService, role: Role, options: RenderOptions) -> dict[str, Any]:
    spec = svc.spec
    pool = spec.prefill if role == "prefill" else spec.decode
    mock = spec.engine.kind == "mock"
    image = spec.engine.image or (options.pdserve_image if mock else options.vllm_image or spec.engine.version.image)
    startup_budget = MOCK_STARTUP_BUDGET_S if mock else VLLM_STARTUP_BUDGET_S
    startup_period = 2 if mock else 10
    command = engine_command(svc, role, pool)
    pod_security, container_security = _security(svc)
    container: dict[str, Any] = {
        "name": "engine",
        "image": image,
        "command": command[:2],
        "args": command[2:],
        # The image's WORKDIR is root's; vLLM probes relative paths from the working directory.
        "workingDir": HOME_DIR,
        "env": _env(svc, role),
        **({"envFrom": [e.model_dump(by_alias=True, exclude_none=True) for e in spec.engine.env_from]} if spec.engine.env_from else {}),
        "ports": _ports(svc),
        "resources": _resources(svc, pool),
        "startupProbe": _probe("/health", startup_period, startup_budget // startup_period, 5),
        "readinessProbe": _probe("/health", 5, 3, 3),
        "livenessProbe": _probe("/health", 10, 3, 5),
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", str(DRAIN_SECONDS)]}}},
        "volumeMounts": [
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "home", "mountPath": HOME_DIR},
            {"name": "model-cache", "mountPath": HF_HOME, **({"readOnly": True} if spec.model_cache.read_only else {})},
        ],
        "securityContext": container_security,
    }
    pod_spec: dict[str, Any] = {
        "containers": [container],
        "terminationGracePeriodSeconds": MOCK_GRACE_SECONDS if mock else VLLM_GRACE_SECONDS,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod_security,
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}, {"name": "home", "emptyDir": {}}, cache_volume(svc)],
    }
    if spec.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": s.name} for s in spec.image_pull_secrets]
    if pool.node_selector:
        pod_spec["nodeSelector"] = dict(pool.node_selector)
    if pool.tolerations:
        pod_spec["tolerations"] = [t.model_dump(by_alias=True, exclude_none=True) for t in pool.tolerations]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": child_name(svc, role), "namespace": svc.metadata.namespace, "labels": labels(svc, role), "ownerReferences": [owner_reference(svc)]},
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
