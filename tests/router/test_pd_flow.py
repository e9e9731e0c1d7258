"""P/D through the router against real mock vLLM workers, verified from the
workers' own metrics."""

from __future__ import annotations

import json
import uuid

from tests.router.conftest import (
    router_config,
    MODEL,
    entry,
    kv_events_flowing,
    read_sse,
    run_router,
    stream_text,
    wait_for,
    worker_metric,
)
from pdserve.router.core.spec import RoutingSpec
from pdserve.tokenization import mock as tokenizer

PROMPT = "the model token cache " * 40  # ~160 tokens, 10 full blocks


async def test_pd_handoff_completion(pd_workers, tmp_path) -> None:
    prefill, decode = pd_workers
    cfg = router_config(prefill=[w.url for w in prefill], decode=[w.url for w in decode], routing=RoutingSpec(policy="round_robin"))
    before_transfers = sum([await worker_metric(w.url, "pdserve_worker_kv_transfers_total") for w in decode])
    before_prefill = sum([await worker_metric(w.url, "vllm:prompt_tokens_total") for w in prefill])
    async with run_router(cfg) as r:
        resp = await r.post("/v1/completions", {"model": MODEL, "prompt": PROMPT, "max_tokens": 8, "ignore_eos": True},
                            headers={"X-Request-Id": "req-pd-1"})
        body = await resp.json()
        assert resp.status == 200, body
        route = resp.headers["x-pdserve-route"]
        assert "mode=pd" in route and "prefill=http://127.0.0.1" in route and "decode=http://127.0.0.1" in route
        assert resp.headers["X-Request-Id"] == "req-pd-1"
        assert body["usage"]["completion_tokens"] == 8
        # The workers got the router's own id (P/D pairs on it), never the client's.
        assert body["id"].startswith("cmpl-") and "req-pd-1" not in body["id"]
        assert await r.metric("pdserve_router_pd_handoffs_total") == 1
    # The prefill pool computed the prompt; a decode worker pulled its KV over the side channel.
    after_prefill = sum([await worker_metric(w.url, "vllm:prompt_tokens_total") for w in prefill])
    after_transfers = sum([await worker_metric(w.url, "pdserve_worker_kv_transfers_total") for w in decode])
    assert after_prefill - before_prefill == len(tokenizer.encode(PROMPT))
    assert after_transfers - before_transfers == 1


async def test_pd_streaming_chat_with_usage(pd_workers) -> None:
    prefill, decode = pd_workers
    cfg = router_config(prefill=[w.url for w in prefill], decode=[w.url for w in decode], routing=RoutingSpec(policy="kv_aware"))
    async with run_router(cfg) as r:
        body = {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 12,
                "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
        resp = await r.post("/v1/chat/completions", body)
        assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
        events = await read_sse(resp)
        assert events[-1] == "[DONE]"
        usage = [e for e in events if isinstance(e, dict) and e.get("usage")]
        assert usage and usage[-1]["usage"]["completion_tokens"] == 12
        assert stream_text(events, "chat")
        assert await r.metric("pdserve_router_time_to_first_token_seconds_count") == 1
        # One inter-token gap per token after the first, however the chunks were batched.
        assert await r.metric("pdserve_router_inter_token_latency_seconds_count") == 11


async def test_short_uncached_prompt_skips_pd(pd_workers) -> None:
    prefill, decode = pd_workers
    cfg = router_config(prefill=[w.url for w in prefill], decode=[w.url for w in decode],
                       routing=RoutingSpec(disagg_threshold_tokens=64))
    before = sum([await worker_metric(w.url, "vllm:prompt_tokens_total") for w in prefill])
    async with run_router(cfg) as r:
        resp = await r.post("/v1/completions", {"model": MODEL, "prompt": "hello there", "max_tokens": 3})
        assert resp.status == 200
        assert "mode=local" in resp.headers["x-pdserve-route"] and "skip P/D" in resp.headers["x-pdserve-route"]
    assert sum([await worker_metric(w.url, "vllm:prompt_tokens_total") for w in prefill]) == before


async def test_kv_events_steer_repeat_prefixes_to_the_caching_worker(pd_workers, tmp_path) -> None:
    prefill, _ = pd_workers
    # Colocated over the two "prefill" workers, their KV-event endpoints given explicitly.
    path = tmp_path / "workers.json"
    path.write_text(json.dumps({"decode": [entry(w) for w in prefill]}))
    cfg = router_config(discovery_file=path, routing=RoutingSpec(policy="kv_aware"), kv_events=True)
    async with run_router(cfg) as r:
        await kv_events_flowing(r, prefill)
        # Fresh words per run: the module's workers outlive this router (one run per HTTP server), and
        # a prefix a worker cached before stores no block, so sends no event to this router's index.
        prompt = f"a shared document {uuid.uuid4().hex[:8]} about river city music " * 30
        first = await r.post("/v1/completions", {"model": MODEL, "prompt": prompt + "first", "max_tokens": 2})
        assert first.status == 200
        await first.read()
        target = first.headers["x-pdserve-route"].split("decode=")[1].split(" ")[0]
        shared = r.state.index.request_keys(tokenizer.encode(prompt))  # the full blocks both prompts share
        await wait_for(lambda: r.state.index.overlaps(shared).get(target, 0) == len(shared),
                       what="the first prompt's KV events to reach the index")
        hits_before = await worker_metric(target, "vllm:prefix_cache_hits_total")
        again = await r.post("/v1/completions", {"model": MODEL, "prompt": prompt + "second", "max_tokens": 2})
        assert again.status == 200
        route = again.headers["x-pdserve-route"]
        assert f"decode={target}" in route and "overlap_blocks=0" not in route
        assert await worker_metric(target, "vllm:prefix_cache_hits_total") > hits_before
        assert await r.metric("pdserve_router_kv_events_total") > 0
