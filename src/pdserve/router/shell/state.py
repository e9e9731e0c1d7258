"""The router's long-lived state shared by the handlers (no HTTP handling here)."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp

from pdserve.common.clock import WALL, Clock
from pdserve.router.core.block_hasher import BlockHasher
from pdserve.router.core.scheduler import PoolViews, Scheduler
from pdserve.router.shell.http1_pool import Http1Pool
from pdserve.router.shell.config import RouterConfig
from pdserve.router.shell.discovery import Endpoints
from pdserve.router.shell.kv_events import KvEventSubscriber
from pdserve.router.core.kv_index import KvIndex
from pdserve.router.shell.metrics import RouterMetrics
from pdserve.router.shell.siblings import Siblings
from pdserve.router.shell.tokenizing import load_router_tokenizer
from pdserve.router.policies import Decision, Policy, RouteRequest
from pdserve.router.shell.workers import WorkerPool

if TYPE_CHECKING:
    from pdserve.router.shell.tracing import Tracing

log = logging.getLogger("pdserve.router")


@dataclass
class Choice:
    decision: Decision
    pool: str  # "prefill" | "decode"


class RouterState:
    def __init__(self, cfg: RouterConfig, clock: Clock = WALL) -> None:
        self.cfg = cfg
        # Every time the scheduler sees comes from here (wall in service, virtual in tests).
        self.clock = clock
        self.pool = WorkerPool(cooldown_s=cfg.worker_cooldown_s, clock=clock)
        self.hasher = BlockHasher(cfg.routing.block_size)
        self.index = KvIndex(self.hasher)
        self.metrics = RouterMetrics()
        # Before the policies: without a tokenizer the fallback changes them (tokenizing.py).
        self.tokenizer = load_router_tokenizer(cfg, self.metrics.registry)
        # Every routing decision is the scheduler's (pdserve.router.core), as in the simulator.
        self.scheduler = Scheduler(cfg.routing, self.index)
        self.session: aiohttp.ClientSession | None = None
        # Completions go through the lean client unless configured otherwise (see http1.py).
        self.http: Http1Pool | None = None
        self.kv_sub: KvEventSubscriber | None = None
        self.active = 0
        # Upstream responses being relayed to clients, so a shutdown can end them (relay.end_streams).
        self.relaying: set[Any] = set()
        # Set when the shutdown drain ends those streams: a migration still being placed gives up too.
        self.ending = asyncio.Event()
        self.models_cache: tuple[float, list[dict]] = (0.0, [])
        # The other processes of a --processes N set, whose readiness /health reports with this one's.
        self.siblings = Siblings.from_env()
        self.tracing: Tracing | None = None
        if cfg.otlp_traces_endpoint:  # the SDK is imported only then: off costs nothing
            from pdserve.router.shell.tracing import Tracing, provider_for

            self.tracing = Tracing(provider_for(cfg.otlp_traces_endpoint, cfg.otlp_traces_sample_ratio))
        policies = self.scheduler.policies
        self.prefill_policy = policies.prefill
        self.decode_policy = policies.local_decode  # the decode worker prefills too (colocated, local, migration)
        self.pd_decode_policy = policies.pd_decode

    @property
    def uses_prefixes(self) -> bool:
        """Whether any configured policy looks at block hashes."""
        return self.scheduler.uses_prefixes

    @property
    def all_policies(self) -> tuple[Policy, ...]:
        return self.scheduler.policies.all()

    @property
    def disaggregated(self) -> bool:
        return bool(self.pool.urls("prefill"))

    def apply_endpoints(self, eps: Endpoints) -> None:
        added, removed = self.pool.update(eps)
        for url in removed:
            self.scheduler.forget_worker(url)
            for role in ("prefill", "decode"):
                self.metrics.forget_worker(url, role)
        if added or removed:
            log.info("workers now: prefill=%s decode=%s (+%d -%d, from %s)", self.pool.urls("prefill"),
                     self.pool.urls("decode"), len(added), len(removed), eps.source)
        if self.siblings is not None:
            self.siblings.mark(len(self.pool.urls("decode")))
        if self.kv_sub is not None:
            self.kv_sub.sync({u: w.endpoint.kv_events for u, w in self.pool.workers.items() if w.endpoint.kv_events})

    def pool_views(self) -> PoolViews:
        """The healthy workers per pool, as the scheduler takes them."""
        now = self.clock.monotonic()
        return PoolViews(decode=self.pool.views("decode", now),
                         prefill=self.pool.views("prefill", now) if self.disaggregated else None)

    def choose(self, pool: str, policy: Policy, req: RouteRequest, exclude: set[str]) -> Choice | None:
        """A (re-)placement on ``pool`` avoiding ``exclude`` (retries, migration)."""
        t0 = time.perf_counter()
        now = self.clock.monotonic()
        d = self.scheduler.select(policy, req, self.pool.views(pool, now, exclude=exclude), now)
        if d is None:
            return None
        self.metrics.decision_for(pool).observe(time.perf_counter() - t0)
        return Choice(d, pool)

    def refresh_gauges(self) -> None:
        now = self.clock.monotonic()
        m = self.metrics
        for url, w in self.pool.workers.items():
            m.worker_running.labels(url, w.role).set(w.running)
            m.worker_waiting.labels(url, w.role).set(w.waiting)
            m.worker_kv.labels(url, w.role).set(w.kv_usage)
            m.worker_up.labels(url, w.role).set(1 if w.healthy(now) else 0)
            mine = sum(p.ledger.requests(url) for p in self.all_policies)
            m.worker_inflight.labels(url, w.role).set(mine)
        m.indexed_blocks.set(len(self.index))
