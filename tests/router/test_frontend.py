"""The router's front door: endpoints, bad input, limits, admission, discovery reload."""

from __future__ import annotations

import asyncio
import json
import os
import signal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pdserve.router.core.spec import AdmissionSpec, RoutingSpec
from tests.router.conftest import router_config, MODEL, metric_sum, read_sse, run_router, spawn, wait_for


@pytest.fixture(scope="module")
def colocated(request):
    from contextlib import ExitStack

    with ExitStack() as stack:
        yield spawn(stack, 2, speedup=200.0, pd=False, events=False)


async def test_models_health_and_metrics(colocated) -> None:
    async with run_router(router_config(decode=[w.url for w in colocated])) as r:
        models = await (await r.session.get(r.url + "/v1/models")).json()
        assert [m["id"] for m in models["data"]] == [MODEL]
        health = await r.session.get(r.url + "/health")
        assert health.status == 200 and (await health.json())["workers"] == {"prefill": 0, "decode": 2}
        text = await (await r.session.get(r.url + "/metrics")).text()
        assert metric_sum(text, "pdserve_router_worker_up") == 2
        for name in ("time_to_first_token_seconds", "inter_token_latency_seconds", "routing_decision_seconds",
                     "retries_total", "migrations_total", "pd_handoffs_total", "estimated_prefix_hit_ratio"):
            assert f"# TYPE pdserve_router_{name.removesuffix('_total')}" in text
        missing = await r.session.get(r.url + "/v2/nothing")
        assert missing.status == 404 and "error" in await missing.json()


@pytest.mark.parametrize(
    ("raw", "status", "fragment"),
    [
        (b"{not json", 400, "not valid JSON"),
        (b'{"model": "mock-llama", "prompt": 42}', 400, "prompt"),
        (b'{"model": "mock-llama", "prompt": "x", "max_tokens": "lots"}', 400, "max_tokens"),
        (b'{"model": "gpt-17", "prompt": "x"}', 404, "gpt-17"),
    ],
)
async def test_bad_input_gets_openai_errors_and_the_router_keeps_serving(colocated, raw, status, fragment) -> None:
    async with run_router(router_config(decode=[w.url for w in colocated])) as r:
        await wait_for(lambda: r.state.pool.known_models(), what="models from workers")
        resp = await r.session.post(r.url + "/v1/completions", data=raw, headers={"Content-Type": "application/json"})
        body = await resp.json()
        assert resp.status == status and fragment in body["error"]["message"]
        assert set(body["error"]) == {"message", "type", "param", "code"}
        ok = await r.post("/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 2})
        assert ok.status == 200


async def test_body_limit_is_413(colocated) -> None:
    async with run_router(router_config(decode=[w.url for w in colocated], max_body_bytes=1000)) as r:
        resp = await r.post("/v1/completions", {"model": MODEL, "prompt": "x" * 5000})
        assert resp.status == 413 and "exceeds the limit of 1000 bytes" in (await resp.json())["error"]["message"]
        # Chunked upload without a Content-Length is limited too.
        async def gen():
            yield b'{"prompt": "'
            yield b"y" * 3000
            yield b'"}'
        resp = await r.session.post(r.url + "/v1/completions", data=gen())
        assert resp.status == 413


async def test_concurrency_limit_is_429(colocated) -> None:
    async with run_router(router_config(decode=[w.url for w in colocated], max_concurrency=1)) as r:
        # The stream must still hold the one slot when the next request arrives; at this speed-up its 300
        # tokens take ~30 ms, less than a loaded machine may take to send the next one. So the workers are
        # frozen (SIGSTOP: a stalled engine; the kernel still accepts the connection) until the refusal.
        for w in colocated:
            os.killpg(w.proc.pid, signal.SIGSTOP)
        try:
            slow = asyncio.ensure_future(r.post("/v1/completions", {
                "model": MODEL, "prompt": "x", "max_tokens": 300, "ignore_eos": True, "stream": True}))
            await wait_for(lambda: r.state.active == 1, what="the stream to take the slot")
            busy = await r.post("/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 1})
            assert busy.status == 429 and busy.headers["Retry-After"] == "1"
        finally:
            for w in colocated:
                os.killpg(w.proc.pid, signal.SIGCONT)
        assert (await slow).status == 200
        assert (await read_sse(await slow))[-1] == "[DONE]"
        # The slot is given back after the last byte is written, a moment after the client may have read it.
        await wait_for(lambda: r.state.active == 0, what="the stream's slot to be released")
        assert (await r.post("/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 1})).status == 200


async def test_admission_rejects_when_predicted_ttft_breaks_the_slo(colocated) -> None:
    cfg = router_config(decode=[w.url for w in colocated], routing=RoutingSpec(
        admission=AdmissionSpec(ttft_slo_ms=50, factor=2, prefill_tokens_per_s=1000)))
    async with run_router(cfg) as r:
        short = await r.post("/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 1})
        assert short.status == 200  # ~2 tokens: predicted 2 ms
        long = await r.post("/v1/completions", {"model": MODEL, "prompt": "word " * 400, "max_tokens": 1})
        body = await long.json()
        assert long.status == 503 and int(long.headers["Retry-After"]) >= 1, body
        assert "exceeds 2 x the 50 ms SLO" in body["error"]["message"]
        assert await r.metric("pdserve_router_rejections_total") == 1


async def test_discovery_file_is_reread_on_change(colocated, tmp_path, caplog) -> None:
    path = tmp_path / "workers.json"
    path.write_text(json.dumps({"decode": [colocated[0].url]}))
    async with run_router(router_config(discovery_file=path)) as r:
        assert r.state.pool.urls("decode") == [colocated[0].url]
        path.write_text(json.dumps({"decode": [w.url for w in colocated]}))
        await wait_for(lambda: len(r.state.pool.urls("decode")) == 2, what="discovery reload")
        path.write_text("{ half written")
        # Once the router has read the broken file (it logs that it ignores it), not after a fixed sleep.
        await wait_for(lambda: "ignoring discovery file update" in caplog.text, what="the broken file to be read")
        assert len(r.state.pool.urls("decode")) == 2  # a broken file keeps the last good set
        path.write_text(json.dumps({"decode": [colocated[1].url]}))
        await wait_for(lambda: r.state.pool.urls("decode") == [colocated[1].url], what="worker removal")
        resp = await r.post("/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 1})
        assert resp.status == 200 and f"decode={colocated[1].url}" in resp.headers["x-pdserve-route"]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**6) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)
bodies = st.one_of(
    st.binary(max_size=100),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries(
        {"model": st.sampled_from([MODEL, "other", 3]), "prompt": json_values, "max_tokens": st.integers(-1, 3)},
        optional={"stream": json_values, "n": json_values, "messages": json_values},
    ).map(lambda v: json.dumps(v).encode()),
)


async def test_fuzz_front_end_never_breaks_the_router(colocated) -> None:
    async with run_router(router_config(decode=[w.url for w in colocated])) as r:
        await wait_for(lambda: r.state.pool.known_models(), what="models from workers")
        statuses: list[int] = []

        @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
        @given(raw=bodies, path=st.sampled_from(["/v1/completions", "/v1/chat/completions"]))
        def check(raw: bytes, path: str) -> None:
            async def one() -> None:
                resp = await r.session.post(r.url + path, data=raw, headers={"Content-Type": "application/json"})
                await resp.read()
                statuses.append(resp.status)
                assert resp.status < 500 or resp.status == 503, (raw, resp.status, await resp.text())
                if resp.status >= 400:
                    assert "error" in json.loads(await resp.read())

            fut = asyncio.run_coroutine_threadsafe(one(), loop)
            fut.result(timeout=30)

        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, check)
        assert any(400 <= s < 500 for s in statuses)
        ok = await r.post("/v1/completions", {"model": MODEL, "prompt": "still alive", "max_tokens": 1})
        assert ok.status == 200


async def test_first_token_clears_the_prompt_from_the_routing_ledger(colocated) -> None:
    async with run_router(router_config(decode=[colocated[0].url], scrape_interval_s=60)) as r:
        # The ledger's state is recorded as each change happens: checking it after the first chunk reached
        # the client raced the stream's end (400 tokens at this speed-up take ~50 ms; at load 12 the
        # stream had finished and left the ledger before the check ran).
        ledger, url = r.state.decode_policy.ledger, colocated[0].url
        seen: list[tuple[str, int, int]] = []
        for name in ("prefill_done", "finish"):
            def recorded(rid: str, _call=getattr(ledger, name), _name=name) -> None:
                _call(rid)
                seen.append((_name, ledger.requests(url), ledger.prefill_tokens(url)))
            setattr(ledger, name, recorded)
        resp = await r.post("/v1/completions", {"model": MODEL, "prompt": "word " * 100, "max_tokens": 400,
                                                 "ignore_eos": True, "stream": True})
        assert resp.status == 200
        assert (await read_sse(resp))[-1] == "[DONE]"
        await wait_for(lambda: ("finish", 0, 0) in seen, what="the request to leave the ledger")
        # At the first token the prompt left the queue estimate while the request stayed counted.
        assert seen[0] == ("prefill_done", 1, 0) and seen[-1] == ("finish", 0, 0), seen


async def test_router_internal_overhead_metrics_cover_each_stream(colocated) -> None:
    # The two router-internal latencies the overhead bench reads: arrival -> upstream
    # request written, and first upstream body byte -> written to the client.
    async with run_router(router_config(decode=[w.url for w in colocated])) as r:
        for _ in range(3):
            resp = await r.post("/v1/completions", {"model": MODEL, "prompt": "hello there", "max_tokens": 4,
                                                    "stream": True})
            assert "[DONE]" in await read_sse(resp)
        text = await (await r.session.get(r.url + "/metrics")).text()
        for name in ("pdserve_router_request_overhead_seconds", "pdserve_router_first_chunk_relay_seconds"):
            assert metric_sum(text, name + "_count") == 3, name
            # Positive (measured, not a default) and far below the client's TTFT bound.
            assert 0 < metric_sum(text, name + "_sum") < 3.0, name
        ttft_sum = metric_sum(text, "pdserve_router_time_to_first_token_seconds_sum")
        assert metric_sum(text, "pdserve_router_request_overhead_seconds_sum") < ttft_sum


async def test_live_answers_while_health_says_no_worker(tmp_path) -> None:
    # The router pod's liveness probe: /health is 503 while the decode pool is empty (weights loading, scaled to
    # zero), and as the liveness probe it restarted the router every 30 s; /live only says the process answers.
    discovery = tmp_path / "workers.json"
    discovery.write_text('{"decode": []}')
    async with run_router(router_config(discovery_file=discovery)) as r:
        health = await r.session.get(r.url + "/health")
        assert health.status == 503 and (await health.json())["status"] == "no decode worker available"
        live = await r.session.get(r.url + "/live")
        assert live.status == 200 and (await live.json())["status"] == "alive"
