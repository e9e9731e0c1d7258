"""Router configuration (the CLI fills it; tests build it directly), and the routing
flag set shared by ``pdserve router`` and ``pdserve sim``."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, fields
from pathlib import Path

from pdserve.router.core.spec import AdmissionSpec, PolicyName, RoutingSpec
from pdserve.router.policies import CostWeights


@dataclass
class RouterConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    prefill: list[str] = field(default_factory=list)
    decode: list[str] = field(default_factory=list)
    routing: RoutingSpec = field(default_factory=RoutingSpec)
    discovery_file: Path | None = None
    k8s_service: str | None = None
    k8s_namespace: str = "default"
    worker_http_port: int = 8000
    kv_events: bool = False
    kv_events_port: int = 5557
    max_concurrency: int = 4096
    max_body_bytes: int = 16 * 1024 * 1024
    connect_timeout_s: float = 3.0
    prefill_timeout_s: float = 600.0
    read_timeout_s: float = 120.0  # longest silence tolerated between streamed chunks
    # After SIGTERM: how long in-flight requests may finish; streams still running a second
    # before it end with an error event (router/shell/relay.py end_streams) rather than a cut connection.
    shutdown_timeout_s: float = 10.0
    request_timeout_s: float = 3600.0
    max_retries: int = 2
    migrate: bool = True
    scrape_interval_s: float = 0.5
    worker_cooldown_s: float = 2.0
    debug_header: bool = True
    upstream_client: str = "http1"  # http1 (router's own lean client) | aiohttp
    http_server: str = "lean"  # lean (router/shell/lean_server.py, the default) | aiohttp
    # The served model's tokenizer, as vLLM's --tokenizer / --tokenizer-mode (pdserve.tokenization).
    tokenizer: str | None = None
    tokenizer_mode: str = "auto"
    tokenizer_revision: str | None = None
    trust_remote_code: bool = False
    chat_template: str | None = None
    chat_template_content_format: str = "auto"
    tokenizer_fallback: str = "none"  # none | approx (see router/shell/tokenizing.py)
    api_keys: list[str] = field(default_factory=list)  # --api-key / VLLM_API_KEY (router/shell/auth.py)
    vllm_version: str | None = None  # the workers' release: its chat preprocessing rules (tokenization/rules.py)
    otlp_traces_endpoint: str | None = None  # OTLP/HTTP collector; None: tracing off (router/shell/tracing.py)
    otlp_traces_sample_ratio: float = 1.0  # new traces kept; a client's sampled flag is always followed


    def validate(self) -> None:
        sources = sum(bool(x) for x in (self.prefill or self.decode, self.discovery_file, self.k8s_service))
        if sources == 0:
            raise ValueError("no workers: give --decode (and --prefill), --discovery-file or --k8s-service")
        if sources > 1:
            raise ValueError("choose one worker source: static URLs, --discovery-file or --k8s-service")
        if self.prefill and not self.decode:
            raise ValueError("--prefill needs at least one --decode worker")
        for name in ("max_concurrency", "max_body_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        for name in ("connect_timeout_s", "prefill_timeout_s", "read_timeout_s", "request_timeout_s", "shutdown_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.upstream_client not in ("http1", "aiohttp"):
            raise ValueError(f"--upstream-client must be http1 or aiohttp, got {self.upstream_client!r}")
        if self.http_server not in ("lean", "aiohttp"):
            raise ValueError(f"--http-server must be lean or aiohttp, got {self.http_server!r}")
        if not 0.0 <= self.otlp_traces_sample_ratio <= 1.0:
            raise ValueError(f"--otlp-traces-sample-ratio must be in [0, 1], got {self.otlp_traces_sample_ratio}")
        if self.otlp_traces_endpoint:
            from urllib.parse import urlsplit

            u = urlsplit(self.otlp_traces_endpoint)
            if u.scheme not in ("http", "https") or not u.netloc:
                raise ValueError(f"--otlp-traces-endpoint must be an http(s):// URL (OTLP/HTTP), "
                                 f"got {self.otlp_traces_endpoint!r}")
        if self.max_retries < 0:
            raise ValueError(f"--max-retries must be >= 0, got {self.max_retries}")
        from pdserve.tokenization import TOKENIZER_MODES

        if self.tokenizer_mode not in TOKENIZER_MODES:
            raise ValueError(f"--tokenizer-mode must be one of {', '.join(TOKENIZER_MODES)}, got {self.tokenizer_mode!r}")
        if self.tokenizer_fallback not in ("none", "approx"):
            raise ValueError(f"--tokenizer-fallback must be none or approx, got {self.tokenizer_fallback!r}")
        if self.tokenizer_mode != "mock" and not self.tokenizer and self.tokenizer_fallback == "none":
            raise ValueError("no tokenizer: give --tokenizer (the served model's hub id or local directory, as for "
                             "vLLM), --tokenizer-mode mock for mock workers, or --tokenizer-fallback approx")


# CostWeights field -> its flag: --cost-overlap-weight, --cost-request-tokens, ...
WEIGHT_FLAGS = {f.name: "--cost-" + f.name.replace("_", "-") for f in fields(CostWeights)}


def _policy_arg(text: str) -> PolicyName:
    try:
        return PolicyName.parse(text)
    except ValueError as e:  # argparse shows an ArgumentTypeError's own message
        raise argparse.ArgumentTypeError(str(e)) from None


def add_routing_args(p: argparse.ArgumentParser, *, block_size: bool = True, admission: bool = True) -> None:
    """The routing flags (one typed flag per RoutingSpec field), for every CLI that routes.
    ``pdserve sim`` has its own --block-size (the engines') and --ttft-slo-ms (its SLO
    report), so it leaves those two groups out."""
    r = p.add_argument_group("routing")
    names = [n.value for n in PolicyName]
    r.add_argument("--policy", type=_policy_arg, default=PolicyName.KV_AWARE, metavar="{" + ",".join(names) + "}",
                   help="places prompts: on the prefill pool under P/D, else on the decode pool")
    r.add_argument("--decode-policy", type=_policy_arg, default=None, metavar="POLICY",
                   help="policy for the decode pool (default: least_loaded after a remote prefill, else --policy)")
    if block_size:
        r.add_argument("--block-size", type=int, default=16,
                       help="the workers' KV block size (vLLM's --block-size; one for both pools): the KV index keys "
                            "blocks of this many tokens, and ignores events of another size")
    r.add_argument("--disagg-threshold-tokens", type=int, default=0,
                   help="skip P/D (decode prefills locally) when fewer prompt tokens than this are uncached")
    r.add_argument("--decode-reuse-threshold-tokens", type=int, default=0,
                   help="skip P/D when a decode worker holds the prompt's prefix (KV events) and fewer prompt tokens "
                        "than this, and than on the prefill worker, are uncached there: that worker prefills it")
    r.add_argument("--max-prefill-queue-tokens", type=int, default=0,
                   help="skip P/D when the chosen prefill worker queues more prompt tokens than this (its "
                        "time-to-drain times its prefill rate) and a decode worker would finish the prefill sooner: "
                        "that decode worker prefills it (Dynamo's max_prefill_queue_size, in tokens; 0 = off)")
    defaults = CostWeights()
    for name, flag in WEIGHT_FLAGS.items():
        r.add_argument(flag, type=float, default=None, dest=f"cost_{name}",
                       help=f"kv_aware / prefix_approx cost weight {name} (default {getattr(defaults, name)})")
    if not admission:
        return
    a = p.add_argument_group("admission")
    a.add_argument("--ttft-slo-ms", type=float, help="TTFT SLO; with it, refuse early (503) when predicted TTFT "
                   "exceeds --admission-factor x SLO")
    a.add_argument("--admission-factor", type=float, default=3.0)
    a.add_argument("--prefill-tokens-per-s", type=float, default=20000.0,
                   help="initial prefill throughput guess for TTFT prediction (learned online)")


def routing_from_args(args: argparse.Namespace) -> RoutingSpec:
    """RoutingSpec from :func:`add_routing_args` flags; ValueError names a bad value."""
    given = {name: getattr(args, f"cost_{name}") for name in WEIGHT_FLAGS if getattr(args, f"cost_{name}") is not None}
    admission = (AdmissionSpec(args.ttft_slo_ms, args.admission_factor, args.prefill_tokens_per_s)
                 if hasattr(args, "admission_factor") else AdmissionSpec())
    return RoutingSpec(
        policy=args.policy, decode_policy=args.decode_policy, weights=CostWeights(**given),
        block_size=args.block_size if args.block_size is not None else 16,
        disagg_threshold_tokens=args.disagg_threshold_tokens,
        decode_reuse_threshold_tokens=args.decode_reuse_threshold_tokens,
        max_prefill_queue_tokens=args.max_prefill_queue_tokens, admission=admission,
    )


def routing_flags(spec: RoutingSpec) -> list[str]:
    """The flags :func:`routing_from_args` reads back as ``spec`` (how the operator
    configures the router it deploys); defaults are left out."""
    out = ["--policy", spec.policy.value]
    if spec.decode_policy is not None:
        out += ["--decode-policy", spec.decode_policy.value]
    # The workers' block size: the router hashes prompts in blocks of this size.
    out += ["--block-size", str(spec.block_size)]
    if spec.disagg_threshold_tokens:
        out += ["--disagg-threshold-tokens", str(spec.disagg_threshold_tokens)]
    if spec.decode_reuse_threshold_tokens:
        out += ["--decode-reuse-threshold-tokens", str(spec.decode_reuse_threshold_tokens)]
    if spec.max_prefill_queue_tokens:
        out += ["--max-prefill-queue-tokens", str(spec.max_prefill_queue_tokens)]
    defaults = CostWeights()
    for name, flag in WEIGHT_FLAGS.items():
        value = getattr(spec.weights, name)
        if value != getattr(defaults, name):
            out += [flag, repr(value)]
    a = spec.admission
    if a.ttft_slo_ms is not None:
        out += ["--ttft-slo-ms", repr(a.ttft_slo_ms), "--admission-factor", repr(a.factor),
                "--prefill-tokens-per-s", repr(a.prefill_tokens_per_s)]
    return out
