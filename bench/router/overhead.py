"""Router overhead: TTFT and ITL added over going direct to a worker, and router CPU.

Starts one mock vLLM worker with an effectively infinite speed-up (the simulated GPU
takes no time, so any latency is serving overhead), then drives N concurrent
streaming completions against (a) the worker directly, (b) ``pdserve router`` (with
uvloop, and with the stock asyncio loop), and,
if installed in ``--bench-venv``, (c) ``vllm-router`` and (d) ``sglang-router``
(PyPI), all side by side in one run. Reports client-side TTFT/ITL p50/p99 per
concurrency level, the p99 added over direct, and the router's CPU time per 1000
streamed tokens (from /proc). Everything shares this machine's cores, so compare
ratios within one run, not absolute numbers across machines.

    .venv/bin/python bench/router/overhead.py --out bench/router/results/overhead.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import aiohttp
from rich.console import Console
from rich.table import Table

from pdserve.common.procs import stop_group
from pdserve.worker.testing import start_worker

ROOT = Path(__file__).resolve().parents[2]
TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process and its threads, plus those of its live descendants
    (`pdserve router --processes N` is a supervisor and N routers; a Python launcher may
    run a router as its child)."""
    total = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            f = _stat(p)
            total += int(f[11]) + int(f[12])
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            pass  # exited meanwhile
    return total / TICK


def pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


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


def spread(xs: list[float]) -> dict:
    """Median over rounds, with min and max."""
    xs = sorted(xs)
    mid = len(xs) // 2
    med = xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2
    return {"median": round(med, 3), "min": round(xs[0], 3), "max": round(xs[-1], 3), "rounds": len(xs)}


def steady_summary(rounds: dict[str, list[dict]]) -> dict[str, dict]:
    """Per target: added TTFT/ITL p50/p99 as the median (min..max) over rounds of
    (target - direct in the same round), plus the medians of the raw values."""
    out: dict[str, dict] = {}
    direct = rounds.get("direct", [])
    for name, rs in rounds.items():
        if not rs:
            continue
        o: dict = {}
        for key in ("ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms", "requests_per_s",
                    "router_cpu_us_per_request", "router_cpu_busy"):
            vals = [r[key] for r in rs if r.get(key) is not None]
            if vals:
                o[key] = spread(vals)
        if name != "direct":
            for key in ("ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms"):
                diffs = [r[key] - d[key] for r, d in zip(rs, direct) if r.get(key) is not None and d.get(key) is not None]
                if diffs:
                    o["added_" + key] = spread(diffs)
        internal = [r["internal"] for r in rs if r.get("internal")]
        for k in ROUTER_HISTOGRAMS.values():
            for m in ("mean_ms", "p50_le_ms", "p99_le_ms"):
                vals = [i[k][m] for i in internal if i.get(k) and i[k].get(m) is not None]
                if vals:
                    o.setdefault("internal", {}).setdefault(k, {})[m] = spread(vals)
        out[name] = o
    return out


def summarise(runs: list[dict]) -> dict:
    ttfts = [x for r in runs for x in r["ttft"]]
    itls = [x for r in runs for x in r["itl"]]
    ms = lambda v: None if v is None else round(v * 1000, 3)  # noqa: E731
    return {"ttft_p50_ms": ms(pct(ttfts, 0.5)), "ttft_p99_ms": ms(pct(ttfts, 0.99)),
            "itl_p50_ms": ms(pct(itls, 0.5)), "itl_p99_ms": ms(pct(itls, 0.99)),
            "tokens": sum(r["tokens"] for r in runs), "requests": sum(r["requests"] for r in runs),
            "wall_s": round(sum(r["wall_s"] for r in runs), 3)}


def wait_http(url: str, timeout: float = 30.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} did not come up")


def start_proc(stack: ExitStack, cmd: list[str], health: str, cpus: str | None = None,
               env: dict[str, str] | None = None) -> subprocess.Popen:
    if cpus:
        cmd = ["taskset", "-c", cpus, *cmd]
    log = open(f"/tmp/pdserve-bench-{Path(cmd[-1] if cpus else cmd[0]).name}-{os.getpid()}.log", "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env=env)

    def stop() -> None:
        stop_group(proc)
        log.close()

    stack.callback(stop)
    try:
        wait_http(health)
    except TimeoutError:
        stop()
        raise RuntimeError(f"{' '.join(cmd)} did not start; see {log.name}") from None
    return proc


def plot(results: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for name, levels in results.items():
        cs = sorted(levels, key=int)
        for ax, key in zip(axes, ("ttft_p50_ms", "ttft_p99_ms", "itl_p99_ms")):
            # A zero (all tokens in one read) has no place on a log axis: leave a gap.
            ys = [levels[c][key] if levels[c][key] else float("nan") for c in cs]
            ax.plot([int(c) for c in cs], ys, marker="o", label=name)
    for ax, title in zip(axes, ("TTFT p50 (ms)", "TTFT p99 (ms)", "ITL p99 (ms)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("concurrent streams")
        ax.set_title(title)
        ax.legend(fontsize=8)
    fig.suptitle("router overhead vs direct (mock worker, zero GPU time; shared 2-core VM)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def fmt_spread(o: dict | None, digits: int = 1) -> str:
    if not o:
        return "-"
    f = lambda v: f"{v:+.{digits}f}" if digits else f"{v:.0f}"  # noqa: E731
    if digits and o["min"] >= 0 and o["median"] >= 0:
        f = lambda v: f"{v:.{digits}f}"  # noqa: E731
    return f"{f(o['median'])} [{f(o['min'])}..{f(o['max'])}]"


PLOT_MODE = {True: "paired with direct streams in the same window", False: "steady state, after direct"}


def plot_steady(steady: dict[str, dict], path: Path, mode: str = "steady state") -> None:
    """Added TTFT p50/p99 and ITL p99 over direct: median over rounds, bars min..max."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    keys = ("added_ttft_p50_ms", "added_ttft_p99_ms", "added_itl_p99_ms")
    names = [n for n in steady if n != "direct"]
    for i, name in enumerate(names):
        levels = steady[name]
        cs = sorted(levels, key=int)
        for ax, key in zip(axes, keys):
            pts = [(int(c), levels[c][key]) for c in cs if levels[c].get(key)]
            if not pts:
                continue
            # Side by side, not on top of each other: a small shift per target.
            xs = [c * (1 + 0.06 * (i - len(names) / 2)) for c, _ in pts]
            med = [o["median"] for _, o in pts]
            err = [[o["median"] - o["min"] for _, o in pts], [o["max"] - o["median"] for _, o in pts]]
            ax.errorbar(xs, med, yerr=err, marker="o", capsize=3, label=name)
    for ax, title in zip(axes, ("added TTFT p50 (ms)", "added TTFT p99 (ms)", "added ITL p99 (ms)")):
        ax.set_xscale("log", base=2)
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_xlabel("concurrent streams")
        ax.set_title(title)
    axes[1].axhline(2, color="red", lw=0.8, ls="--", label="target (2 ms at 256)")
    axes[1].legend(fontsize=8)
    fig.suptitle(f"{mode}, added over direct: median over rounds, bars min..max (shared 2-core VM)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def markdown(doc: dict) -> str:
    """The results as a markdown table (one row per target and concurrency)."""
    lines = [f"# Router overhead\n\nCommand: `{doc.get('command', '')}`  ",
             f"CPU pinning: {doc.get('pin') or 'none'}; connections: {'cold' if doc.get('cold_connections') else 'warm'}; load average (1 min): "
             f"{doc.get('load_average_1m_at_start', '?')} at the start, {doc['load_average_1m_at_end']} at the end; {doc['max_tokens']}-token streams, {doc['rounds']} interleaved rounds.\n",
             "| target | streams | TTFT p50 ms | TTFT p99 ms | added TTFT p50 ms | added TTFT p99 ms | ITL p99 ms "
             "| router CPU us/request | router CPU ms/1k tokens |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, levels in doc.get("results", {}).items():
        for c, r in levels.items():
            lines.append(f"| {name} | {c} | {r['ttft_p50_ms']} | {r['ttft_p99_ms']} | {r.get('added_ttft_p50_ms', '-')} | "
                         f"{r.get('added_ttft_p99_ms', '-')} | {r['itl_p99_ms']} | {r.get('router_cpu_us_per_request', '-')} "
                         f"| {r.get('router_cpu_ms_per_1k_tokens', '-')} |")
    if not doc.get("results"):
        lines = lines[:2]
    else:
        lines.insert(2, "## Burst (standing start; a third of the requests are the first simultaneous wave)\n")
    for key, title in (("paired", "Paired: each target's streams with as many direct streams alongside"),
                       ("steady", "Steady state: each target after direct")):
        if not doc.get(key):
            continue
        lines += ["", f"## {title} ({doc['steady_seconds']:g} s closed loop per target and round, first "
                      f"{doc['discard']} requests of each stream dropped)", "",
                  "Median over rounds [min..max] of the per-round difference to direct (ms); router-internal "
                  "times from its own histograms (p99 is a bucket upper bound).", "",
                  "| target | streams | added TTFT p50 | added TTFT p99 | added ITL p50 | added ITL p99 | TTFT p99 "
                  "| direct alongside TTFT p99 "
                  "| req/s | router CPU us/request | router busy (cores) | internal arrival->upstream write p99 "
                  "| internal 1st byte->client p99 |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for name, levels in doc[key].items():
            for c, o in levels.items():
                it = o.get("internal", {})
                lines.append(
                    f"| {name} | {c} | {fmt_spread(o.get('added_ttft_p50_ms'))} | {fmt_spread(o.get('added_ttft_p99_ms'))} "
                    f"| {fmt_spread(o.get('added_itl_p50_ms'))} | {fmt_spread(o.get('added_itl_p99_ms'))} "
                    f"| {fmt_spread(o.get('ttft_p99_ms'))} "
                    f"| {fmt_spread(o.get('direct_alongside', {}).get('ttft_p99_ms'))} "
                    f"| {fmt_spread(o.get('requests_per_s'), 0)} "
                    f"| {fmt_spread(o.get('router_cpu_us_per_request'), 0)} | {fmt_spread(o.get('router_cpu_busy'), 2)} "
                    f"| {fmt_spread(it.get('arrival_to_upstream_write', {}).get('p99_le_ms'))} "
                    f"| {fmt_spread(it.get('first_upstream_byte_to_client_write', {}).get('p99_le_ms'))} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 64, 256])
    ap.add_argument("--requests-per-stream", type=int, default=3, help="requests = concurrency x this (min 30)")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3,
                    help="interleaved rounds per level (targets alternate, so load drift hits all alike)")
    ap.add_argument("--bench-venv", type=Path, default=ROOT / ".cache" / "bench-venv",
                    help="venv with vllm-router / sglang-router installed (skipped if missing)")
    ap.add_argument("--pin", default=None, metavar="ROUTER_CPUS:LOAD_CPUS",
                    help="e.g. 1:0 -- every router on CPU 1, this client and the worker on CPU 0, so a router "
                         "does not steal the load generator's CPU (direct gets the same client/worker CPUs)")
    ap.add_argument("--baseline-src", type=Path, default=None,
                    help="also run `pdserve router` from this source tree (its src/ folder, e.g. an older commit "
                         "unpacked with `git archive COMMIT src | tar -x -C DIR`) as target pdserve-baseline")
    ap.add_argument("--cold-connections", action="store_true",
                    help="measure each burst on fresh client connections (default: warm keep-alive connections)")
    ap.add_argument("--modes", nargs="+", choices=["burst", "steady", "paired"], default=["burst", "steady", "paired"],
                    help="burst: concurrency x --requests-per-stream requests from a standing start (a third of "
                         "them the initial simultaneous wave); steady: closed-loop streams for --steady-seconds, "
                         "first --discard requests of each stream dropped, each target after direct; paired: the "
                         "same, with as many direct streams running alongside each target's (added = target minus "
                         "those, measured in the same window)")
    ap.add_argument("--steady-seconds", type=float, default=5.0, help="measured window per target and round")
    ap.add_argument("--discard", type=int, default=2, help="steady: requests per stream not recorded (warm-up)")
    ap.add_argument("--worker-src", type=Path, default=None,
                    help="run the mock worker from this source tree's src/ (e.g. a fixed commit unpacked with "
                         "`git archive COMMIT src | tar -x -C DIR`), so router changes are compared on one worker")
    ap.add_argument("--only", nargs="+", default=None, help="run only these targets (direct is always run)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--plot", type=Path, default=None, help="PNG of TTFT/ITL vs concurrency")
    ap.add_argument("--replot", type=Path, default=None, help="only redraw --plot from a results JSON")
    ap.add_argument("--merge", type=Path, nargs="+", default=None,
                    help="only combine results JSONs of runs over different --concurrency levels into --out "
                         "(and --plot)")
    args = ap.parse_args()
    if args.merge:
        docs = [json.loads(p.read_text()) for p in args.merge]
        doc = {**docs[0], "command": " ; ".join(d["command"] for d in docs),
               "load_average_1m_at_start": min(d.get("load_average_1m_at_start", 0) for d in docs),
               "load_average_1m_at_end": max(d["load_average_1m_at_end"] for d in docs),
               "merged_from": [str(p) for p in args.merge]}
        for key in ("results", "steady", "steady_rounds", "paired", "paired_rounds", "errors"):
            merged: dict = {}
            for d in docs:
                for name, v in (d.get(key) or {}).items():
                    if isinstance(v, dict) and key not in ("errors",):
                        merged.setdefault(name, {}).update(v)
                    else:
                        merged[name] = v
            doc[key] = merged
        if args.out:
            args.out.write_text(json.dumps(doc, indent=2) + "\n")
            args.out.with_suffix(".md").write_text(markdown(doc))
        if args.plot:
            plot_steady(doc.get("paired") or doc["steady"], args.plot, PLOT_MODE[bool(doc.get("paired"))])
        return 0
    if args.replot:
        doc = json.loads(args.replot.read_text())
        out = args.plot or args.replot.with_suffix(".png")
        if doc.get("paired") or doc.get("steady"):
            plot_steady(doc.get("paired") or doc["steady"], out, PLOT_MODE[bool(doc.get("paired"))])
        else:
            plot(doc["results"], out)
        if "command" in doc:
            args.replot.with_suffix(".md").write_text(markdown(doc))
        return 0
    console = Console()
    load_start = round(os.getloadavg()[0], 2)
    results: dict[str, dict] = {}
    errors: dict[str, str] = {}
    model = "mock-llama"
    router_cpus = load_cpus = None
    if args.pin:
        router_cpus, load_cpus = args.pin.split(":")
        os.sched_setaffinity(0, {int(c) for c in load_cpus.split(",")})
    with ExitStack() as stack:
        wenv = {"PYTHONPATH": str(args.worker_src.resolve())} if args.worker_src else None
        w = stack.enter_context(start_worker(model, speedup=1e9, env=wenv,
                                             args=["--max-num-seqs", "1024", "--max-num-batched-tokens", "65536"]))
        if load_cpus:
            subprocess.run(["taskset", "-a", "-cp", load_cpus, str(w.proc.pid)], check=True, capture_output=True)
        targets: dict[str, tuple[str, int | None]] = {"direct": (w.url, None)}

        def wanted(name: str) -> bool:
            return not args.only or name in args.only

        router = [sys.executable, "-m", "pdserve.cli", "router", "--decode", w.url, "--policy", "kv_aware",
                  "--log-level", "WARNING", "--tokenizer-mode", "mock", "--processes", "1"]  # variants may override
        variants: list[tuple[str, list[str], dict[str, str] | None]] = [
            ("pdserve", [], None),
            ("pdserve-asyncio", ["--event-loop", "asyncio"], None),
            ("pdserve-aiohttp-client", ["--upstream-client", "aiohttp"], None),
            ("pdserve-2proc", ["--processes", "2"], None),
        ]
        if args.baseline_src:
            variants.append(("pdserve-baseline", [], {**os.environ, "PYTHONPATH": str(args.baseline_src.resolve())}))
        for name, extra, env in variants:
            if not wanted(name):
                continue
            port = free_port()
            proc = start_proc(stack, [*router, "--port", str(port), *extra], f"http://127.0.0.1:{port}/health",
                              router_cpus, env)
            targets[name] = (f"http://127.0.0.1:{port}", proc.pid)
        for name, cmd in (
            ("vllm-router", ["vllm-router", "--worker-urls", w.url, "--policy", "round_robin", "--log-level", "warning"]),
            ("sglang-router", ["sglang-router", "launch", "--worker-urls", w.url, "--policy", "round_robin",
                               "--log-level", "warn"]),
        ):
            exe = args.bench_venv / "bin" / cmd[0]
            if not wanted(name):
                continue
            if not exe.exists():
                errors[name] = f"not installed in {args.bench_venv}"
                continue
            port = free_port()
            try:
                # Both default their metrics exporter to port 29000: give each its own.
                proc = start_proc(stack, [str(exe), *cmd[1:], "--host", "127.0.0.1", "--port", str(port),
                                          "--prometheus-port", str(free_port())],
                                  f"http://127.0.0.1:{port}/health", router_cpus)
                targets[name] = (f"http://127.0.0.1:{port}", proc.pid)
            except RuntimeError as e:
                errors[name] = str(e)
        steady_results: dict[str, dict] = {}
        steady_rounds: dict[str, dict[str, list[dict]]] = {}
        for c in args.concurrency if "steady" in args.modes else []:
            rounds: dict[str, list[dict]] = {name: [] for name in targets}
            names = list(targets)
            for rnd in range(args.rounds):
                # Direct first in every round (its pair for the differences), the others in a
                # rotating order so slow drift of the shared box does not favour one.
                others = [x for x in names if x != "direct"]
                k = rnd % max(len(others), 1)
                for name in ["direct", *others[k:], *others[:k]]:
                    url, pid = targets[name]
                    if f"{name}@{c}/steady" in errors or (args.only and name != "direct" and name not in args.only):
                        continue
                    console.print(f"[bold]{name}[/] steady, concurrency {c}, round {rnd + 1}/{args.rounds}: "
                                  f"{args.steady_seconds:g} s x {args.max_tokens}-token streams")
                    metrics_url = f"{url}/metrics" if name.startswith("pdserve") else None
                    try:
                        r = asyncio.run(steady(url, model, c, args.steady_seconds, args.discard, args.max_tokens, pid,
                                               metrics_url))
                        r["load_average_1m"] = round(os.getloadavg()[0], 2)
                        rounds[name].append(r)
                    except Exception as e:  # record and go on with the others
                        errors[f"{name}@{c}/steady"] = f"{type(e).__name__}: {e}"[:300]
                        rounds[name].append({})  # keep rounds aligned with direct's
            steady_rounds[str(c)] = rounds
            for name, o in steady_summary(rounds).items():
                steady_results.setdefault(name, {})[str(c)] = o
        paired_results: dict[str, dict] = {}
        paired_rounds: dict[str, dict[str, list[dict]]] = {}
        for c in args.concurrency if "paired" in args.modes else []:
            rounds = {}
            names = [x for x in targets if x != "direct"]
            for rnd in range(args.rounds):
                k = rnd % max(len(names), 1)
                for name in [*names[k:], *names[:k]]:
                    url, pid = targets[name]
                    if f"{name}@{c}/paired" in errors:
                        continue
                    console.print(f"[bold]{name}[/] paired with direct, concurrency {c}+{c}, round {rnd + 1}/"
                                  f"{args.rounds}: {args.steady_seconds:g} s")
                    metrics_url = f"{url}/metrics" if name.startswith("pdserve") else None
                    try:
                        t, d = asyncio.run(paired(url, targets["direct"][0], model, c, args.steady_seconds,
                                                  args.discard, args.max_tokens, pid, metrics_url))
                        t["load_average_1m"] = round(os.getloadavg()[0], 2)
                        rounds.setdefault(name, []).append(t)
                        rounds.setdefault(f"direct|{name}", []).append(d)
                    except Exception as e:  # record and go on with the others
                        errors[f"{name}@{c}/paired"] = f"{type(e).__name__}: {e}"[:300]
            paired_rounds[str(c)] = rounds
            for name in names:
                if rounds.get(name):
                    o = steady_summary({"direct": rounds[f"direct|{name}"], name: rounds[name]})
                    o[name]["direct_alongside"] = o["direct"]
                    paired_results.setdefault(name, {})[str(c)] = o[name]
        for c in args.concurrency if "burst" in args.modes else []:
            n = max(30, c * args.requests_per_stream)
            runs: dict[str, list[dict]] = {name: [] for name in targets}
            cpu: dict[str, float] = {name: 0.0 for name in targets}
            for rnd in range(args.rounds):
                for name, (url, pid) in targets.items():
                    if f"{name}@{c}" in errors or (args.only and name != "direct" and name not in args.only):
                        continue
                    console.print(f"[bold]{name}[/] concurrency {c}, round {rnd + 1}/{args.rounds}: "
                                  f"{n} streams x {args.max_tokens} tokens")
                    try:
                        r, used = asyncio.run(measure(url, model, c, n, args.max_tokens, pid, args.cold_connections))
                        runs[name].append(r)
                        cpu[name] += used
                    except Exception as e:  # record and go on with the others
                        errors[f"{name}@{c}"] = f"{type(e).__name__}: {e}"[:300]
            for name, rs in runs.items():
                if not rs:
                    continue
                r = summarise(rs)
                if targets[name][1]:
                    r["router_cpu_ms_per_1k_tokens"] = round(cpu[name] * 1e6 / max(r["tokens"], 1), 2)
                    r["router_cpu_us_per_request"] = round(cpu[name] * 1e6 / max(r["requests"], 1), 1)
                results.setdefault(name, {})[str(c)] = r
    for name, levels in results.items():
        for c, r in levels.items():
            d = results.get("direct", {}).get(c)
            if d and name != "direct" and r["ttft_p99_ms"] is not None:
                r["added_ttft_p50_ms"] = round(r["ttft_p50_ms"] - d["ttft_p50_ms"], 3)
                r["added_ttft_p99_ms"] = round(r["ttft_p99_ms"] - d["ttft_p99_ms"], 3)
                r["added_itl_p99_ms"] = round(r["itl_p99_ms"] - d["itl_p99_ms"], 3)
    table = Table(title="client-side latency (ms) by concurrency; added = minus direct")
    for col in ("target", "conc", "TTFT p50", "TTFT p99", "added TTFT p99", "ITL p50", "ITL p99", "CPU ms/1k tok",
                "CPU us/req"):
        table.add_column(col)
    for name, levels in results.items():
        for c, r in levels.items():
            table.add_row(name, c, str(r["ttft_p50_ms"]), str(r["ttft_p99_ms"]), str(r.get("added_ttft_p99_ms", "-")),
                          str(r["itl_p50_ms"]), str(r["itl_p99_ms"]), str(r.get("router_cpu_ms_per_1k_tokens", "-")),
                          str(r.get("router_cpu_us_per_request", "-")))
    if results:
        console.print(table)
    for title, res in (("steady state", steady_results), ("paired with direct", paired_results)):
        if not res:
            continue
        st = Table(title=f"{title}: added over direct (ms), median over rounds [min..max]; router-internal ms")
        for col in ("target", "conc", "added TTFT p50", "added TTFT p99", "added ITL p99", "req/s", "CPU us/req",
                    "internal in->up p99", "internal 1st byte p99"):
            st.add_column(col)
        for name, levels in res.items():
            for c, o in levels.items():
                st.add_row(name, c, fmt_spread(o.get("added_ttft_p50_ms")), fmt_spread(o.get("added_ttft_p99_ms")),
                           fmt_spread(o.get("added_itl_p99_ms")), fmt_spread(o.get("requests_per_s"), 0),
                           fmt_spread(o.get("router_cpu_us_per_request"), 0),
                           fmt_spread(o.get("internal", {}).get("arrival_to_upstream_write", {}).get("p99_le_ms")),
                           fmt_spread(o.get("internal", {}).get("first_upstream_byte_to_client_write", {})
                                      .get("p99_le_ms")))
        console.print(st)
    for k, v in errors.items():
        console.print(f"[red]{k}[/]: {v}")
    doc = {"bench": "router_overhead", "max_tokens": args.max_tokens, "rounds": args.rounds,
           "load_average_1m_at_start": load_start, "load_average_1m_at_end": round(os.getloadavg()[0], 2), "worker": "pdserve worker, --mock-speedup 1e9", "worker_src": str(args.worker_src) if args.worker_src else None,
           "http_stack": "pdserve router: aiohttp server; upstream completions via its own HTTP/1.1 client (http1.py), "
                         "or aiohttp's client with --upstream-client aiohttp (target pdserve-aiohttp-client); "
                         "httpx was not measured",
           "cpus": os.cpu_count(), "pin": args.pin, "cold_connections": args.cold_connections,
           "command": " ".join(sys.argv), "modes": args.modes, "steady_seconds": args.steady_seconds,
           "discard": args.discard, "results": results, "steady": steady_results, "steady_rounds": steady_rounds,
           "paired": paired_results, "paired_rounds": paired_rounds,
           "errors": errors}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=2) + "\n")
        args.out.with_suffix(".md").write_text(markdown(doc))
    if args.plot:
        if paired_results or steady_results:  # the differences the target is judged on
            plot_steady(paired_results or steady_results, args.plot, PLOT_MODE[bool(paired_results)])
        else:
            plot(results, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
