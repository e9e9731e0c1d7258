"""The live worker set: membership from discovery, load from each worker's /metrics,
health from failures, and the router's own in-flight accounting."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

import aiohttp

from pdserve.common.clock import WALL, Clock
from pdserve.router.shell.discovery import Endpoint, Endpoints
from pdserve.router.policies import WorkerView

log = logging.getLogger("pdserve.router.shell.workers")

_GAUGES = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv_usage",
}


def _gauge_lines(text: str) -> list[str]:
    """The lines starting with one of the three gauges' names, found with str.find: a
    page of ~36 KB (vLLM's, or the mock worker's with its histograms) is mostly other
    metrics, and a Python loop over every line cost ~0.2 ms a scrape (this: ~0.03)."""
    padded = "\n" + text
    lines = []
    for name in _GAUGES:
        key = "\n" + name
        at = padded.find(key)
        while at >= 0:
            end = padded.find("\n", at + 1)
            lines.append(padded[at + 1 : end] if end >= 0 else padded[at + 1 :])
            at = padded.find(key, at + 1)
    return lines


def parse_load(text: str) -> dict[str, float]:
    """Running/waiting/KV usage from a vLLM /metrics page, summed over engines.

    A scan for the three gauges' lines: prometheus_client's parser is ~50x slower and
    this runs for every worker every scrape interval."""
    out: dict[str, float] = {}
    for line in _gauge_lines(text):
        name = line.split("{", 1)[0].split(" ", 1)[0]
        key = _GAUGES.get(name)
        if key is None:
            continue
        try:
            value = float(line.rsplit(" ", 1)[1])
        except (IndexError, ValueError):
            continue
        out[key] = (max if key == "kv_usage" else float.__add__)(out.get(key, 0.0), value)
    return out


@dataclass
class WorkerState:
    endpoint: Endpoint
    role: str
    running: int = 0
    waiting: int = 0
    kv_usage: float = 0.0
    scraped_at: float = 0.0
    failures: int = 0
    down_until: float = 0.0
    scrape_timeouts: int = 0
    models: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.endpoint.url

    def healthy(self, now: float) -> bool:
        return now >= self.down_until


class WorkerPool:
    def __init__(self, cooldown_s: float = 2.0, clock: Clock = WALL) -> None:
        self.workers: dict[str, WorkerState] = {}  # url -> state (a URL serves one role)
        self.cooldown_s = cooldown_s
        # The router's clock: cool-downs are set and judged on the time routing decides by.
        self.clock = clock
        self.version = 0

    def update(self, eps: Endpoints) -> tuple[set[str], set[str]]:
        """Apply a discovery result; returns (added, removed) worker ids."""
        wanted = {e.url: (e, "prefill") for e in eps.prefill}
        wanted.update({e.url: (e, "decode") for e in eps.decode if e.url not in wanted})
        removed = {u for u in self.workers if u not in wanted or self.workers[u].role != wanted[u][1]}
        for u in removed:
            del self.workers[u]
        added = set()
        for u, (e, role) in wanted.items():
            if u not in self.workers:
                self.workers[u] = WorkerState(e, role)
                added.add(u)
            else:
                self.workers[u].endpoint = e
        if added or removed:
            self.version += 1
        return added, removed

    def role_of(self, url: str) -> str | None:
        w = self.workers.get(url)
        return w.role if w else None

    def urls(self, role: str) -> list[str]:
        return [u for u, w in self.workers.items() if w.role == role]

    def views(self, role: str, now: float | None = None, exclude: Iterable[str] = (),
              fail_open: bool = True) -> list[WorkerView]:
        """Healthy workers of ``role``. With ``fail_open``, when every one is cooling
        down after a failure, all of them (a try beats a certain 503)."""
        now = self.clock.monotonic() if now is None else now
        skip = set(exclude)
        pool = [(u, w) for u, w in self.workers.items() if w.role == role and u not in skip]
        healthy = [(u, w) for u, w in pool if w.healthy(now)]
        chosen = healthy if healthy or not fail_open else pool
        return [WorkerView(u, w.running, w.waiting, 0, w.kv_usage) for u, w in chosen]

    def mark_failed(self, url: str, now: float | None = None) -> None:
        w = self.workers.get(url)
        if w is not None:
            w.failures += 1
            w.down_until = (self.clock.monotonic() if now is None else now) + self.cooldown_s

    def mark_ok(self, url: str) -> None:
        w = self.workers.get(url)
        if w is not None and w.failures:
            w.failures = 0
            w.down_until = 0.0

    async def scrape_once(self, session: aiohttp.ClientSession, timeout_s: float) -> None:
        async def one(w: WorkerState) -> None:
            try:
                async with session.get(w.url + "/metrics", timeout=aiohttp.ClientTimeout(total=timeout_s)) as r:
                    if r.status != 200:
                        raise aiohttp.ClientResponseError(r.request_info, (), status=r.status)
                    load = parse_load(await r.text())
            except TimeoutError:
                # A busy worker answers /metrics slowly: that is load, not death.
                w.scrape_timeouts += 1
                return
            except (aiohttp.ClientError, OSError):
                self.mark_failed(w.url)
                return
            w.running = int(load.get("running", 0))
            w.waiting = int(load.get("waiting", 0))
            w.kv_usage = float(load.get("kv_usage", 0.0))
            w.scraped_at = self.clock.monotonic()
            self.mark_ok(w.url)

        await asyncio.gather(*(one(w) for w in list(self.workers.values())))

    async def fetch_models(self, session: aiohttp.ClientSession, timeout_s: float) -> list[dict]:
        """The union of the workers' /v1/models entries, by id."""
        seen: dict[str, dict] = {}

        async def one(w: WorkerState) -> None:
            try:
                async with session.get(w.url + "/v1/models", timeout=aiohttp.ClientTimeout(total=timeout_s)) as r:
                    data = await r.json(content_type=None)
            except (TimeoutError, aiohttp.ClientError, OSError, ValueError):
                return
            entries = data.get("data", []) if isinstance(data, dict) else []
            w.models = [m["id"] for m in entries if isinstance(m, dict) and isinstance(m.get("id"), str)]
            for m in entries:
                if isinstance(m, dict) and isinstance(m.get("id"), str):
                    seen.setdefault(m["id"], m)

        await asyncio.gather(*(one(w) for w in list(self.workers.values())))
        return list(seen.values())

    def known_models(self) -> set[str]:
        return {m for w in self.workers.values() for m in w.models}
