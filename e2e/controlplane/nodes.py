"""Fake GPU nodes that kwok keeps alive.

A node is "fake" (managed by kwok rather than a kubelet) when it carries the
annotation below; kwok is started with the matching annotation selector. Each
node gets its own loopback pod CIDR (127.64.<index>.0/24), so pod IPs kwok hands
out are 127.x addresses that real processes can bind to on this machine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_ANNOTATION_VALUE = "fake"
KWOK_SELECTOR = f"{KWOK_ANNOTATION}={KWOK_ANNOTATION_VALUE}"
GPU_RESOURCE = "nvidia.com/gpu"
# Optional, as on kwok's own examples: keeps pods that do not tolerate it off the node.
KWOK_TAINT = {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}


@dataclass(frozen=True)
class GpuNodeSpec:
    name: str
    gpus: int = 8
    cpu: str = "96"
    memory: str = "1024Gi"
    pods: int = 110
    gpu_product: str = "NVIDIA-H100-80GB-HBM3"
    labels: dict[str, str] = field(default_factory=dict)
    taint: bool = False


def pod_cidr(index: int) -> str:
    """The /24 of loopback addresses for the index-th fake node (index >= 1)."""
    if not 1 <= index <= 255:
        raise ValueError(f"fake node index must be in 1..255, got {index}")
    return f"127.64.{index}.0/24"


def gpu_node_manifest(spec: GpuNodeSpec, index: int) -> dict[str, Any]:
    if spec.gpus < 0:
        raise ValueError(f"node {spec.name}: gpus must be >= 0, got {spec.gpus}")
    capacity = {
        "cpu": spec.cpu,
        "memory": spec.memory,
        "pods": str(spec.pods),
        "ephemeral-storage": "1Ti",
        GPU_RESOURCE: str(spec.gpus),
    }
    labels = {
        "kubernetes.io/hostname": spec.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.count": str(spec.gpus),
        "nvidia.com/gpu.product": spec.gpu_product,
        **spec.labels,
    }
    cidr = pod_cidr(index)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": spec.name,
            "labels": labels,
            "annotations": {KWOK_ANNOTATION: KWOK_ANNOTATION_VALUE, "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {
            "podCIDR": cidr,
            "podCIDRs": [cidr],
            "taints": [KWOK_TAINT] if spec.taint else [],
        },
        # kwok's node-initialize stage keeps capacity/allocatable it finds here.
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }
