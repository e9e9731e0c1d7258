"""Invalid DisaggregatedServices, each with the field its error must name.

Shared by the pydantic tests (tests/api) and the real API server tests
(tests/operator/test_controlplane_validation.py), so both layers refuse the same things."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


def valid_manifest(name: str = "ok", namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "pdserve.io/v1alpha1",
        "kind": "DisaggregatedService",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
            "engine": {"kind": "mock"},
            "prefill": {"replicas": 1, "tensorParallelSize": 1},
            "decode": {"replicas": 1, "tensorParallelSize": 1},
            "autoscaling": {"enabled": False},
        },
    }


@dataclass(frozen=True)
class Invalid:
    id: str
    mutate: Callable[[dict[str, Any]], None]
    field: str  # the path the API server's message must contain
    pydantic_field: str  # what pydantic's message names (its own path syntax)

    def manifest(self, name: str, namespace: str = "default") -> dict[str, Any]:
        m = copy.deepcopy(valid_manifest(name, namespace))
        self.mutate(m)
        return m


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(m: dict[str, Any]) -> None:
        node = m
        *parents, last = path.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        if value is _DELETE:
            node.pop(last)
        else:
            node[last] = copy.deepcopy(value)

    return mutate


def _many(*mutations: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def mutate(m: dict[str, Any]) -> None:
        for f in mutations:
            f(m)

    return mutate


_DELETE = object()
_V011 = _set("spec.engine.vllmVersion", "0.11.0")


def _tp(prefill: int, decode: int) -> Callable[[dict[str, Any]], None]:
    return _many(_set("spec.prefill.tensorParallelSize", prefill), _set("spec.decode.tensorParallelSize", decode))


_AUTOSCALE = _set("spec.autoscaling", {"enabled": True, "prefill": {"min": 1, "max": 4}, "decode": {"min": 1, "max": 4}})

INVALID: list[Invalid] = [
    Invalid("model-missing", _set("spec.model", _DELETE), "spec.model", "model"),
    Invalid("model-name-empty", _set("spec.model.name", ""), "spec.model.name", "model.name"),
    Invalid("engine-kind-unknown", _set("spec.engine.kind", "tgi"), "spec.engine.kind", "engine.kind"),
    Invalid("kv-connector-unknown", _set("spec.kvConnector", {"type": "P2pNcclConnectorX"}), "spec.kvConnector.type", "kvConnector.type"),
    Invalid("side-channel-port-out-of-range", _set("spec.kvConnector", {"sideChannelPort": 70000}), "spec.kvConnector.sideChannelPort", "kvConnector.sideChannelPort"),
    Invalid("replicas-negative", _set("spec.prefill.replicas", -1), "spec.prefill.replicas", "prefill.replicas"),
    Invalid("tp-zero", _set("spec.decode.tensorParallelSize", 0), "spec.decode.tensorParallelSize", "decode.tensorParallelSize"),
    Invalid("gpu-in-resources", _set("spec.decode.resources", {"limits": {"nvidia.com/gpu": 2}}), "spec.decode.resources.limits", "decode.resources"),
    Invalid("quantity-malformed", _set("spec.prefill.resources", {"requests": {"memory": "lots"}}), "spec.prefill.resources.requests.memory", "prefill.resources"),
    Invalid("router-policy-unknown", _set("spec.router", {"policy": "random"}), "spec.router.policy", "router.policy"),
    Invalid("router-weight-negative", _set("spec.router", {"weights": {"overlap": -1}}), "spec.router.weights.overlap", "router.weights.overlap"),
    Invalid("slo-ttft-zero", _set("spec.slo", {"ttftMs": 0}), "spec.slo.ttftMs", "slo.ttftMs"),
    Invalid("slo-itl-negative", _set("spec.slo", {"itlMs": -5}), "spec.slo.itlMs", "slo.itlMs"),
    Invalid("slo-attainment-above-one", _set("spec.slo", {"attainment": 1.5}), "spec.slo.attainment", "slo.attainment"),
    Invalid("mock-speedup-zero", _set("spec.engine.mockSpeedup", 0), "spec.engine.mockSpeedup", "engine.mockSpeedup"),
    Invalid("predictor-unknown", _many(_AUTOSCALE, _set("spec.autoscaling.predictor", "lstm")), "spec.autoscaling.predictor", "autoscaling.predictor"),
    Invalid("bounds-min-above-max", _many(_AUTOSCALE, _set("spec.autoscaling.decode", {"min": 5, "max": 2})), "spec.autoscaling.decode.min", "autoscaling.decode"),
    Invalid("replicas-outside-bounds", _many(_AUTOSCALE, _set("spec.prefill.replicas", 9)), "spec.prefill.replicas", "prefill.replicas"),
    Invalid(
        "gpu-budget-below-minimums",
        _many(_AUTOSCALE, _set("spec.prefill.tensorParallelSize", 4), _set("spec.autoscaling.gpuBudget", 4)),
        "spec.autoscaling.gpuBudget",
        "autoscaling.gpuBudget",
    ),
    Invalid("min-zero-without-scale-to-zero", _many(_AUTOSCALE, _set("spec.autoscaling.prefill", {"min": 0, "max": 2})), "spec.autoscaling.scaleToZero", "scaleToZero"),
    Invalid("interval-too-short", _many(_AUTOSCALE, _set("spec.autoscaling.intervalSeconds", 1)), "spec.autoscaling.intervalSeconds", "autoscaling.intervalSeconds"),
    Invalid("prometheus-url-not-http", _many(_AUTOSCALE, _set("spec.autoscaling.prometheusUrl", "prometheus:9090")), "spec.autoscaling.prometheusUrl", "autoscaling.prometheusUrl"),
    Invalid("toleration-operator-unknown", _set("spec.prefill.tolerations", [{"key": "a", "operator": "Matches"}]), "spec.prefill.tolerations[0].operator", "prefill.tolerations.0.operator"),
    # vLLM's own limits, per version (pdserve.api.vllm_versions; each from vLLM's source).
    Invalid("mooncake-not-in-0.11", _many(_V011, _set("spec.kvConnector", {"type": "MooncakeConnector"})), "spec.kvConnector.type", "kvConnector.type"),
    Invalid("vllm-version-unknown", _set("spec.engine.vllmVersion", "0.10.0"), "spec.engine.vllmVersion", "engine.vllmVersion"),
    Invalid("prefill-tp-above-decode-0.11", _many(_V011, _tp(4, 2)), "spec.decode.tensorParallelSize", "decode.tensorParallelSize"),
    Invalid("decode-tp-not-multiple-0.11", _many(_V011, _tp(4, 6)), "spec.decode.tensorParallelSize", "decode.tensorParallelSize"),
    Invalid("tp-not-dividing-0.33", _tp(2, 3), "spec.decode.tensorParallelSize", "decode.tensorParallelSize"),
    Invalid("side-channel-range-hits-kv-events-0.11", _many(_V011, _tp(4, 4), _set("spec.kvConnector", {"sideChannelPort": 5555})), "spec.kvConnector.sideChannelPort", "kvConnector.sideChannelPort"),
    Invalid("side-channel-range-hits-http-0.11", _many(_V011, _tp(1, 4), _set("spec.kvConnector", {"sideChannelPort": 7997})), "spec.kvConnector.sideChannelPort", "kvConnector.sideChannelPort"),
    Invalid("side-channel-is-kv-events-0.33", _set("spec.kvConnector", {"sideChannelPort": 5557}), "spec.kvConnector.sideChannelPort", "kvConnector.sideChannelPort"),
    Invalid("mooncake-bootstrap-is-http-0.33", _set("spec.kvConnector", {"type": "MooncakeConnector", "sideChannelPort": 8000}), "spec.kvConnector.sideChannelPort", "kvConnector.sideChannelPort"),
    Invalid("side-channel-range-past-65535-0.11", _many(_V011, _tp(2, 2), _set("spec.kvConnector", {"sideChannelPort": 65535})), "spec.kvConnector.sideChannelPort", "kvConnector.sideChannelPort"),
    Invalid("block-size-in-pool-args", _set("spec.prefill.extraArgs", ["--max-num-seqs", "8", "--block-size", "32"]), "spec.prefill.extraArgs", "extraArgs"),
    Invalid("block-size-eq-in-engine-args", _set("spec.engine.args", ["--block-size=32"]), "spec.engine.args", "args"),
    Invalid("tokenizer-in-decode-args", _set("spec.decode.extraArgs", ["--tokenizer", "other/tok"]), "spec.decode.extraArgs", "extraArgs"),
    Invalid("block-size-not-in-0.11", _many(_V011, _set("spec.engine.blockSize", 24)), "spec.engine.blockSize", "engine.blockSize"),
    Invalid("block-size-zero", _set("spec.engine.blockSize", 0), "spec.engine.blockSize", "engine.blockSize"),
    Invalid("tokenizer-mode-slow-gone-in-0.33", _set("spec.model.tokenizerMode", "slow"), "spec.model.tokenizerMode", "model.tokenizerMode"),
    Invalid("tokenizer-mode-hf-not-in-0.11", _many(_V011, _set("spec.model.tokenizerMode", "hf")), "spec.model.tokenizerMode", "model.tokenizerMode"),
    Invalid("tokenizer-mode-mock-on-vllm", _many(_set("spec.engine.kind", "vllm"), _set("spec.model.tokenizerMode", "mock")), "spec.model.tokenizerMode", "model.tokenizerMode"),
    Invalid("tokenizer-mode-unknown", _set("spec.model.tokenizerMode", "sentencepiece"), "spec.model.tokenizerMode", "model.tokenizerMode"),
    # Pods: env from Secrets, the model cache, RDMA.
    Invalid(
        "env-value-and-value-from",
        _set("spec.engine.env", [{"name": "HF_TOKEN", "value": "x", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}]),
        "spec.engine.env[0].valueFrom",
        "valueFrom",
    ),
    Invalid("env-value-from-empty", _set("spec.engine.env", [{"name": "HF_TOKEN", "valueFrom": {}}]), "spec.engine.env[0].valueFrom", "valueFrom"),
    Invalid("env-from-both", _set("spec.engine.envFrom", [{"secretRef": {"name": "a"}, "configMapRef": {"name": "b"}}]), "spec.engine.envFrom[0]", "envFrom"),
    Invalid("token-secret-bad-name", _set("spec.model.tokenSecret", {"name": "Bad_Name"}), "spec.model.tokenSecret.name", "tokenSecret.name"),
    Invalid("image-pull-secret-bad-name", _set("spec.imagePullSecrets", [{"name": "UPPER"}]), "spec.imagePullSecrets[0].name", "imagePullSecrets.0.name"),
    Invalid("cache-pvc-and-host-path", _set("spec.modelCache", {"persistentVolumeClaim": "hf", "hostPath": "/data/hf"}), "spec.modelCache.hostPath", "hostPath"),
    Invalid("cache-read-only-without-volume", _set("spec.modelCache", {"readOnly": True}), "spec.modelCache.readOnly", "readOnly"),
    Invalid("cache-host-path-relative", _set("spec.modelCache", {"hostPath": "data/hf"}), "spec.modelCache.hostPath", "modelCache.hostPath"),
    Invalid("cache-size-malformed", _set("spec.modelCache", {"size": "big"}), "spec.modelCache.size", "size"),
    Invalid("rdma-without-root", _set("spec.rdma", {"enabled": True}), "spec.rdma.enabled", "rdma.enabled"),
    Invalid(
        "rdma-resource-is-gpu",
        _many(_set("spec.engine.runAsRoot", True), _set("spec.rdma", {"enabled": True, "resources": {"nvidia.com/gpu": 1}})),
        "spec.rdma.resources",
        "resources",
    ),
]


@dataclass(frozen=True)
class Valid:
    """A resource vLLM would run: both layers must accept it (refusing these would be as wrong)."""

    id: str
    mutate: Callable[[dict[str, Any]], None]

    def manifest(self, name: str, namespace: str = "default") -> dict[str, Any]:
        m = copy.deepcopy(valid_manifest(name, namespace))
        self.mutate(m)
        return m


VALID: list[Valid] = [
    # 0.33's NIXL reads from several prefill ranks (tp_mapping.py): prefill TP may exceed decode TP.
    Valid("prefill-tp-above-decode-0.33", _tp(4, 2)),
    Valid("decode-tp-multiple-0.11", _many(_V011, _tp(2, 4))),
    Valid("mooncake-0.33", _set("spec.kvConnector", {"type": "MooncakeConnector", "sideChannelPort": 8998})),
    # 0.33 serves every TP rank's handshake on the base port: 5556 with TP 4 is clear of 5557 there.
    Valid("side-channel-just-below-kv-events-0.33", _many(_tp(4, 4), _set("spec.kvConnector", {"sideChannelPort": 5556}))),
    Valid("side-channel-range-clear-0.11", _many(_V011, _tp(4, 4), _set("spec.kvConnector", {"sideChannelPort": 5553}))),
    Valid("block-size-24-0.33", _set("spec.engine.blockSize", 24)),
    Valid("tokenizer-mode-mock-on-mock-0.11", _many(_V011, _set("spec.model.tokenizerMode", "mock"))),
    Valid("tokenizer-mode-slow-0.11", _many(_V011, _set("spec.model.tokenizerMode", "slow"))),
    Valid(
        "gated-model-pieces",
        _many(
            _set("spec.model.tokenSecret", {"name": "hf-token"}),
            _set("spec.modelCache", {"persistentVolumeClaim": "hf-cache", "readOnly": True}),
            _set("spec.engine.env", [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "x"}}}]),
            _set("spec.engine.envFrom", [{"secretRef": {"name": "creds"}, "prefix": "S3_"}]),
            _set("spec.imagePullSecrets", [{"name": "regcred"}]),
        ),
    ),
    Valid("rdma-as-root", _many(_set("spec.engine.runAsRoot", True), _set("spec.rdma", {"enabled": True, "resources": {"nvidia.com/hostdev": 2}, "ucxNetDevices": "mlx5_0:1"}))),
    Valid("unrelated-extra-args", _set("spec.prefill.extraArgs", ["--max-num-seqs", "8", "--block-size-hint"])),
]
