"""Router configuration (the CLI fills it; tests build it directly)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class RouterConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    prefill: list[str] = field(default_factory=list)
    decode: list[str] = field(default_factory=list)
    policy: str = "kv_aware"
    decode_policy: str | None = None  # default: least_loaded under P/D, else `policy`
    weights: dict[str, float] | None = None  # CostWeights fields for kv_aware / prefix_approx
    discovery_file: Path | None = None
    k8s_service: str | None = None
    k8s_namespace: str = "default"
    worker_http_port: int = 8000
    kv_events: bool = False
    kv_events_port: int = 5557
    block_size: int = 16
    disagg_threshold_tokens: int = 0
    ttft_slo_ms: float | None = None
    admission_factor: float = 3.0
    prefill_tokens_per_s: float = 20000.0
    max_concurrency: int = 4096
    max_body_bytes: int = 16 * 1024 * 1024
    connect_timeout_s: float = 3.0
    prefill_timeout_s: float = 600.0
    read_timeout_s: float = 120.0  # longest silence tolerated between streamed chunks
    request_timeout_s: float = 3600.0
    max_retries: int = 2
    migrate: bool = True
    scrape_interval_s: float = 0.5
    worker_cooldown_s: float = 2.0
    debug_header: bool = True
    upstream_client: str = "http1"  # http1 (router's own lean client) | aiohttp
    # The served model's tokenizer, as vLLM's --tokenizer / --tokenizer-mode (pdserve.tokenization).
    tokenizer: str | None = None
    tokenizer_mode: str = "auto"
    tokenizer_revision: str | None = None
    trust_remote_code: bool = False
    chat_template: str | None = None
    chat_template_content_format: str = "auto"
    tokenizer_fallback: str = "none"  # none | approx (see router/tokenizing.py)


    def validate(self) -> None:
        sources = sum(bool(x) for x in (self.prefill or self.decode, self.discovery_file, self.k8s_service))
        if sources == 0:
            raise ValueError("no workers: give --decode (and --prefill), --discovery-file or --k8s-service")
        if sources > 1:
            raise ValueError("choose one worker source: static URLs, --discovery-file or --k8s-service")
        if self.prefill and not self.decode:
            raise ValueError("--prefill needs at least one --decode worker")
        for name in ("block_size", "max_concurrency", "max_body_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        for name in ("connect_timeout_s", "prefill_timeout_s", "read_timeout_s", "request_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.upstream_client not in ("http1", "aiohttp"):
            raise ValueError(f"--upstream-client must be http1 or aiohttp, got {self.upstream_client!r}")
        if self.max_retries < 0 or self.disagg_threshold_tokens < 0:
            raise ValueError("--max-retries and --disagg-threshold-tokens must be >= 0")
        from pdserve.tokenization import TOKENIZER_MODES

        if self.tokenizer_mode not in TOKENIZER_MODES:
            raise ValueError(f"--tokenizer-mode must be one of {', '.join(TOKENIZER_MODES)}, got {self.tokenizer_mode!r}")
        if self.tokenizer_fallback not in ("none", "approx"):
            raise ValueError(f"--tokenizer-fallback must be none or approx, got {self.tokenizer_fallback!r}")
        if self.tokenizer_mode != "mock" and not self.tokenizer and self.tokenizer_fallback == "none":
            raise ValueError("no tokenizer: give --tokenizer (the served model's hub id or local directory, as for "
                             "vLLM), --tokenizer-mode mock for mock workers, or --tokenizer-fallback approx")
