"""Pydantic models of the DisaggregatedService spec.

These models are the single source of the CRD's OpenAPI schema (see
``pdserve.api.schema``): field descriptions become schema descriptions, defaults
become structural defaults, and each model's ``__cel__`` rules become
``x-kubernetes-validations``. The same cross-field rules are enforced here in
Python, so code that builds a spec by hand fails exactly where the API server would.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, model_validator
from pydantic.alias_generators import to_camel

from pdserve.api.cel import CelRule

GPU_RESOURCE = "nvidia.com/gpu"
ENGINE_KINDS = ("vllm", "mock")
KV_CONNECTORS = ("NixlConnector", "LMCacheConnectorV1", "MooncakeConnector")
ROUTER_POLICIES = ("round_robin", "least_loaded", "power_of_two", "prefix_approx", "kv_aware", "cache_aware")
PREDICTORS = ("constant", "moving_average", "holt_winters", "arima")

# Kubernetes quantity syntax (resource.Quantity), e.g. 500m, 16Gi, 1.5, 2e3.
QUANTITY_PATTERN = r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+|[KMGTPE]i|[numkMGTPE])?$"
_QUANTITY_RE = re.compile(QUANTITY_PATTERN)
# Structural int-or-string with the quantity pattern, as controller-gen emits for resource.Quantity.
Quantity = Annotated[int | str, WithJsonSchema({"anyOf": [{"type": "integer"}, {"type": "string"}], "pattern": QUANTITY_PATTERN})]


class ApiModel(BaseModel):
    """CRD objects: camelCase on the wire, unknown fields refused (the API server prunes them)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")
    __cel__: ClassVar[tuple[CelRule, ...]] = ()


class ModelSpec(ApiModel):
    name: str = Field(min_length=1, max_length=256, description="Model to load, e.g. a Hugging Face id (`meta-llama/Llama-3.1-8B-Instruct`) or a path.")
    served_name: str | None = Field(None, min_length=1, max_length=256, description="Name clients use in the OpenAI `model` field (`--served-model-name`); defaults to `name`.")


class EnvVar(ApiModel):
    name: str = Field(min_length=1, max_length=256, pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$", description="Environment variable name.")
    value: str = Field("", description="Its value.")


class EngineSpec(ApiModel):
    kind: Literal["vllm", "mock"] = Field("vllm", description="`vllm` runs `vllm serve` on GPUs; `mock` runs `pdserve worker`, the GPU-free vLLM stand-in with the same flags.")
    image: str | None = Field(None, min_length=1, description="Container image; defaults to vllm/vllm-openai for `vllm` and the pdserve image for `mock`.")
    args: list[str] = Field(default_factory=list, description="Extra arguments for both pools, appended after the rendered ones.")
    env: list[EnvVar] = Field(default_factory=list, description="Extra environment variables for both pools.")
    mock_profile: str = Field("llama-3.1-8b-h100", min_length=1, description="Mock engine only: the performance profile (`--mock-profile`).")
    mock_speedup: float = Field(1.0, gt=0, le=10000, description="Mock engine only: how much faster than real time the mock runs (`--mock-speedup`).")


class KvConnectorSpec(ApiModel):
    type: Literal["NixlConnector", "LMCacheConnectorV1", "MooncakeConnector"] = Field("NixlConnector", description="vLLM KV connector that moves KV blocks from prefill to decode workers.")
    side_channel_port: int = Field(5600, ge=1024, le=65535, description="NIXL side-channel port (`VLLM_NIXL_SIDE_CHANNEL_PORT`).")


class ResourceRequirements(ApiModel):
    requests: dict[str, Quantity] = Field(default_factory=dict, description="Minimum resources, e.g. cpu, memory. `nvidia.com/gpu` is set from tensorParallelSize.")
    limits: dict[str, Quantity] = Field(default_factory=dict, description="Maximum resources. `nvidia.com/gpu` is set from tensorParallelSize.")

    __cel__ = (
        CelRule("!has(self.requests) || !('nvidia.com/gpu' in self.requests)", "nvidia.com/gpu is set from tensorParallelSize; remove it from requests", ".requests"),
        CelRule("!has(self.limits) || !('nvidia.com/gpu' in self.limits)", "nvidia.com/gpu is set from tensorParallelSize; remove it from limits", ".limits"),
    )

    @model_validator(mode="after")
    def _check(self) -> ResourceRequirements:
        for where, values in (("requests", self.requests), ("limits", self.limits)):
            if GPU_RESOURCE in values:
                raise ValueError(f"{where}: nvidia.com/gpu is set from tensorParallelSize; remove it from {where}")
            for key, q in values.items():
                if isinstance(q, str) and not _QUANTITY_RE.match(q):
                    raise ValueError(f"{where}.{key}: {q!r} is not a Kubernetes quantity")
        return self


class Toleration(ApiModel):
    key: str | None = Field(None, description="Taint key; empty with operator Exists matches all taints.")
    operator: Literal["Exists", "Equal"] = Field("Equal", description="Exists or Equal.")
    value: str | None = Field(None, description="Taint value for Equal.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(None, description="Taint effect to match; empty matches all.")
    toleration_seconds: int | None = Field(None, ge=0, description="For NoExecute: how long the pod stays bound after the taint appears.")


class PoolSpec(ApiModel):
    replicas: int = Field(1, ge=0, le=512, description="Number of workers. With autoscaling the planner writes this field.")
    tensor_parallel_size: int = Field(1, ge=1, le=64, description="GPUs per worker (`--tensor-parallel-size`); also the worker's nvidia.com/gpu request and limit.")
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements, description="CPU / memory requests and limits per worker.")
    node_selector: dict[str, str] = Field(default_factory=dict, description="Node labels the workers must run on.")
    tolerations: list[Toleration] = Field(default_factory=list, description="Taints the workers tolerate (GPU nodes are often tainted).")
    extra_args: list[str] = Field(default_factory=list, description="Extra engine arguments for this pool only.")


class RouterWeights(ApiModel):
    """Cost weights of the prefix-aware policies; an unset weight keeps the router's default.

    Passed to the router as JSON in PDSERVE_ROUTER_WEIGHTS, keyed by the router's
    CostWeights field names (overlap_weight, request_tokens, kv_tokens, balance_factor)."""

    overlap: float | None = Field(None, ge=0, le=1000, description="Worth of one cached prompt token, in tokens of prefill compute (router default 2).")
    request_tokens: float | None = Field(None, ge=0, le=1e6, description="Load charge per running or waiting request, in tokens (router default 64).")
    kv_tokens: float | None = Field(None, ge=0, le=1e7, description="Load charge at full KV-cache usage, in tokens (router default 2048).")
    balance_factor: float | None = Field(None, ge=1, le=100, description="Herding guard: a worker above this multiple of the mean request count is avoided (router default 1.5).")


class RouterSpec(ApiModel):
    replicas: int = Field(1, ge=0, le=64, description="Router replicas.")
    policy: Literal["round_robin", "least_loaded", "power_of_two", "prefix_approx", "kv_aware", "cache_aware"] = Field("kv_aware", description="Worker selection policy (`pdserve router --policy`).")
    weights: RouterWeights = Field(default_factory=RouterWeights, description="Scoring weights for the prefix-aware policies.")
    image: str | None = Field(None, min_length=1, description="Router image; defaults to the pdserve image.")


class SloSpec(ApiModel):
    ttft_ms: float = Field(2000.0, gt=0, description="Time-to-first-token objective in milliseconds.")
    itl_ms: float = Field(50.0, gt=0, description="Inter-token latency objective in milliseconds.")
    attainment: float = Field(0.9, gt=0, le=1, description="Fraction of requests that must meet both objectives.")


class PoolBounds(ApiModel):
    min: int = Field(1, ge=0, le=512, description="Fewest workers the planner may choose.")
    max: int = Field(8, ge=0, le=512, description="Most workers the planner may choose.")

    __cel__ = (CelRule("self.min <= self.max", "min must be <= max", ".min"),)

    @model_validator(mode="after")
    def _check(self) -> PoolBounds:
        if self.min > self.max:
            raise ValueError(f"min must be <= max (min={self.min}, max={self.max})")
        return self


class AutoscalingSpec(ApiModel):
    enabled: bool = Field(False, description="Run the planner for this service.")
    predictor: Literal["constant", "moving_average", "holt_winters", "arima"] = Field("holt_winters", description="Load forecaster for the next interval.")
    interval_seconds: int = Field(60, ge=5, le=3600, description="Planner interval.")
    prefill: PoolBounds = Field(default_factory=PoolBounds, description="Prefill pool bounds.")
    decode: PoolBounds = Field(default_factory=PoolBounds, description="Decode pool bounds.")
    gpu_budget: int | None = Field(None, ge=1, description="Most GPUs prefill + decode may use together; unset means no budget.")
    prometheus_url: str = Field("http://prometheus-operated.monitoring.svc:9090", pattern=r"^https?://\S+$", description="Prometheus the planner queries.")
    scale_down_stabilization_seconds: int = Field(300, ge=0, le=86400, description="A scale-down must be wanted this long before it happens.")
    scale_to_zero: bool = Field(False, description="Allow a pool's minimum of 0 (the pool is empty when idle).")

    __cel__ = (
        CelRule("self.scaleToZero || (self.prefill.min >= 1 && self.decode.min >= 1)", "a minimum of 0 needs scaleToZero: true", ".scaleToZero"),
    )

    @model_validator(mode="after")
    def _check(self) -> AutoscalingSpec:
        if not self.scale_to_zero and (self.prefill.min < 1 or self.decode.min < 1):
            raise ValueError("scaleToZero: a minimum of 0 needs scaleToZero: true")
        return self


_AUTOSCALED = "has(self.autoscaling) && self.autoscaling.enabled"


def _within(pool: str) -> CelRule:
    return CelRule(
        f"!({_AUTOSCALED}) || (self.{pool}.replicas >= self.autoscaling.{pool}.min && self.{pool}.replicas <= self.autoscaling.{pool}.max)",
        f"{pool}.replicas must be within autoscaling.{pool}.min..max",
        f".{pool}.replicas",
    )


class DisaggregatedServiceSpec(ApiModel):
    """Desired state: the model, the engine, the KV connector, both worker pools, the router, SLOs and autoscaling."""

    model: ModelSpec = Field(description="The model to serve.")
    engine: EngineSpec = Field(default_factory=EngineSpec, description="Inference engine for both pools.")
    kv_connector: KvConnectorSpec = Field(default_factory=KvConnectorSpec, description="How KV blocks move from prefill to decode.")
    prefill: PoolSpec = Field(default_factory=PoolSpec, description="Prefill pool.")
    decode: PoolSpec = Field(default_factory=PoolSpec, description="Decode pool.")
    router: RouterSpec = Field(default_factory=RouterSpec, description="The OpenAI-compatible router in front of both pools.")
    slo: SloSpec = Field(default_factory=SloSpec, description="Latency objectives the planner sizes the pools for.")
    autoscaling: AutoscalingSpec = Field(default_factory=AutoscalingSpec, description="Forecasting planner settings.")

    __cel__ = (
        _within("prefill"),
        _within("decode"),
        CelRule(
            f"!({_AUTOSCALED}) || !has(self.autoscaling.gpuBudget) || self.autoscaling.gpuBudget >= "
            "self.autoscaling.prefill.min * self.prefill.tensorParallelSize + self.autoscaling.decode.min * self.decode.tensorParallelSize",
            "autoscaling.gpuBudget must hold the minimums: prefill.min * prefill.tensorParallelSize + decode.min * decode.tensorParallelSize",
            ".autoscaling.gpuBudget",
        ),
    )

    @model_validator(mode="after")
    def _check(self) -> DisaggregatedServiceSpec:
        a = self.autoscaling
        if not a.enabled:
            return self
        for pool, spec, bounds in (("prefill", self.prefill, a.prefill), ("decode", self.decode, a.decode)):
            if not bounds.min <= spec.replicas <= bounds.max:
                raise ValueError(f"{pool}.replicas must be within autoscaling.{pool}.min..max ({spec.replicas} not in {bounds.min}..{bounds.max})")
        need = a.prefill.min * self.prefill.tensor_parallel_size + a.decode.min * self.decode.tensor_parallel_size
        if a.gpu_budget is not None and a.gpu_budget < need:
            raise ValueError(f"autoscaling.gpuBudget must hold the minimums: {a.gpu_budget} < {need} GPUs")
        return self

    @property
    def served_name(self) -> str:
        return self.model.served_name or self.model.name

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")
