"""Pydantic models of the DisaggregatedService spec.

These models are the single source of the CRD's OpenAPI schema (see
``pdserve.api.schema``): field descriptions become schema descriptions, defaults
become structural defaults, and each model's ``__cel__`` rules become
``x-kubernetes-validations``. The same cross-field rules are enforced here in
Python, so code that builds a spec by hand fails exactly where the API server would.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from pdserve.api import vllm_versions
from pdserve.api.cel import CelRule
from pdserve.api.pods import EnvFromSource, EnvVar, LocalObjectReference, ModelCacheSpec, RdmaSpec, SecretKey
from pdserve.api.spec_base import QUANTITY_PATTERN, QUANTITY_RE, ApiModel, Quantity
from pdserve.planner.core.policy import PolicyConfig
from pdserve.router.core.spec import PolicyName, RoutingSpec
from pdserve.router.policies.cost import CostWeights
from pdserve.api.vllm_versions import DEFAULT_VERSION, OFFERED_CONNECTORS, VERSIONS, VersionName

__all__ = ["QUANTITY_PATTERN", "ApiModel", "EnvVar", "Quantity"]

GPU_RESOURCE = "nvidia.com/gpu"
ENGINE_KINDS = ("vllm", "mock")
KV_CONNECTORS = OFFERED_CONNECTORS
ROUTER_POLICIES = tuple(p.value for p in PolicyName)
PREDICTORS = ("constant", "moving_average", "holt_winters", "arima")
DEFAULT_BLOCK_SIZE = 16
# Fixed ports of every worker pod (the operator's names.py reads them from here): the
# connector's handshake ports must stay clear of them.
WORKER_HTTP_PORT = 8000
KV_EVENTS_PORT = 5557
# Flags the spec sets once for both pools and the router: in extra args they could make the pools disagree.
SPEC_OWNED_FLAGS = ("--block-size", "--tokenizer", "--tokenizer-mode")
Arg = Annotated[str, Field(max_length=4096)]


def _no_spec_owned_flags(list_field: str) -> CelRule:
    cond = " || ".join(f"a == '{f}' || a.startsWith('{f}=')" for f in SPEC_OWNED_FLAGS)
    return CelRule(
        f"!has(self.{list_field}) || !self.{list_field}.exists(a, {cond})",
        f"{list_field} must not set {', '.join(SPEC_OWNED_FLAGS)}: set engine.blockSize, model.tokenizer, model.tokenizerMode once (both pools and the router use them)",
        f".{list_field}",
    )


def _check_no_spec_owned_flags(where: str, args: list[str]) -> None:
    for a in args:
        if a.split("=", 1)[0] in SPEC_OWNED_FLAGS:
            raise ValueError(f"{where} must not set {a.split('=', 1)[0]}: set engine.blockSize, model.tokenizer, model.tokenizerMode once (both pools and the router use them)")


class ModelSpec(ApiModel):
    name: str = Field(min_length=1, max_length=256, description="Model to load, e.g. a Hugging Face id (`meta-llama/Llama-3.1-8B-Instruct`) or a path.")
    served_name: str | None = Field(None, min_length=1, max_length=256, description="Name clients use in the OpenAI `model` field (`--served-model-name`); defaults to `name`.")
    tokenizer: str | None = Field(
        None,
        min_length=1,
        max_length=4096,
        description="Tokenizer source (`--tokenizer`): a hub id or a directory (e.g. in the model cache); defaults to `name`. Passed to both pools and the router, so the router counts and hashes the tokens the workers see.",
    )
    tokenizer_mode: Literal["auto", "hf", "slow", "mistral", "mock"] = Field(
        "auto",
        description="`--tokenizer-mode` for both pools and the router. `mistral` loads mistral-common tokenizers; `slow` exists in vLLM 0.11 only, `hf` from 0.33 on. "
        "`mock` (mock engine only): pdserve's hash-word tokenizer, nothing downloaded.",
    )
    token_secret: SecretKey | None = Field(None, description="Secret key holding a Hugging Face token for gated models; set as HF_TOKEN in both pools and the router.")

    @property
    def tokenizer_source(self) -> str:
        return self.tokenizer or self.name


class EngineSpec(ApiModel):
    kind: Literal["vllm", "mock"] = Field("vllm", description="`vllm` runs `vllm serve` on GPUs; `mock` runs `pdserve worker`, the GPU-free vLLM stand-in with the same flags.")
    image: str | None = Field(None, min_length=1, description="Container image; defaults to vllm/vllm-openai for `vllm` and the pdserve image for `mock`.")
    vllm_version: VersionName = Field(
        DEFAULT_VERSION,
        description="vLLM release the image runs (see the supported-version table in docs/install.md): picks the default image, the flags and env rendered, the connectors and tokenizer modes allowed. The mock engine emulates it.",
    )
    block_size: int = Field(
        DEFAULT_BLOCK_SIZE,
        ge=1,
        le=1024,
        description="KV-cache block size in tokens (`--block-size`), the same for both pools (NIXL copies whole blocks) and passed to the router, which hashes prompts in blocks of this size.",
    )
    run_as_root: bool = Field(
        False,
        description="Run the engine as root (the vllm/vllm-openai image's own user). Off: uid 1000 with HOME, USER and LOGNAME set so torch's getpass.getuser() needs no passwd entry. Needed for rdma (capabilities are only effective for root).",
    )
    args: list[Arg] = Field(default_factory=list, max_length=128, description="Extra arguments for both pools, appended after the rendered ones.")
    env: list[EnvVar] = Field(default_factory=list, max_length=128, description="Extra environment variables for both pools; `valueFrom` reads Secrets and ConfigMaps.")
    env_from: list[EnvFromSource] = Field(default_factory=list, max_length=16, description="Secrets / ConfigMaps whose keys all become environment variables of both pools.")
    mock_profile: str = Field("llama-3.1-8b-h100", min_length=1, description="Mock engine only: the performance profile (`--mock-profile`).")
    mock_speedup: float = Field(1.0, gt=0, le=10000, description="Mock engine only: how much faster than real time the mock runs (`--mock-speedup`).")

    __cel__ = (_no_spec_owned_flags("args"),)

    @model_validator(mode="after")
    def _check(self) -> EngineSpec:
        _check_no_spec_owned_flags("args", self.args)
        return self

    @property
    def version(self) -> vllm_versions.VllmVersion:
        return VERSIONS[self.vllm_version]


class KvConnectorSpec(ApiModel):
    type: Literal["NixlConnector", "LMCacheConnectorV1", "MooncakeConnector"] = Field(
        "NixlConnector", description="vLLM KV connector that moves KV blocks from prefill to decode workers; must exist in engine.vllmVersion (MooncakeConnector: 0.33 on)."
    )
    side_channel_port: int = Field(
        5600,
        ge=1024,
        le=65535,
        description="Handshake port: `VLLM_NIXL_SIDE_CHANNEL_PORT` (vLLM 0.11 also uses the next TP-1 ports, one per TP rank) or `VLLM_MOONCAKE_BOOTSTRAP_PORT`. Must not overlap the HTTP (8000) or KV-events (5557) port.",
    )


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
                if isinstance(q, str) and not QUANTITY_RE.match(q):
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
    extra_args: list[Arg] = Field(default_factory=list, max_length=128, description="Extra engine arguments for this pool only.")

    __cel__ = (_no_spec_owned_flags("extraArgs"),)

    @model_validator(mode="after")
    def _check(self) -> PoolSpec:
        _check_no_spec_owned_flags("extraArgs", self.extra_args)
        return self


class RouterWeights(ApiModel):
    """Cost weights of the prefix-aware policies; an unset weight keeps the router's default.

    Become the router's CostWeights (overlap -> overlap_weight; the others by name), passed
    as its --cost-* flags."""

    overlap: float | None = Field(None, ge=0, le=1000, description="Worth of one cached prompt token, in tokens of prefill compute (router default 3).")
    request_tokens: float | None = Field(None, ge=0, le=1e6, description="Load charge per running or waiting request, in tokens (router default 64).")
    kv_tokens: float | None = Field(None, ge=0, le=1e7, description="Load charge at full KV-cache usage, in tokens (router default 2048).")
    balance_factor: float | None = Field(None, ge=1, le=100, description="Herding guard: a worker above this multiple of the mean request count is avoided (router default 1.5).")
    recent_request_tokens: float | None = Field(None, ge=0, le=1e6, description="Load charge per request routed to the worker lately, in tokens; each counts 2^(-age / recentHalfLifeSeconds). Spreads light load that in-flight counts cannot see (router default 512; 0 turns it off).")
    recent_half_life_seconds: float | None = Field(None, gt=0, le=86400, description="Half-life of a routed request in recentRequestTokens' count (router default 120).")

    def cost_weights(self) -> CostWeights:
        given = {"overlap_weight": self.overlap, "request_tokens": self.request_tokens, "kv_tokens": self.kv_tokens,
                 "balance_factor": self.balance_factor, "recent_request_tokens": self.recent_request_tokens,
                 "recent_half_life_s": self.recent_half_life_seconds}
        return CostWeights(**{k: v for k, v in given.items() if v is not None})


class RouterSpec(ApiModel):
    replicas: int = Field(1, ge=0, le=64, description="Router replicas.")
    policy: PolicyName = Field(PolicyName.KV_AWARE, description="Places prompts: on the prefill pool, or on the decode pool when there is none (`pdserve router --policy`).")
    decode_policy: PolicyName | None = Field(None, description="Places the decode side (`--decode-policy`); unset: least_loaded after a remote prefill, else `policy`.")
    disagg_threshold_tokens: int = Field(0, ge=0, le=10_000_000, description="Prompts with fewer uncached tokens skip the prefill pool: the decode worker prefills them (`--disagg-threshold-tokens`).")
    decode_reuse_threshold_tokens: int = Field(0, ge=0, le=10_000_000, description="Prompts whose prefix a decode worker already holds, with fewer uncached tokens there than this and than on the prefill worker, skip the prefill pool: that decode worker prefills them (`--decode-reuse-threshold-tokens`; needs KV events).")
    max_prefill_queue_tokens: int = Field(0, ge=0, le=100_000_000, description="When the chosen prefill worker already queues more prompt tokens than this (time-to-drain x its prefill rate) and a decode worker would finish the prefill sooner, that decode worker prefills the prompt: the decode pool absorbs bursts the prefill pool cannot (`--max-prefill-queue-tokens`; Dynamo's `max_prefill_queue_size`, in tokens). 0 = off. The decode workers then run prompt chunks of up to their `--max-num-batched-tokens` (vLLM's default 8192) in the steps of their decodes: give the decode pool a small one (e.g. `--max-num-batched-tokens 1024` in its extra args) to keep ITL within the SLO (bench/planner/README.md).")
    weights: RouterWeights = Field(default_factory=RouterWeights, description="Scoring weights for the prefix-aware policies.")
    image: str | None = Field(None, min_length=1, description="Router image; defaults to the pdserve image.")
    api_key_secret: SecretKey | None = Field(None, description="Secret key holding the API key clients must send as `Authorization: Bearer <key>` on /v1/* (vLLM's --api-key semantics; set as VLLM_API_KEY in the router). /health and /metrics stay open; the NetworkPolicy limits who reaches them.")
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements, description="CPU / memory requests and limits of the router container (defaults: requests cpu 250m, memory 256Mi; limits memory 1Gi). The router runs one process per whole CPU of its cpu request (`--processes`, at least 1).")

    def routing(self, block_size: int) -> RoutingSpec:
        """The router's RoutingSpec (the same type the CLI and the simulator use); ``block_size`` is the engines'."""
        return RoutingSpec(policy=self.policy, decode_policy=self.decode_policy, weights=self.weights.cost_weights(),
                           block_size=block_size, disagg_threshold_tokens=self.disagg_threshold_tokens,
                           decode_reuse_threshold_tokens=self.decode_reuse_threshold_tokens,
                           max_prefill_queue_tokens=self.max_prefill_queue_tokens)


class TracingSpec(ApiModel):
    otlp_traces_endpoint: str | None = Field(None, max_length=2048, pattern=r"^https?://[^/\s]+(/\S*)?$", description="OTLP/HTTP (protobuf) collector, e.g. `http://otel-collector.observability:4318`: the router (`--otlp-traces-endpoint`) traces each request and the workers (vLLM's `--otlp-traces-endpoint`, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf) join its traces. `/v1/traces` is added to a bare address. vLLM images need the opentelemetry-sdk and opentelemetry-exporter-otlp packages (vLLM refuses to start without them). Unset: no tracing.")
    sample_ratio: float = Field(1.0, ge=0, le=1, description="Fraction of new traces kept (the router's `--otlp-traces-sample-ratio`; workers follow the router's decision, and use it for requests sent to them directly).")

    @property
    def traces_url(self) -> str | None:
        """The full OTLP/HTTP traces URL (vLLM's http/protobuf exporter takes it as is)."""
        url = self.otlp_traces_endpoint
        if not url:
            return None
        return url if url.split("://", 1)[1].strip("/").count("/") else url.rstrip("/") + "/v1/traces"


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
    # The shipped defaults are the policy's own, i.e. what bench/planner evaluated.
    interval_seconds: int = Field(int(PolicyConfig.interval_s), ge=5, le=3600, description="Planner interval.")
    prefill: PoolBounds = Field(default_factory=PoolBounds, description="Prefill pool bounds.")
    decode: PoolBounds = Field(default_factory=PoolBounds, description="Decode pool bounds.")
    gpu_budget: int | None = Field(None, ge=1, description="Most GPUs prefill + decode may use together; unset means no budget.")
    prometheus_url: str = Field("http://prometheus-operated.monitoring.svc:9090", pattern=r"^https?://\S+$", description="Prometheus the planner queries.")
    scale_down_stabilization_seconds: int = Field(int(PolicyConfig.scale_down_stabilization_s), ge=0, le=86400, description=(
        "A scale-down must be wanted this long before it happens, unless the pool left still carries the load after "
        f"the arrival rate's {PolicyConfig.scale_down_clear_quantile:g}-quantile rise within a start-up plus an "
        "interval, as seen in the rate history."))
    scale_to_zero: bool = Field(False, description="Allow a pool's minimum of 0 (the pool is empty when idle).")

    __cel__ = (CelRule("self.scaleToZero || (self.prefill.min >= 1 && self.decode.min >= 1)", "a minimum of 0 needs scaleToZero: true", ".scaleToZero"),)

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


_V = "self.engine.vllmVersion"
_MAX_TP = "(self.prefill.tensorParallelSize > self.decode.tensorParallelSize ? self.prefill.tensorParallelSize : self.decode.tensorParallelSize)"
RDMA_ROOT_MESSAGE = "rdma.enabled needs engine.runAsRoot: true (Kubernetes makes added capabilities such as IPC_LOCK effective only for uid 0)"


def _offer(values: Mapping[str, Sequence[object] | None]) -> str:
    return "; ".join(f"{v}: {', '.join(map(str, allowed)) if allowed is not None else 'any'}" for v, allowed in values.items())


def _connectors() -> dict[str, tuple[str, ...]]:
    return {v: tuple(info.connectors) for v, info in VERSIONS.items()}


def _tokenizer_modes() -> dict[str, tuple[str, ...]]:
    return {v: tuple(m for m in info.tokenizer_modes if m in vllm_versions.OFFERED_TOKENIZER_MODES) for v, info in VERSIONS.items()}


def _block_sizes() -> dict[str, tuple[int, ...] | None]:
    return {v: info.block_sizes for v, info in VERSIONS.items()}


CONNECTOR_MESSAGE = f"kvConnector.type must be a connector engine.vllmVersion has ({_offer(_connectors())})"
TOKENIZER_MODE_MESSAGE = f"model.tokenizerMode must be one engine.vllmVersion accepts ({_offer(_tokenizer_modes())})"
MOCK_TOKENIZER_MESSAGE = "model.tokenizerMode mock (pdserve's hash-word tokenizer) needs engine.kind mock: real vLLM tokenizes with the model's tokenizer"
BLOCK_SIZE_MESSAGE = f"engine.blockSize must be one engine.vllmVersion accepts ({_offer(_block_sizes())})"
TP_MESSAGE = "decode.tensorParallelSize must be a multiple of prefill.tensorParallelSize with NixlConnector on vLLM 0.11 (decode TP >= prefill TP); from 0.33 on one of the two must divide the other"
PORT_MESSAGE = (
    "kvConnector.sideChannelPort: the handshake ports (vLLM 0.11: port..port+TP-1, one per TP rank; 0.33: port) "
    f"must not include the HTTP port {WORKER_HTTP_PORT} or the KV-events port {KV_EVENTS_PORT}, and must end <= 65535"
)


def _ports_clear(port: str, span: str | None) -> str:
    """CEL: ports port..port+span-1 (span None: the one port) miss the fixed ports and end <= 65535."""
    if span is None:
        return " && ".join(f"{port} != {fixed}" for fixed in (WORKER_HTTP_PORT, KV_EVENTS_PORT))
    return " && ".join([*(f"!({port} <= {fixed} && {fixed} < {port} + {span})" for fixed in (WORKER_HTTP_PORT, KV_EVENTS_PORT)), f"{port} + {span} - 1 <= 65535"])


def version_rules() -> tuple[CelRule, ...]:
    """CEL rules generated from the supported-version table (pdserve.api.vllm_versions)."""
    tp = {
        v: "self.decode.tensorParallelSize % self.prefill.tensorParallelSize == 0"
        + ("" if info.decode_tp_must_cover_prefill else " || self.prefill.tensorParallelSize % self.decode.tensorParallelSize == 0")
        for v, info in VERSIONS.items()
    }
    port_checks = []
    for v, info in VERSIONS.items():
        for per_rank in (True, False):
            names = [name for name, conn in info.connectors.items() if conn.port_per_tp_rank == per_rank]
            if names:
                clear = _ports_clear("self.kvConnector.sideChannelPort", _MAX_TP if per_rank else None)
                port_checks.append(f"(!({_V} == '{v}' && self.kvConnector.type in {vllm_versions.cel_list(names)}) || ({clear}))")
    return (
        CelRule(vllm_versions.per_version_cel(_V, vllm_versions.cel_in("self.kvConnector.type", _connectors())), CONNECTOR_MESSAGE, ".kvConnector.type"),
        CelRule(
            "self.model.tokenizerMode == 'mock' || " + vllm_versions.per_version_cel(_V, vllm_versions.cel_in("self.model.tokenizerMode", _tokenizer_modes())),
            TOKENIZER_MODE_MESSAGE,
            ".model.tokenizerMode",
        ),
        CelRule("self.model.tokenizerMode != 'mock' || self.engine.kind == 'mock'", MOCK_TOKENIZER_MESSAGE, ".model.tokenizerMode"),
        CelRule(vllm_versions.per_version_cel(_V, vllm_versions.cel_in("self.engine.blockSize", _block_sizes())), BLOCK_SIZE_MESSAGE, ".engine.blockSize"),
        CelRule(f"self.kvConnector.type != 'NixlConnector' || {vllm_versions.per_version_cel(_V, tp)}", TP_MESSAGE, ".decode.tensorParallelSize"),
        CelRule(" && ".join(port_checks), PORT_MESSAGE, ".kvConnector.sideChannelPort"),
    )


def version_problems(spec: DisaggregatedServiceSpec) -> list[str]:
    """The same checks as version_rules(), in Python, each message starting with the field."""
    info = spec.engine.version
    out = []
    if spec.kv_connector.type not in info.connectors:
        out.append(CONNECTOR_MESSAGE)
    if spec.model.tokenizer_mode == "mock":
        if spec.engine.kind != "mock":
            out.append(MOCK_TOKENIZER_MESSAGE)
    elif spec.model.tokenizer_mode not in info.tokenizer_modes:
        out.append(TOKENIZER_MODE_MESSAGE)
    if info.block_sizes is not None and spec.engine.block_size not in info.block_sizes:
        out.append(BLOCK_SIZE_MESSAGE)
    if spec.kv_connector.type == "NixlConnector" and not info.tp_ok(spec.prefill.tensor_parallel_size, spec.decode.tensor_parallel_size):
        out.append(TP_MESSAGE)
    if spec.kv_connector.type in info.connectors:
        ports = info.side_channel_ports(spec.kv_connector.type, spec.kv_connector.side_channel_port, spec.prefill.tensor_parallel_size, spec.decode.tensor_parallel_size)
        if WORKER_HTTP_PORT in ports or KV_EVENTS_PORT in ports or ports.stop - 1 > 65535:
            out.append(PORT_MESSAGE)
    return out


class NetworkPolicySpec(ApiModel):
    """Who may reach the worker pods (a NetworkPolicy rendered by the operator; off by default)."""

    enabled: bool = Field(False, description="Render a NetworkPolicy that admits to the prefill and decode pods only this service's router (HTTP, KV events), the other workers of this service (NIXL side channel and UCX transfers, whose TCP ports are ephemeral: all TCP ports) and the metrics scrapers below (HTTP port).")
    metrics_pod_labels: dict[str, str] = Field(default_factory=lambda: {"app.kubernetes.io/name": "prometheus"}, description="Labels of the pods allowed to scrape the workers' /metrics (default: Prometheus as the Prometheus Operator labels it).")
    metrics_namespace_labels: dict[str, str] = Field(default_factory=dict, description="Labels of the namespaces those scrapers may run in; empty: any namespace.")


class DisaggregatedServiceSpec(ApiModel):
    """Desired state: the model, the engine, the KV connector, both worker pools, the router, SLOs and autoscaling."""

    model: ModelSpec = Field(description="The model to serve.")
    engine: EngineSpec = Field(default_factory=EngineSpec, description="Inference engine for both pools.")
    kv_connector: KvConnectorSpec = Field(default_factory=KvConnectorSpec, description="How KV blocks move from prefill to decode.")
    prefill: PoolSpec = Field(default_factory=PoolSpec, description="Prefill pool.")
    decode: PoolSpec = Field(default_factory=PoolSpec, description="Decode pool.")
    router: RouterSpec = Field(default_factory=RouterSpec, description="The OpenAI-compatible router in front of both pools.")
    slo: SloSpec = Field(default_factory=SloSpec, description="Latency objectives the planner sizes the pools for.")
    tracing: TracingSpec = Field(default_factory=TracingSpec, description="OpenTelemetry tracing of requests across the router and both pools.")
    autoscaling: AutoscalingSpec = Field(default_factory=AutoscalingSpec, description="Forecasting planner settings.")
    model_cache: ModelCacheSpec = Field(default_factory=ModelCacheSpec, description="Hugging Face cache volume of both pools (mounted at HF_HOME).")
    rdma: RdmaSpec = Field(default_factory=RdmaSpec, description="RDMA devices and UCX settings for the KV transfer.")
    image_pull_secrets: list[LocalObjectReference] = Field(default_factory=list, max_length=16, description="Registry credentials for the worker and router images.")
    network_policy: NetworkPolicySpec = Field(default_factory=NetworkPolicySpec, description="Restrict who may connect to the workers.")

    __cel__ = (
        _within("prefill"),
        _within("decode"),
        *version_rules(),
        CelRule("!self.rdma.enabled || self.engine.runAsRoot", RDMA_ROOT_MESSAGE, ".rdma.enabled"),
        CelRule(
            f"!({_AUTOSCALED}) || !has(self.autoscaling.gpuBudget) || self.autoscaling.gpuBudget >= "
            "self.autoscaling.prefill.min * self.prefill.tensorParallelSize + self.autoscaling.decode.min * self.decode.tensorParallelSize",
            "autoscaling.gpuBudget must hold the minimums: prefill.min * prefill.tensorParallelSize + decode.min * decode.tensorParallelSize",
            ".autoscaling.gpuBudget",
        ),
    )

    @model_validator(mode="after")
    def _check(self) -> DisaggregatedServiceSpec:
        for problem in version_problems(self):
            raise ValueError(problem)
        if self.rdma.enabled and not self.engine.run_as_root:
            raise ValueError(f"rdma.enabled: {RDMA_ROOT_MESSAGE}")
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
