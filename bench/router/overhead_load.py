"""``overhead.py``'s load: concurrent streaming completions against one target (closed
loop, steady state, or paired with direct streams in the same window), client-side
TTFT / ITL, the router's CPU over the window, and the router's own overhead histograms
scraped from its /metrics."""

from __future__ import annotations

import asyncio
import contextlib
import time

import aiohttp

from procs import cpu_seconds, pct


async def one_stream(session: aiohttp.ClientSession, url: str, model: str, max_tokens: int,
                     ttfts: list[float], itls: list[float]) -> int:
    body = {"model": model, "prompt": "benchmark the router overhead please", "max_tokens": max_tokens,
            "ignore_eos": True, "stream": True}
    t0 = time.perf_counter()
    last = None
    tokens = 0
    buf = b""
    async with session.post(url + "/v1/completions", json=body) as r:
        if r.status != 200:
            raise RuntimeError(f"{url}: HTTP {r.status}: {await r.text()}")
        async for chunk in r.content.iter_any():
            now = time.perf_counter()
            buf += chunk
            while b"\n\n" in buf:
                ev, buf = buf.split(b"\n\n", 1)
                if ev.startswith(b"data: {") and b'"text":"' in ev.replace(b'": "', b'":"'):
                    tokens += 1
                    if last is None:
                        ttfts.append(now - t0)
                    else:
                        itls.append(now - last)
                    last = now
    return tokens


def new_session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=300))


async def drive(url: str, model: str, concurrency: int, requests: int, max_tokens: int,
                session: aiohttp.ClientSession | None = None) -> dict:
    ttfts: list[float] = []
    itls: list[float] = []
    queue = list(range(requests))
    tokens = 0
    async with contextlib.AsyncExitStack() as stack:
        s = session or await stack.enter_async_context(new_session())

        async def worker() -> None:
            nonlocal tokens
            while queue:
                queue.pop()
                n = await one_stream(s, url, model, max_tokens, ttfts, itls)
                tokens += n  # not `tokens += await ...`: that reads tokens before awaiting

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - t0
    return {"ttft": ttfts, "itl": itls, "tokens": tokens, "requests": requests, "wall_s": wall}


async def measure(url: str, model: str, concurrency: int, requests: int, max_tokens: int, pid: int | None,
                  cold: bool) -> tuple[dict, float]:
    """A warm-up, then the measured burst; returns its results and the router's CPU
    seconds during it. Warm (default): the warm-up runs at full concurrency on the same
    client session, so the burst opens no connections anywhere (client -> router ->
    worker pools are all warm) and measures steady-state proxying. Cold: a small warm-up
    and a fresh session, so the burst includes connection set-up on every hop (and the
    mock worker's 128-entry listen backlog, which drops SYNs under a 256-connect burst:
    1 s retransmits in the p99)."""
    async with new_session() as s:
        if cold:
            await drive(url, model, min(concurrency, 4), 8, max_tokens, s)
        else:
            await drive(url, model, concurrency, concurrency, max_tokens, s)
        cpu0 = cpu_seconds(pid) if pid else 0.0
        r = await drive(url, model, concurrency, requests, max_tokens, None if cold else s)
        return r, (cpu_seconds(pid) - cpu0 if pid else 0.0)


async def steady(url: str, model: str, concurrency: int, seconds: float, discard: int, max_tokens: int,
                 pid: int | None, metrics_url: str | None) -> dict:
    """Steady state: ``concurrency`` closed-loop streams, each sending requests back to
    back for ``seconds``; each stream's first ``discard`` requests are not recorded (the
    first wave is a burst of simultaneous arrivals every proxy serialises, the next
    still partly in step with it), nor anything started after the deadline (while
    streams stop, concurrency falls). Router CPU and its own metrics cover the window."""
    ttfts: list[float] = []
    itls: list[float] = []
    counts = {"recorded": 0, "all": 0, "tokens": 0}
    async with new_session() as s:
        # Open every connection on every hop first (a full-concurrency wave, discarded).
        await drive(url, model, concurrency, concurrency, max_tokens, s)
        before = await scrape_router_metrics(s, metrics_url)
        cpu0 = cpu_seconds(pid) if pid else 0.0
        t0 = time.perf_counter()
        deadline = t0 + seconds

        async def stream() -> None:
            i = 0
            while time.perf_counter() < deadline:
                t, g = (ttfts, itls) if i >= discard else ([], [])
                n = await one_stream(s, url, model, max_tokens, t, g)
                counts["all"] += 1
                if i >= discard:
                    counts["recorded"] += 1
                    counts["tokens"] += n
                i += 1

        await asyncio.gather(*(stream() for _ in range(concurrency)))
        wall = time.perf_counter() - t0
        cpu = cpu_seconds(pid) - cpu0 if pid else 0.0
        after = await scrape_router_metrics(s, metrics_url)
    ms = lambda v: None if v is None else round(v * 1000, 3)  # noqa: E731
    out = {"ttft_p50_ms": ms(pct(ttfts, 0.5)), "ttft_p99_ms": ms(pct(ttfts, 0.99)),
           "itl_p50_ms": ms(pct(itls, 0.5)), "itl_p99_ms": ms(pct(itls, 0.99)),
           "recorded": counts["recorded"], "requests": counts["all"], "tokens": counts["tokens"],
           "wall_s": round(wall, 3), "requests_per_s": round(counts["all"] / wall, 1)}
    if pid:
        out["router_cpu_us_per_request"] = round(cpu * 1e6 / max(counts["all"], 1), 1)
        out["router_cpu_busy"] = round(cpu / wall, 3)  # fraction of one core
    if before is not None and after is not None:
        out["internal"] = internal_overhead(before, after)
    return out


async def paired(url: str, direct_url: str, model: str, concurrency: int, seconds: float, discard: int,
                 max_tokens: int, pid: int | None, metrics_url: str | None) -> tuple[dict, dict]:
    """``concurrency`` closed-loop streams through the target and as many straight to
    the worker, at the same time from the same client: both populations meet the same
    worker queue and the same client loop, so the difference between them is the
    target's own latency, free of the run-to-run drift of the shared box that a
    sequential comparison (``steady``) has to average out."""
    ttfts: dict[str, list[float]] = {"target": [], "direct": []}
    itls: dict[str, list[float]] = {"target": [], "direct": []}
    counts = {"target": 0, "direct": 0, "all": 0}
    async with new_session() as s:
        await asyncio.gather(drive(url, model, concurrency, concurrency, max_tokens, s),
                             drive(direct_url, model, concurrency, concurrency, max_tokens, s))
        before = await scrape_router_metrics(s, metrics_url)
        cpu0 = cpu_seconds(pid) if pid else 0.0
        t0 = time.perf_counter()
        deadline = t0 + seconds

        async def stream(which: str, u: str) -> None:
            i = 0
            while time.perf_counter() < deadline:
                keep = i >= discard
                await one_stream(s, u, model, max_tokens, ttfts[which] if keep else [], itls[which] if keep else [])
                if which == "target":
                    counts["all"] += 1
                counts[which] += keep
                i += 1

        await asyncio.gather(*(stream("target", url) for _ in range(concurrency)),
                             *(stream("direct", direct_url) for _ in range(concurrency)))
        wall = time.perf_counter() - t0
        cpu = cpu_seconds(pid) - cpu0 if pid else 0.0
        after = await scrape_router_metrics(s, metrics_url)
    ms = lambda v: None if v is None else round(v * 1000, 3)  # noqa: E731
    out = {}
    for which in ("target", "direct"):
        out[which] = {"ttft_p50_ms": ms(pct(ttfts[which], 0.5)), "ttft_p99_ms": ms(pct(ttfts[which], 0.99)),
                      "itl_p50_ms": ms(pct(itls[which], 0.5)), "itl_p99_ms": ms(pct(itls[which], 0.99)),
                      "recorded": counts[which], "wall_s": round(wall, 3)}
    t = out["target"]
    t["requests_per_s"] = round(counts["all"] / wall, 1)
    if pid:
        t["router_cpu_us_per_request"] = round(cpu * 1e6 / max(counts["all"], 1), 1)
        t["router_cpu_busy"] = round(cpu / wall, 3)
    if before is not None and after is not None:
        t["internal"] = internal_overhead(before, after)
    return t, out["direct"]


ROUTER_HISTOGRAMS = {"pdserve_router_request_overhead_seconds": "arrival_to_upstream_write",
                     "pdserve_router_first_chunk_relay_seconds": "first_upstream_byte_to_client_write"}


async def scrape_router_metrics(s: aiohttp.ClientSession, url: str | None) -> dict[str, dict[str, float]] | None:
    """The router's own latency histograms (cumulative bucket counts, sum, count)."""
    if url is None:
        return None
    from prometheus_client.parser import text_string_to_metric_families

    async with s.get(url) as r:
        text = await r.text()
    out: dict[str, dict[str, float]] = {}
    for fam in text_string_to_metric_families(text):
        if fam.name not in ROUTER_HISTOGRAMS:
            continue
        h: dict[str, float] = {}
        for sample in fam.samples:
            if sample.name.endswith("_bucket"):
                h[sample.labels["le"]] = sample.value
            elif sample.name.endswith("_sum"):
                h["sum"] = sample.value
            elif sample.name.endswith("_count"):
                h["count"] = sample.value
        out[ROUTER_HISTOGRAMS[fam.name]] = h
    return out


def internal_overhead(before: dict, after: dict) -> dict:
    """Mean and bucket-bound p50/p99 (ms) of the router's histograms over a window: the
    router's own time, to tell it apart from queueing elsewhere on the shared box."""
    out = {}
    for key, h1 in after.items():
        h0 = before.get(key, {})
        n = h1.get("count", 0) - h0.get("count", 0)
        if n <= 0:
            continue
        edges = sorted((float(le), h1[le] - h0.get(le, 0.0)) for le in h1 if le not in ("sum", "count"))

        def q(p: float, edges: list[tuple[float, float]] = edges, n: float = n) -> float | None:
            for edge, cum in edges:  # the bucket's upper edge: an upper bound on the quantile
                if cum >= p * n:
                    return None if edge == float("inf") else round(edge * 1000, 3)
            return None

        out[key] = {"mean_ms": round((h1["sum"] - h0.get("sum", 0.0)) / n * 1000, 3), "p50_le_ms": q(0.5),
                    "p99_le_ms": q(0.99), "count": int(n)}
    return out
