"""What a worker pod needs besides the engine flags: env from Secrets, the model cache, RDMA.

Kept apart from ``spec.py`` (the service's shape) because these are Kubernetes pod
plumbing, rendered by ``pdserve.operator.render_workers``.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from pdserve.api.cel import CelRule
from pdserve.api.spec_base import QUANTITY_RE, ApiModel, Quantity

ENV_NAME = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
# Kubernetes object names referenced from a pod (Secrets, ConfigMaps, PVCs): DNS-1123 subdomain.
OBJECT_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
ObjectName = Annotated[str, Field(min_length=1, max_length=253, pattern=OBJECT_NAME)]


class KeySelector(ApiModel):
    name: ObjectName = Field(description="Name of the Secret or ConfigMap.")
    key: str = Field(min_length=1, max_length=253, description="Key in it.")
    optional: bool | None = Field(None, description="Start the pod even if the object or key is missing.")


class FieldSelector(ApiModel):
    field_path: str = Field(min_length=1, max_length=256, description="Pod field, e.g. `status.podIP` or `metadata.name`.")


class EnvVarSource(ApiModel):
    secret_key_ref: KeySelector | None = Field(None, description="A key of a Secret, e.g. a Hugging Face token.")
    config_map_key_ref: KeySelector | None = Field(None, description="A key of a ConfigMap.")
    field_ref: FieldSelector | None = Field(None, description="A field of the pod.")

    __cel__ = (
        CelRule("(has(self.secretKeyRef) ? 1 : 0) + (has(self.configMapKeyRef) ? 1 : 0) + (has(self.fieldRef) ? 1 : 0) == 1", "valueFrom needs exactly one of secretKeyRef, configMapKeyRef, fieldRef"),
    )

    @model_validator(mode="after")
    def _check(self) -> EnvVarSource:
        if sum(x is not None for x in (self.secret_key_ref, self.config_map_key_ref, self.field_ref)) != 1:
            raise ValueError("valueFrom needs exactly one of secretKeyRef, configMapKeyRef, fieldRef")
        return self


class EnvVar(ApiModel):
    name: str = Field(min_length=1, max_length=256, pattern=ENV_NAME, description="Environment variable name.")
    value: str | None = Field(None, max_length=32768, description="Its value (omit when using valueFrom).")
    value_from: EnvVarSource | None = Field(None, description="Take the value from a Secret, ConfigMap or pod field instead.")

    __cel__ = (CelRule("!(has(self.value) && has(self.valueFrom))", "env: set value or valueFrom, not both", ".valueFrom"),)

    @model_validator(mode="after")
    def _check(self) -> EnvVar:
        if self.value is not None and self.value_from is not None:
            raise ValueError("valueFrom: env: set value or valueFrom, not both")
        return self

    def to_k8s(self) -> dict[str, object]:
        return self.model_dump(by_alias=True, exclude_none=True)


class ObjectRef(ApiModel):
    name: ObjectName = Field(description="Object name.")
    optional: bool | None = Field(None, description="Start the pod even if it is missing.")


class EnvFromSource(ApiModel):
    secret_ref: ObjectRef | None = Field(None, description="Every key of this Secret becomes a variable (e.g. a Secret holding HF_TOKEN).")
    config_map_ref: ObjectRef | None = Field(None, description="Every key of this ConfigMap becomes a variable.")
    prefix: str | None = Field(None, max_length=256, pattern=ENV_NAME, description="Prefix added to each variable name.")

    __cel__ = (CelRule("has(self.secretRef) != has(self.configMapRef)", "envFrom needs exactly one of secretRef, configMapRef"),)

    @model_validator(mode="after")
    def _check(self) -> EnvFromSource:
        if (self.secret_ref is None) == (self.config_map_ref is None):
            raise ValueError("envFrom needs exactly one of secretRef, configMapRef")
        return self


class LocalObjectReference(ApiModel):
    name: ObjectName = Field(description="Name of a Secret of type kubernetes.io/dockerconfigjson in the same namespace.")


class SecretKey(ApiModel):
    name: ObjectName = Field(description="Secret name.")
    key: str = Field("token", min_length=1, max_length=253, description="Key holding the token.")


class ModelCacheSpec(ApiModel):
    """Where Hugging Face downloads land (mounted at HF_HOME): without a volume, every pod start downloads the weights again."""

    persistent_volume_claim: ObjectName | None = Field(
        None, description="A PVC holding the HF cache. ReadOnlyMany (pre-filled once, e.g. by a Job) is shared by every pod on any node; ReadWriteOnce only works while all workers land on one node."
    )
    host_path: str | None = Field(
        None, min_length=2, max_length=4096, pattern=r"^/", description="A directory on each GPU node (per-node cache; first pod on a node downloads). Needs a policy that allows hostPath."
    )
    read_only: bool = Field(False, description="Mount read-only; the weights must be there already and HF_HUB_OFFLINE=1 is set.")
    size: Quantity = Field(
        "100Gi", description="Without a PVC or hostPath: size of the per-pod emptyDir cache, requested as ephemeral-storage so the scheduler picks a node with room for the weights (vLLM engine only: mock workers get a 2Gi emptyDir and request none)."
    )
    scratch: Quantity = Field("10Gi", description="ephemeral-storage requested besides the cache: HOME, torch.compile / Triton / FlashInfer caches, logs.")

    __cel__ = (
        CelRule("!(has(self.persistentVolumeClaim) && has(self.hostPath))", "modelCache: choose persistentVolumeClaim or hostPath, not both", ".hostPath"),
        CelRule("!self.readOnly || has(self.persistentVolumeClaim) || has(self.hostPath)", "modelCache.readOnly needs a persistentVolumeClaim or hostPath holding the weights", ".readOnly"),
    )

    @model_validator(mode="after")
    def _check(self) -> ModelCacheSpec:
        if self.persistent_volume_claim and self.host_path:
            raise ValueError("hostPath: modelCache: choose persistentVolumeClaim or hostPath, not both")
        if self.read_only and not (self.persistent_volume_claim or self.host_path):
            raise ValueError("readOnly: modelCache.readOnly needs a persistentVolumeClaim or hostPath holding the weights")
        for where, q in (("size", self.size), ("scratch", self.scratch)):
            if isinstance(q, str) and not QUANTITY_RE.match(q):
                raise ValueError(f"{where}: {q!r} is not a Kubernetes quantity")
        return self

    @property
    def ephemeral(self) -> bool:
        return not (self.persistent_volume_claim or self.host_path)


class RdmaSpec(ApiModel):
    """RDMA for the KV transfer (NIXL/UCX, Mooncake). Without it NIXL falls back to TCP, far too slow for P/D."""

    enabled: bool = Field(False, description="Ask for RDMA devices, add IPC_LOCK (pinned memory registration) and set the UCX env.")
    resources: dict[str, Quantity] = Field(
        default_factory=lambda: dict[str, Quantity]({"rdma/ib": 1}),
        description="Extended resources of the RDMA device plugin per worker, e.g. `rdma/ib: 1` (k8s-rdma-shared-dev-plugin) or `nvidia.com/hostdev: 1` (SR-IOV).",
    )
    ucx_tls: str | None = Field("rc,cuda_copy,cuda_ipc", max_length=256, description="UCX_TLS: UCX transports NIXL may use (`rc` = RDMA reliable connection). Unset leaves UCX's own choice.")
    ucx_net_devices: str | None = Field(None, max_length=1024, description="UCX_NET_DEVICES, e.g. `mlx5_0:1,mlx5_1:1`; unset uses every device.")

    __cel__ = (CelRule("!has(self.resources) || self.resources.all(k, k.contains('/') && k != 'nvidia.com/gpu')", "rdma.resources takes extended resources like rdma/ib, not nvidia.com/gpu", ".resources"),)

    @model_validator(mode="after")
    def _check(self) -> RdmaSpec:
        for key, q in self.resources.items():
            if "/" not in key or key == "nvidia.com/gpu":
                raise ValueError(f"resources: rdma.resources takes extended resources like rdma/ib, not {key!r}")
            if isinstance(q, str) and not QUANTITY_RE.match(q):
                raise ValueError(f"resources.{key}: {q!r} is not a Kubernetes quantity")
        return self
