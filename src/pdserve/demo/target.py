"""What the demo drives and watches: its own local stack, or an endpoint that already runs.

The replay, the live view and the report are the same for both; only where the pool
sizes, the prefix-cache counters and the planner's forecast come from differs:
- ``LocalTarget``: the planner's discovery file, each worker's /metrics, the planner's /metrics.
- ``EndpointTarget`` (``pdserve demo --endpoint URL``): a pdserve router anywhere. Pool
  sizes come from its /health; the workers it routes to are the ``worker`` labels of its
  ``pdserve_router_worker_up`` series, and their /metrics give the prefix-cache counters
  when they are reachable from here; the planner's forecast only with ``--planner-metrics``.
"""

from __future__ import annotations

from typing import Protocol

import httpx

from pdserve.demo import observe
from pdserve.demo.stack import Stack
from pdserve.demo.timeline import Counters


class Target(Protocol):
    router_url: str
    model: str

    async def pools(self, client: httpx.AsyncClient) -> tuple[int, int]: ...

    async def prefix_counters(self, client: httpx.AsyncClient) -> Counters | None: ...

    async def predicted_rps(self, client: httpx.AsyncClient) -> float | None: ...

    def check_alive(self) -> None: ...


async def _predicted(client: httpx.AsyncClient, url: str | None) -> float | None:
    if url is None:
        return None
    planner = await observe.scrape(client, url)
    return planner.get("pdserve_planner_predicted_request_rate") if planner else None


class LocalTarget:
    """The demo's own planner, process pool of mock workers and router."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.router_url = stack.router_url
        self.model = stack.config.model

    async def pools(self, client: httpx.AsyncClient) -> tuple[int, int]:
        pools = observe.read_pools(self.stack.discovery_file)
        return len(pools["prefill"]), len(pools["decode"])

    async def prefix_counters(self, client: httpx.AsyncClient) -> Counters | None:
        # Prefill workers hold the prompts' KV in P/D; they are the cache that routing steers.
        return await observe.prefix_counters(client, observe.read_pools(self.stack.discovery_file)["prefill"])

    async def predicted_rps(self, client: httpx.AsyncClient) -> float | None:
        return await _predicted(client, self.stack.planner_metrics_url)

    def check_alive(self) -> None:
        self.stack.check_alive()


class EndpointTarget:
    """A router that is already running (a cluster's Service, a port-forward, a local one)."""

    def __init__(self, router_url: str, model: str, planner_metrics_url: str | None = None) -> None:
        self.router_url = router_url.rstrip("/")
        self.model = model
        self.planner_metrics_url = planner_metrics_url
        self._last_pools = (0, 0)

    @classmethod
    async def connect(cls, router_url: str, model: str | None, planner_metrics_url: str | None = None,
                      timeout_s: float = 10.0) -> EndpointTarget:
        """Check the endpoint answers and pick the model it serves; ValueError says why not."""
        url = router_url.rstrip("/")
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            try:
                resp = await client.get(f"{url}/v1/models")
                resp.raise_for_status()
                served = [m["id"] for m in resp.json().get("data", [])]
            except (httpx.HTTPError, ValueError, KeyError, TypeError) as e:
                raise ValueError(f"--endpoint {router_url}: GET /v1/models failed: {e}") from e
        if model is None:
            if not served:
                raise ValueError(f"--endpoint {router_url}: it serves no model yet")
            model = served[0]
        elif served and model not in served:
            raise ValueError(f"--endpoint {router_url} serves {served}, not --model {model}")
        return cls(url, model, planner_metrics_url)

    async def pools(self, client: httpx.AsyncClient) -> tuple[int, int]:
        try:
            r = await client.get(f"{self.router_url}/health", timeout=2.0)
            workers = r.json().get("workers", {})  # 503 with the same body when no decode worker is up
            self._last_pools = (int(workers.get("prefill", 0)), int(workers.get("decode", 0)))
        except (httpx.HTTPError, ValueError, AttributeError, TypeError):
            pass  # keep the last answer: one slow /health is not a pool of zero
        return self._last_pools

    async def _worker_urls(self, client: httpx.AsyncClient, role: str) -> list[str] | None:
        try:
            r = await client.get(f"{self.router_url}/metrics", timeout=2.0)
            r.raise_for_status()
        except httpx.HTTPError:
            return None
        from prometheus_client.parser import text_string_to_metric_families

        urls = []
        for family in text_string_to_metric_families(r.text):
            for s in family.samples:
                if s.name == "pdserve_router_worker_up" and s.labels.get("role") == role and s.value >= 1:
                    urls.append(s.labels["worker"])
        return urls

    async def prefix_counters(self, client: httpx.AsyncClient) -> Counters | None:
        prefill = await self._worker_urls(client, "prefill")
        if prefill is None:
            return None
        # Colocated deployments have no prefill pool: their decode workers hold the cache.
        urls = prefill or await self._worker_urls(client, "decode") or []
        return await observe.prefix_counters(client, urls) if urls else None

    async def predicted_rps(self, client: httpx.AsyncClient) -> float | None:
        return await _predicted(client, self.planner_metrics_url)

    def check_alive(self) -> None:
        return None  # not ours to supervise: failed requests show in the report
