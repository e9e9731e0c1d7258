"""Conformance: the live router and the simulator make the same routing decisions.

One sequence of requests (shared and private prefixes, Mooncake-style hash ids) goes
through the live router over real HTTP to real mock worker processes (KV events over
ZMQ, load scraped from /metrics) and through the simulator. Both place requests with
``pdserve.router.core``'s scheduler, but everything around it is each side's own: the
live router's views come from scrapes and its KV index from the workers' events, the
simulator's from its engines. Requests are spaced so each has finished and its events
have landed before the next, as in the simulator's trace. Every decision must match:
the mode (P/D or local), the prefill worker and the decode worker.
"""

from __future__ import annotations

import asyncio
import json
from contextlib import ExitStack
from pathlib import Path

import pytest

from pdserve.router.core.spec import PolicyName, RoutingSpec
from pdserve.sim.config import SimConfig
from pdserve.sim.prompts import token_ids
from pdserve.sim.simulator import Simulation
from pdserve.sim.traces import Trace, TraceRequest, from_rows
from tests.router.conftest import MODEL, entry, kv_events_flowing, router_config, run_router, spawn, wait_for

pytestmark = pytest.mark.slow

HB = 512  # tokens per hash id
SPACING_S = 30.0  # virtual seconds between requests: each has finished before the next


def _trace() -> Trace:
    # Three conversations (hash-id prefixes 100.., 200.., 300..) interleaved, each turn
    # extending its conversation's prefix, plus one-off prompts, with short prompts that
    # fall under the P/D threshold once their prefix is cached.
    convo = {1: [100, 101], 2: [200, 201, 202], 3: [300]}
    plan = [(1, 2), (2, 3), (1, 3), (3, 1), (None, 2), (2, 4), (1, 4), (3, 2), (2, 4), (None, 1), (1, 4), (3, 3)]
    rows: list[tuple[float, int, int, tuple[int, ...]]] = []
    fresh = 900
    for k, (c, n) in enumerate(plan):
        if c is None:
            ids = tuple(range(fresh, fresh + n))
            fresh += n
        else:
            base = convo[c]
            while len(base) < n:
                base.append(base[-1] + 1)
            ids = tuple(base[:n])
        # The last hash block is partial (vLLM never caches a prompt's last partial block).
        rows.append((k * SPACING_S, (n - 1) * HB + 300, 4, ids))
    return from_rows(rows, format="mooncake", source="conformance")


SPEC = RoutingSpec(policy=PolicyName.KV_AWARE, block_size=16, disagg_threshold_tokens=200)


def _simulated(trace: Trace, spec: RoutingSpec = SPEC, n: int = 2) -> list[tuple[str, int | None, int]]:
    cfg = SimConfig(prefill_instances=n, decode_instances=n, block_size=16, routing=spec)
    res = Simulation(trace, cfg).run()
    out = []
    for r in sorted(res.records, key=lambda r: r.index):
        assert not r.error and r.decode_instance
        p = int(r.prefill_instance[1:]) if r.prefill_instance else None
        out.append(("pd" if p is not None else "local", p, int(r.decode_instance[1:])))
    return out


def _route(header: str, prefill: list[str], decode: list[str]) -> tuple[str, int | None, int]:
    parts = {p.split("=", 1)[0]: p.split("=", 1)[1].split(" ")[0] for p in header.split(" | ") if "=" in p}
    p = prefill.index(parts["prefill"]) if "prefill" in parts else None
    return parts["mode"], p, decode.index(parts["decode"])


async def test_live_router_and_simulator_decide_alike(tmp_path: Path) -> None:
    trace = _trace()
    expected = _simulated(trace)
    # The sequence must exercise every rule: prefix steering on both pools and the threshold.
    assert {m for m, _, _ in expected} == {"pd", "local"}
    assert len({p for _, p, _ in expected if p is not None}) == 2
    assert await _live(trace, SPEC, tmp_path) == expected


# Decode-side reuse: round robin offers the repeats of one prompt to the prefill worker that never
# saw it; the decode worker that received the first one's KV cached it (its KV events say so), so
# the repeats are prefilled there.
REUSE_SPEC = RoutingSpec(policy=PolicyName.ROUND_ROBIN, decode_policy=PolicyName.KV_AWARE, block_size=16,
                         decode_reuse_threshold_tokens=HB)


async def test_live_router_and_simulator_agree_on_decode_side_reuse(tmp_path: Path) -> None:
    trace = from_rows([(k * SPACING_S, 2 * HB + 300, 4, (100, 101, 102)) for k in range(4)],
                      format="mooncake", source="conformance-reuse")
    expected = _simulated(trace, REUSE_SPEC)
    assert [m for m, _, _ in expected] == ["pd", "local", "local", "local"]
    # The rule reads the decode workers' events of the very first request: the subscriptions must be live.
    assert await _live(trace, REUSE_SPEC, tmp_path, warm=True) == expected


# Prefill backlog: five fresh 16,000-token prompts 10 ms apart on 1P1D, limit 32,000 queued tokens. Each is
# placed before the first prefill is done (~0.6 s on the 8B profile; the workers run at half speed, so
# ~1.2 s of wall time: margin for a loaded machine), so the router's ledger alone decides: P0 queues 0, 16k, 32k (not above the limit): P/D; then 48k: D0 (16k
# < 64k), then D0 32k < 64k. Live, the requests overlap as they do in the simulator's trace.
BACKLOG_SPEC = RoutingSpec(policy=PolicyName.KV_AWARE, block_size=16, max_prefill_queue_tokens=32_000)
BACKLOG_PROMPT = 16_000


async def test_live_router_and_simulator_agree_on_the_prefill_backlog(tmp_path: Path) -> None:
    trace = from_rows([(0.01 * k, BACKLOG_PROMPT, 4, tuple(range(1000 + 40 * k, 1032 + 40 * k))) for k in range(5)],
                      format="mooncake", source="conformance-backlog")
    expected = _simulated(trace, BACKLOG_SPEC, n=1)
    assert [m for m, _, _ in expected] == ["pd", "pd", "pd", "local", "local"]
    with ExitStack() as stack:
        prefill, decode = spawn(stack, 1, speedup=0.5), spawn(stack, 1, speedup=0.5)
        path = tmp_path / "workers.json"
        path.write_text(json.dumps({"prefill": [entry(w) for w in prefill], "decode": [entry(w) for w in decode]}))
        cfg = router_config(discovery_file=path, routing=BACKLOG_SPEC, kv_events=True, scrape_interval_s=0.2)
        async with run_router(cfg) as r:
            await wait_for(lambda: len(r.state.pool.views("decode")) == 1 and len(r.state.pool.views("prefill")) == 1,
                           what="discovery")

            async def send(req: TraceRequest) -> tuple[str, int | None, int]:
                await asyncio.sleep(req.arrival_s)
                body = {"model": MODEL, "prompt": token_ids(req, HB), "max_tokens": req.output_tokens,
                        "ignore_eos": True}
                resp = await r.post("/v1/completions", body)
                assert resp.status == 200, await resp.text()
                await resp.read()
                return _route(resp.headers["x-pdserve-route"], [w.url for w in prefill], [w.url for w in decode])

            got = await asyncio.gather(*(send(q) for q in trace.requests))
    assert list(got) == expected


async def _live(trace: Trace, spec: RoutingSpec, tmp_path: Path, warm: bool = False) -> list[tuple[str, int | None, int]]:
    with ExitStack() as stack:
        prefill, decode = spawn(stack, 2, speedup=50.0), spawn(stack, 2, speedup=50.0)
        path = tmp_path / "workers.json"
        path.write_text(json.dumps({"prefill": [entry(w) for w in prefill], "decode": [entry(w) for w in decode]}))
        cfg = router_config(discovery_file=path, routing=spec, kv_events=True, scrape_interval_s=0.2)
        p_urls, d_urls = [w.url for w in prefill], [w.url for w in decode]
        async with run_router(cfg) as r:
            await wait_for(lambda: len(r.state.pool.views("decode")) == 2 and len(r.state.pool.views("prefill")) == 2,
                           what="discovery")
            if warm:  # throwaway prompts straight to each worker, alike on all of them
                await kv_events_flowing(r, [*prefill, *decode])
            got = []
            for req in trace.requests:
                body = {"model": MODEL, "prompt": token_ids(req, HB), "max_tokens": req.output_tokens,
                        "ignore_eos": True}
                resp = await r.post("/v1/completions", body)
                assert resp.status == 200, await resp.text()
                await resp.read()
                got.append(_route(resp.headers["x-pdserve-route"], p_urls, d_urls))
                # As in the simulator's trace, the next request comes once this one's KV
                # events have landed and a scrape has seen the workers idle again.
                await wait_for(lambda: r.state.index.events_applied > 0, what="KV events")
                await asyncio.sleep(1.0)
    return got
