"""P/D safety: prefilled KV is read at most once, and P/D pairing never keys on the client's id.

A decode worker that may have read a prefill's blocks (vLLM's NIXL READ, after which the
prefill side frees them) must not be followed by another read of the same
``kv_transfer_params``: the blocks may hold another request's KV by then. Fake prefill and
decode workers (in-process aiohttp on loopback) record every read; the router is real.
"""

from __future__ import annotations

import asyncio
import json
from functools import partial
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from pdserve.router.core.spec import RoutingSpec
from tests.router.conftest import MODEL, read_sse, router_config, run_router, serve_app

PROMPT = "the model token cache " * 40


@dataclass
class Ledger:
    """What the fake workers saw, shared by all of them."""

    prefill_ids: list[str] = field(default_factory=list)  # X-Request-Id of each prefill
    issued: dict[int, str] = field(default_factory=dict)  # block id -> X-Request-Id of the prefill that issued it
    reads: list[tuple[str, int, str]] = field(default_factory=list)  # (decode worker, block id, X-Request-Id)
    decode_calls: int = 0
    fail_first: int = 0  # how many decode requests fail after reading their KV
    fail_how: str = "500"
    prefill_barrier: int = 1  # prefills wait until this many have arrived (to force overlap)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)


async def _prefill(ledger: Ledger, port: list[int], request: web.Request) -> web.Response:
    body = await request.json()
    assert body["kv_transfer_params"]["do_remote_decode"] and body["max_tokens"] == 1
    rid = request.headers["X-Request-Id"]
    ledger.prefill_ids.append(rid)
    if len(ledger.prefill_ids) >= ledger.prefill_barrier:
        ledger.arrived.set()
    await asyncio.wait_for(ledger.arrived.wait(), 10)
    block = len(ledger.issued) + 1
    ledger.issued[block] = rid
    kv = {"do_remote_prefill": True, "do_remote_decode": False, "remote_block_ids": [block],
          "remote_engine_id": "prefill-0", "remote_host": "127.0.0.1", "remote_port": port[0], "tp_size": 1}
    return web.json_response({"id": f"cmpl-{rid}", "object": "text_completion", "model": MODEL,
                              "choices": [{"index": 0, "text": "a", "finish_reason": "length"}],
                              "kv_transfer_params": kv})


async def _decode(ledger: Ledger, name: str, request: web.Request) -> web.StreamResponse:
    body = await request.json()
    kv = body.get("kv_transfer_params") or {}
    rid = request.headers["X-Request-Id"]
    for block in kv.get("remote_block_ids") or []:
        ledger.reads.append((name, block, rid))  # the READ happened: the prefill side frees the blocks
    ledger.decode_calls += 1
    if ledger.decode_calls <= ledger.fail_first:
        if ledger.fail_how == "500":  # vLLM's answer to a failed KV load (policy "fail")
            return web.json_response({"error": {"message": "KV transfer failed"}}, status=500)
        if ledger.fail_how == "drop":  # the worker dies after the read, before answering
            assert request.transport is not None
            request.transport.abort()
            return web.Response()
        # "midbody": a non-streamed answer cut off after its head
        resp = web.StreamResponse(headers={"Content-Type": "application/json", "Content-Length": "1000"})
        await resp.prepare(request)
        await resp.write(b'{"id": "cmpl-')
        assert request.transport is not None
        request.transport.abort()
        return resp
    text = "ok"
    if body.get("stream"):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        chunk = {"id": f"cmpl-{rid}", "object": "text_completion", "model": MODEL,
                 "choices": [{"index": 0, "text": text, "finish_reason": "length"}]}
        await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp
    return web.json_response({"id": f"cmpl-{rid}", "object": "text_completion", "model": MODEL,
                              "choices": [{"index": 0, "text": text, "finish_reason": "length"}],
                              "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})


@asynccontextmanager
async def fake_pd(ledger: Ledger, n_decode: int = 2) -> AsyncIterator[tuple[str, list[str]]]:
    async with AsyncExitStack() as stack:
        port: list[int] = []
        papp = web.Application()
        papp.router.add_post("/v1/completions", partial(_prefill, ledger, port))
        purl, pport = await stack.enter_async_context(serve_app(papp))
        port.append(pport)  # the side channel: never dialled by these fakes
        durls = []
        for i in range(n_decode):
            dapp = web.Application()
            dapp.router.add_post("/v1/completions", partial(_decode, ledger, f"d{i}"))
            durls.append((await stack.enter_async_context(serve_app(dapp)))[0])
        yield purl, durls


def _cfg(purl: str, durls: list[str]):
    return router_config(prefill=[purl], decode=durls, routing=RoutingSpec(policy="round_robin",
                         decode_policy="round_robin"), scrape_interval_s=60, worker_cooldown_s=0.0)


def _assert_read_once(ledger: Ledger) -> None:
    blocks = [b for _, b, _ in ledger.reads]
    assert len(blocks) == len(set(blocks)), f"the same prefilled KV was read twice: {ledger.reads}"
    for _, block, rid in ledger.reads:  # each decode carried the id its prefill had: P/D pairing holds
        assert ledger.issued[block] == rid


# A streamed answer cut off mid-body is migrated with a token-id continuation (no KV params):
# test_resilience covers it.
@pytest.mark.parametrize(("how", "stream"), [("500", False), ("500", True), ("drop", False), ("drop", True),
                                             ("midbody", False)])
async def test_decode_failure_after_reading_kv_goes_back_through_prefill(how: str, stream: bool) -> None:
    ledger = Ledger(fail_first=1, fail_how=how)
    async with fake_pd(ledger) as (purl, durls), run_router(_cfg(purl, durls)) as r:
        resp = await r.post("/v1/completions", {"model": MODEL, "prompt": PROMPT, "max_tokens": 4, "stream": stream})
        assert resp.status == 200, await resp.text()
        if stream:
            assert (await read_sse(resp))[-1] == "[DONE]"
        else:
            assert (await resp.json())["choices"][0]["text"] == "ok"
        route = resp.headers["x-pdserve-route"]
    _assert_read_once(ledger)
    assert "mode=pd" in route and "prefill again" in route, route
    assert len(ledger.reads) == 2 and len(ledger.issued) == 2, ledger
    assert ledger.reads[0][0] != ledger.reads[1][0]  # the failed decode worker is not asked again
    assert len(set(ledger.prefill_ids)) == 2  # a new attempt id for the new P/D attempt


async def test_a_lone_decode_worker_gets_the_fresh_kv_after_a_failed_load() -> None:
    """A scale-down stops a prefill worker whose KV a decode worker is about to read: the read
    fails (vLLM's 500), the router prefills again elsewhere, and the only decode worker left must
    get the new ``kv_transfer_params``: they are fresh blocks, so asking it again is safe, where
    excluding it left no worker and answered 503 "no worker available"."""
    ledger = Ledger(fail_first=1, fail_how="500")
    async with fake_pd(ledger, n_decode=1) as (purl, durls), run_router(_cfg(purl, durls)) as r:
        resp = await r.post("/v1/completions", {"model": MODEL, "prompt": PROMPT, "max_tokens": 4})
        assert resp.status == 200, await resp.text()
        assert (await resp.json())["choices"][0]["text"] == "ok"
        assert "prefill again" in resp.headers["x-pdserve-route"]
    _assert_read_once(ledger)  # the same decode worker, but never the same KV twice
    assert [b for _, b, _ in ledger.reads] == [1, 2] and len(ledger.issued) == 2, ledger


async def test_decode_failures_on_every_round_end_in_a_clean_502() -> None:
    ledger = Ledger(fail_first=100)
    async with fake_pd(ledger, n_decode=3) as (purl, durls), run_router(_cfg(purl, durls)) as r:
        resp = await r.post("/v1/completions", {"model": MODEL, "prompt": PROMPT, "max_tokens": 4})
        body = await resp.json()
        assert resp.status in (502, 503), body
        assert "decode" in body["error"]["message"]
    _assert_read_once(ledger)
    assert len(ledger.reads) >= 2


async def test_clients_reusing_one_request_id_are_paired_apart() -> None:
    """Two concurrent clients send the same X-Request-Id: prefill and decode see router ids,
    distinct per request and equal within a P/D pair; each client gets its own id back."""
    n = 4
    ledger = Ledger(prefill_barrier=n)  # every prefill waits for the others: they overlap
    async with fake_pd(ledger) as (purl, durls), run_router(_cfg(purl, durls)) as r:
        async def one() -> str:
            resp = await r.post("/v1/completions", {"model": MODEL, "prompt": PROMPT, "max_tokens": 4},
                                headers={"X-Request-Id": "shared-id"})
            assert resp.status == 200, await resp.text()
            await resp.read()
            return resp.headers["X-Request-Id"]

        echoed = await asyncio.gather(*(one() for _ in range(n)))
    assert echoed == ["shared-id"] * n
    assert len(set(ledger.prefill_ids)) == n and "shared-id" not in ledger.prefill_ids, ledger.prefill_ids
    assert len(ledger.reads) == n
    _assert_read_once(ledger)


async def test_vllm_0_11_workers_pair_clients_sharing_one_request_id(worker_stack) -> None:
    """Real mock workers emulating vLLM 0.11, whose decode side notifies the prefill side with its
    own request id (from X-Request-Id). With the client's id sent upstream, concurrent clients
    sharing one collide (before this change: the worker's 400 "duplicate request id
    'cmpl-shared-id-0'"; otherwise a notification naming the wrong request strands or frees
    blocks). With router ids per attempt every pair matches and no block is left unrecognized."""
    from pdserve.worker.testing import start_worker

    def kv(role: str) -> list[str]:
        return ["--kv-transfer-config", json.dumps({"kv_connector": "NixlConnector", "kv_role": role}),
                "--mock-side-channel-port", "0", "--mock-side-channel-host", "127.0.0.1", "--mock-vllm-version", "0.11.0"]

    p = worker_stack.enter_context(start_worker(MODEL, speedup=50.0, args=kv("kv_producer")))
    d = worker_stack.enter_context(start_worker(MODEL, speedup=50.0, args=kv("kv_consumer")))
    cfg = router_config(prefill=[p.url], decode=[d.url], scrape_interval_s=60)
    async with run_router(cfg) as r:
        async def one(i: int) -> None:
            resp = await r.post("/v1/completions", {"model": MODEL, "prompt": f"client {i} " + PROMPT, "max_tokens": 8,
                                                    "ignore_eos": True}, headers={"X-Request-Id": "shared-id"})
            body = await resp.json()
            assert resp.status == 200, body
            assert resp.headers["X-Request-Id"] == "shared-id" and body["usage"]["completion_tokens"] == 8
            assert "mode=pd" in resp.headers["x-pdserve-route"]

        await asyncio.gather(*(one(i) for i in range(4)))
    assert "unrecognized request" not in p.logs(), p.logs()[-2000:]
