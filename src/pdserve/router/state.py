"""The router's long-lived state shared by the handlers (no HTTP handling here)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import aiohttp

from pdserve.router.http1 import Http1Pool
from pdserve.router.admission import AdmissionControl
from pdserve.router.block_hasher import BlockHasher
from pdserve.router.config import RouterConfig
from pdserve.router.discovery import Endpoints
from pdserve.router.kv_events import KvEventSubscriber
from pdserve.router.kv_index import KvIndex
from pdserve.router.metrics import RouterMetrics
from pdserve.router.tokenizing import load_router_tokenizer
from pdserve.router.policies import CostWeights, Decision, Policy, RouteRequest, make_policy, pool_weights
from pdserve.router.workers import WorkerPool

log = logging.getLogger("pdserve.router")


def cost_weights(raw: dict[str, float]) -> CostWeights:
    """CostWeights from a {field: value} mapping; unknown fields or bad values raise
    ValueError naming them."""
    known = set(CostWeights.__dataclass_fields__)
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"unknown router weight(s) {unknown}; known: {sorted(known)}")
    for k, v in raw.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"router weight {k!r} must be a number, got {v!r}")
    return CostWeights(**{k: float(v) for k, v in raw.items()})


@dataclass
class Choice:
    decision: Decision
    pool: str  # "prefill" | "decode"


class RouterState:
    def __init__(self, cfg: RouterConfig) -> None:
        self.cfg = cfg
        self.pool = WorkerPool(cooldown_s=cfg.worker_cooldown_s)
        self.hasher = BlockHasher(cfg.block_size)
        self.index = KvIndex(self.hasher)
        self.metrics = RouterMetrics()
        # Before the policies: without a tokenizer the fallback changes them (tokenizing.py).
        self.tokenizer = load_router_tokenizer(cfg, self.metrics.registry)
        self.admission = AdmissionControl(cfg.ttft_slo_ms, cfg.admission_factor, cfg.prefill_tokens_per_s)
        self.policies: dict[str, Policy] = {}
        self._decode_policy_name = cfg.decode_policy
        self.session: aiohttp.ClientSession | None = None
        # Completions go through the lean client unless configured otherwise (see http1.py).
        self.http: Http1Pool | None = None
        self.kv_sub: KvEventSubscriber | None = None
        self.active = 0
        self.models_cache: tuple[float, list[dict]] = (0.0, [])
        self.prefill_policy = self._make(cfg.policy, "prefill")
        self.decode_policy = self._make(cfg.decode_policy or cfg.policy, "decode")
        self.pd_decode_policy = self._make(cfg.decode_policy or "least_loaded", "decode")

    def _make(self, name: str, pool: str) -> Policy:
        key = name.replace("-", "_")
        opts: dict = {"block_size": self.cfg.block_size}
        if key == "kv_aware":
            opts["index"] = self.index
        if key in ("kv_aware", "prefix_approx"):
            base = cost_weights(self.cfg.weights) if self.cfg.weights else CostWeights()
            opts["weights"] = pool_weights(base, pool)
        return make_policy(name, **opts)

    @property
    def uses_prefixes(self) -> bool:
        """Whether any configured policy looks at block hashes."""
        return any(p.name in ("kv_aware", "prefix_approx", "cache_aware") for p in self.all_policies)

    @property
    def all_policies(self) -> list[Policy]:
        return [self.prefill_policy, self.decode_policy, self.pd_decode_policy]

    @property
    def disaggregated(self) -> bool:
        return bool(self.pool.urls("prefill"))

    def apply_endpoints(self, eps: Endpoints) -> None:
        added, removed = self.pool.update(eps)
        for url in removed:
            for p in self.all_policies:
                p.forget_worker(url)
            for role in ("prefill", "decode"):
                self.metrics.forget_worker(url, role)
        if added or removed:
            log.info("workers now: prefill=%s decode=%s (+%d -%d, from %s)", self.pool.urls("prefill"),
                     self.pool.urls("decode"), len(added), len(removed), eps.source)
        if self.kv_sub is not None:
            self.kv_sub.sync({u: w.endpoint.kv_events for u, w in self.pool.workers.items() if w.endpoint.kv_events})

    def choose(self, pool: str, policy: Policy, req: RouteRequest, exclude: set[str]) -> Choice | None:
        views = self.pool.views(pool, exclude=exclude)
        if not views:
            return None
        t0 = time.perf_counter()
        d = policy.select(req, views, time.monotonic())
        self.metrics.decision_for(pool).observe(time.perf_counter() - t0)
        return Choice(d, pool)

    def refresh_gauges(self) -> None:
        now = time.monotonic()
        m = self.metrics
        for url, w in self.pool.workers.items():
            m.worker_running.labels(url, w.role).set(w.running)
            m.worker_waiting.labels(url, w.role).set(w.waiting)
            m.worker_kv.labels(url, w.role).set(w.kv_usage)
            m.worker_up.labels(url, w.role).set(1 if w.healthy(now) else 0)
            mine = sum(p.ledger.requests(url) for p in self.all_policies)
            m.worker_inflight.labels(url, w.role).set(mine)
        m.indexed_blocks.set(len(self.index))
