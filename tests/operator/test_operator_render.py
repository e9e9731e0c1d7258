"""Rendered children: exact engine arguments, env, ports, probes, GPU requests; valid Kubernetes objects."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from pdserve.api import DisaggregatedService
from pdserve.operator.names import RenderOptions
from pdserve.operator.render import render
from pdserve.router.shell import cli as router_cli  # the project's own modules: an import error fails, never skips
from pdserve.worker import cli as worker_cli

ROOT = Path(__file__).resolve().parents[2]


def _svc(path: str = "examples/llama-8b-disagg.yaml", **spec_overrides: Any) -> DisaggregatedService:
    doc = next(d for d in yaml.safe_load_all((ROOT / path).read_text()) if d["kind"] == "DisaggregatedService")
    doc["metadata"].update(namespace="llm", uid="1234-uid", generation=3)
    doc["spec"].update(spec_overrides)
    return DisaggregatedService.from_body(doc)


def _by(manifests: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [m for m in manifests if m["kind"] == kind and m["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def _engine(manifests: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return _by(manifests, "Deployment", name)["spec"]["template"]["spec"]["containers"][0]


def test_children_and_order() -> None:
    out = render(_svc())
    assert [(m["kind"], m["metadata"]["name"]) for m in out] == [
        ("ServiceAccount", "llama-8b-router"),
        ("Role", "llama-8b-router"),
        ("RoleBinding", "llama-8b-router"),
        ("Deployment", "llama-8b-prefill"),
        ("Deployment", "llama-8b-decode"),
        ("Deployment", "llama-8b-router"),
        ("Service", "llama-8b"),
    ]
    for m in out:
        assert m["metadata"]["namespace"] == "llm"
        assert m["metadata"]["ownerReferences"] == [
            {"apiVersion": "pdserve.io/v1alpha1", "kind": "DisaggregatedService", "name": "llama-8b", "uid": "1234-uid", "controller": True, "blockOwnerDeletion": True}
        ]
        assert m["metadata"]["labels"]["pdserve.io/service"] == "llama-8b"


def test_vllm_prefill_exact_command() -> None:
    c = _engine(render(_svc()), "llama-8b-prefill")
    assert c["image"] == "vllm/vllm-openai:v0.33.0"
    assert c["command"] == ["vllm", "serve"]
    assert c["args"] == [
        "meta-llama/Llama-3.1-8B-Instruct",
        "--port", "8000",
        "--served-model-name", "llama-8b",
        "--tensor-parallel-size", "1",
        "--block-size", "16",
        "--tokenizer", "meta-llama/Llama-3.1-8B-Instruct",
        "--tokenizer-mode", "auto",
        "--enable-prefix-caching",
        "--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_both"}',
        "--kv-events-config", '{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557"}',
        "--max-model-len", "16384",
        "--max-num-batched-tokens", "16384",
    ]  # fmt: skip
    assert json.loads(c["args"][c["args"].index("--kv-transfer-config") + 1]) == {"kv_connector": "NixlConnector", "kv_role": "kv_both"}


def test_decode_gets_its_own_extra_args_and_tp() -> None:
    svc = _svc(decode={"replicas": 3, "tensorParallelSize": 4, "extraArgs": ["--max-num-seqs", "64"]})
    out = render(svc)
    c = _engine(out, "llama-8b-decode")
    assert c["args"][c["args"].index("--tensor-parallel-size") + 1] == "4"
    assert c["args"][-2:] == ["--max-num-seqs", "64"]
    assert c["resources"]["requests"]["nvidia.com/gpu"] == "4"
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert _by(out, "Deployment", "llama-8b-decode")["spec"]["replicas"] == 3


@pytest.mark.parametrize(
    ("connector", "prefill_role", "decode_role", "port_env"),
    [
        ("NixlConnector", "kv_both", "kv_both", "VLLM_NIXL_SIDE_CHANNEL_PORT"),
        ("LMCacheConnectorV1", "kv_producer", "kv_consumer", "VLLM_NIXL_SIDE_CHANNEL_PORT"),
        ("MooncakeConnector", "kv_producer", "kv_consumer", "VLLM_MOONCAKE_BOOTSTRAP_PORT"),
    ],
)
def test_chosen_connector(connector: str, prefill_role: str, decode_role: str, port_env: str) -> None:
    out = render(_svc(kvConnector={"type": connector, "sideChannelPort": 6100}))
    for name, role in (("llama-8b-prefill", prefill_role), ("llama-8b-decode", decode_role)):
        c = _engine(out, name)
        cfg = json.loads(c["args"][c["args"].index("--kv-transfer-config") + 1])
        assert cfg == {"kv_connector": connector, "kv_role": role}
        assert {e["name"]: e.get("value") for e in c["env"]}[port_env] == "6100"


def test_env_ports_probes_resources() -> None:
    out = render(_svc())
    c = _engine(out, "llama-8b-prefill")
    env = {e["name"]: e for e in c["env"]}
    assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == {"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    assert env["VLLM_NIXL_SIDE_CHANNEL_PORT"]["value"] == "5600"
    assert env["VLLM_LOGGING_LEVEL"]["value"] == "INFO"
    assert env["HF_HOME"]["value"] == "/cache/huggingface"
    assert env["PDSERVE_ROLE"]["value"] == "prefill"
    assert [(p["name"], p["containerPort"]) for p in c["ports"]] == [("http", 8000), ("side-channel", 5600), ("kv-events", 5557)]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": "/health", "port": "http"}
    # vLLM gets at least 30 minutes to load weights before liveness applies.
    assert c["startupProbe"]["periodSeconds"] * c["startupProbe"]["failureThreshold"] >= 1800
    assert c["resources"] == {
        # No cache volume in this example: the per-pod emptyDir cache is requested as ephemeral storage.
        "requests": {"ephemeral-storage": "100Gi", "cpu": "8", "memory": "48Gi", "nvidia.com/gpu": "1"},
        "limits": {"memory": "64Gi", "nvidia.com/gpu": "1"},
    }
    pod = _by(out, "Deployment", "llama-8b-prefill")["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in pod["volumes"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in c["volumeMounts"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["lifecycle"]["preStop"]["exec"]["command"][0] == "sleep"
    assert pod["terminationGracePeriodSeconds"] > int(c["lifecycle"]["preStop"]["exec"]["command"][1])
    labels = _by(out, "Deployment", "llama-8b-prefill")["spec"]["template"]["metadata"]["labels"]
    assert labels["pdserve.io/service"] == "llama-8b" and labels["pdserve.io/role"] == "prefill"


def test_mock_engine_same_args_plus_mock_flags() -> None:
    svc = _svc("examples/mock-disagg.yaml")
    out = render(svc, RenderOptions(pdserve_image="registry.local/pdserve:dev"))
    c = _engine(out, "mock-llama-decode")
    assert c["image"] == "registry.local/pdserve:dev"
    assert c["command"] == ["pdserve", "worker"]
    assert c["args"] == [
        "meta-llama/Llama-3.1-8B-Instruct",
        "--port", "8000",
        "--served-model-name", "mock-llama",
        "--tensor-parallel-size", "1",
        "--block-size", "16",
        "--tokenizer", "meta-llama/Llama-3.1-8B-Instruct",
        "--tokenizer-mode", "mock",
        "--enable-prefix-caching",
        "--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_both"}',
        "--kv-events-config", '{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557"}',
        "--mock-vllm-version", "0.33.0",
        "--mock-profile", "llama-3.1-8b-h100",
        "--mock-speedup", "10",
    ]  # fmt: skip
    assert c["startupProbe"]["periodSeconds"] * c["startupProbe"]["failureThreshold"] < 600


def test_router_deployment_service_and_rbac() -> None:
    out = render(_svc())
    dep = _by(out, "Deployment", "llama-8b-router")
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["command"] == ["pdserve", "router"]
    assert c["args"] == [
        "--host", "0.0.0.0", "--port", "8000",
        "--k8s-service", "llama-8b", "--k8s-namespace", "llm", "--worker-port", "8000",
        "--policy", "kv_aware", "--block-size", "16", "--kv-events", "--kv-events-port", "5557",
        "--tokenizer", "meta-llama/Llama-3.1-8B-Instruct", "--tokenizer-mode", "auto", "--vllm-version", "0.33.0",
        "--processes", "1",  # the default 250m CPU request
    ]  # fmt: skip
    assert c["env"] == [
        {"name": "HOME", "value": "/home/pdserve"},
        {"name": "HF_HOME", "value": "/cache/huggingface"},
    ]
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == "llama-8b-router"
    svc = _by(out, "Service", "llama-8b")
    assert svc["spec"]["selector"] == {"pdserve.io/service": "llama-8b", "pdserve.io/role": "router"}
    assert svc["spec"]["ports"][0]["port"] == 8000
    role = _by(out, "Role", "llama-8b-router")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    binding = _by(out, "RoleBinding", "llama-8b-router")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "llama-8b-router", "namespace": "llm"}]


def test_router_probes_and_its_writable_tmp() -> None:
    c = _by(render(_svc()), "Deployment", "llama-8b-router")["spec"]["template"]["spec"]
    (router,) = c["containers"]
    # Ready once every router process has a decode worker; alive whenever it answers (an empty decode pool while
    # weights load or after a scale to zero is not a reason to restart the router).
    assert router["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert router["livenessProbe"]["httpGet"] == {"path": "/live", "port": "http"}
    # The root is read-only; --processes N keeps its shared folder under Python's temporary directory: /tmp.
    assert router["securityContext"]["readOnlyRootFilesystem"] is True
    tmp = [m for m in router["volumeMounts"] if m["mountPath"] == "/tmp"]
    assert len(tmp) == 1 and not tmp[0].get("readOnly")
    assert {"name": tmp[0]["name"], "emptyDir": {"sizeLimit": "64Mi"}} in c["volumes"]


def test_router_args_parse_with_the_real_router_cli() -> None:
    c = _engine(render(_svc()), "llama-8b-router")
    args = router_cli.build_parser().parse_args(c["args"])
    assert (args.k8s_service, args.k8s_namespace, args.policy, args.kv_events, args.port) == ("llama-8b", "llm", "kv_aware", True, 8000)


def test_worker_args_parse_with_the_mock_worker_cli() -> None:
    c = _engine(render(_svc("examples/mock-disagg.yaml")), "mock-llama-prefill")
    args = worker_cli.build_parser().parse_args(c["args"])
    assert args.model == "meta-llama/Llama-3.1-8B-Instruct" and args.mock_speedup == 10


def test_render_is_pure_and_deterministic() -> None:
    svc = _svc()
    assert render(svc) == render(svc)
    assert json.dumps(render(svc), sort_keys=True) == json.dumps(render(_svc()), sort_keys=True)


@pytest.mark.parametrize("example", ["examples/llama-8b-disagg.yaml", "examples/mock-disagg.yaml", "examples/gated-model-cache.yaml"])
def test_rendered_objects_validate_against_kubernetes_schema(example: str) -> None:
    for manifest in render(_svc(example)):
        kubernetes_validate.validate(manifest, "1.33", strict=True)


@pytest.mark.parametrize(("cpu", "processes"), [(None, 1), ("500m", 1), ("2", 2), (4, 4), ("2500m", 2)])
def test_router_processes_follow_its_cpu_request(cpu: str | int | None, processes: int) -> None:
    router = {"resources": {"requests": {"cpu": cpu}}} if cpu is not None else {}
    c = _engine(render(_svc(router=router)), "llama-8b-router")
    args = router_cli.build_parser().parse_args(c["args"])
    assert args.processes == processes
    assert c["resources"]["requests"]["cpu"] == (cpu if cpu is not None else "250m")
    assert c["resources"]["requests"]["memory"] == "256Mi" and c["resources"]["limits"]["memory"] == "1Gi"


def test_router_api_key_comes_from_the_secret_as_vllm_api_key() -> None:
    c = _engine(render(_svc(router={"apiKeySecret": {"name": "llm-keys", "key": "router"}})), "llama-8b-router")
    assert {"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": {"name": "llm-keys", "key": "router"}}} in c["env"]
    assert not any("key" in a.lower() for a in c["args"])  # never on the command line (visible in ps)
    plain = _engine(render(_svc()), "llama-8b-router")
    assert not any(e["name"] == "VLLM_API_KEY" for e in plain["env"])


def test_network_policy_is_opt_in_and_valid() -> None:
    assert not [m for m in render(_svc()) if m["kind"] == "NetworkPolicy"]
    out = render(_svc(networkPolicy={"enabled": True}))
    pol = _by(out, "NetworkPolicy", "llama-8b-workers")
    kubernetes_validate.validate(pol, "1.33", strict=True)
    assert out[-1] is pol  # after the pods it protects: applying it never blocks their start
    scrapers = pol["spec"]["ingress"][2]["from"][0]
    assert scrapers == {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}, "namespaceSelector": {"matchLabels": {}}}
