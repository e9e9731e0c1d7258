"""Reads the live state the demo shows: the pools (the router's discovery file, which
the planner's process-pool actuator writes) and the workers' /metrics."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from pdserve.demo.timeline import Counters


def read_pools(discovery_file: Path) -> dict[str, list[str]]:
    """{"prefill": [url...], "decode": [url...]}; empty pools while the file is absent or being replaced."""
    try:
        data = json.loads(discovery_file.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {"prefill": [], "decode": []}
    return {role: [str(u) for u in data.get(role, [])] for role in ("prefill", "decode")}


def parse_metrics(text: str) -> dict[str, float]:
    """Sum of every sample by sample name (labels dropped), e.g. 'vllm:prefix_cache_hits_total'."""
    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            sums[s.name] = sums.get(s.name, 0.0) + float(s.value)
    return sums


async def scrape(client: httpx.AsyncClient, url: str) -> dict[str, float] | None:
    try:
        r = await client.get(f"{url}/metrics", timeout=2.0)
        r.raise_for_status()
        return parse_metrics(r.text)
    except (httpx.HTTPError, ValueError):
        return None


async def prefix_counters(client: httpx.AsyncClient, urls: list[str]) -> Counters | None:
    """Summed over every worker; None when any worker did not answer (a partial sum would fake a drop)."""
    hits = queries = 0.0
    for url in urls:
        m = await scrape(client, url)
        if m is None:
            return None
        hits += m.get("vllm:prefix_cache_hits_total", 0.0)
        queries += m.get("vllm:prefix_cache_queries_total", 0.0)
    return Counters(hits, queries)
