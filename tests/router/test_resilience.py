"""Failures: retry before the first byte, migration mid-stream, clean SSE errors."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

from pdserve.tokenization import mock as tokenizer
from pdserve.router.core.spec import RoutingSpec
from tests.router.conftest import router_config, MODEL, kill, read_sse, run_router, spawn, stream_text, wait_for, worker_metric


def dead_url() -> str:
    """A loopback port nobody listens on."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


async def test_dead_workers_are_retried_before_the_first_byte(worker_stack) -> None:
    (p,) = spawn(worker_stack, 1, pd=True, events=False)
    (d,) = spawn(worker_stack, 1, pd=True, events=False)
    cfg = router_config(prefill=[dead_url(), p.url], decode=[dead_url(), d.url], routing=RoutingSpec(policy="round_robin", decode_policy="round_robin"), scrape_interval_s=60, worker_cooldown_s=0.0)
    # No cooldown: the dead workers stay eligible, so requests really hit them first.
    async with run_router(cfg) as r:
        for i in range(4):
            body = {"model": MODEL, "prompt": f"request {i} " * 20, "max_tokens": 4, "stream": i % 2 == 1}
            resp = await r.post("/v1/completions", body)
            assert resp.status == 200, await resp.text()
            if body["stream"]:
                assert (await read_sse(resp))[-1] == "[DONE]"
            else:
                await resp.read()
            assert "mode=pd" in resp.headers["x-pdserve-route"]
        assert await r.metric("pdserve_router_retries_total") >= 1
        assert await r.metric("pdserve_router_pd_handoffs_total") == 4


async def test_no_live_worker_is_a_clean_503(worker_stack) -> None:
    cfg = router_config(decode=[dead_url()], max_retries=1, scrape_interval_s=60)
    async with run_router(cfg) as r:
        resp = await r.post("/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 2})
        body = await resp.json()
        assert resp.status in (502, 503) and "decode" in body["error"]["message"]
        h = await r.session.get(r.url + "/health")
        assert h.status == 503  # the failed worker is cooling down


async def _stream_until_tokens(resp, n: int) -> tuple[list[bytes], int]:
    raw: list[bytes] = []
    seen = 0
    async for chunk in resp.content.iter_any():
        raw.append(chunk)
        seen += chunk.count(b'"text"') + chunk.count(b'"content"')
        if seen >= n:
            break
    return raw, seen


async def test_decode_worker_killed_mid_stream_migrates(worker_stack) -> None:
    workers = spawn(worker_stack, 2, speedup=1.0, pd=False, events=False)
    cfg = router_config(decode=[w.url for w in workers], routing=RoutingSpec(policy="round_robin"), scrape_interval_s=60)
    async with run_router(cfg) as r:
        body = {"model": MODEL, "prompt": "tell me a long story " * 10, "max_tokens": 60, "ignore_eos": True,
                "stream": True, "stream_options": {"include_usage": True}}
        resp = await r.post("/v1/completions", body)
        assert resp.status == 200
        victim_url = resp.headers["x-pdserve-route"].split("decode=")[1].split(" ")[0]
        victim = next(w for w in workers if w.url == victim_url)
        survivor = next(w for w in workers if w.url != victim_url)
        first, _ = await _stream_until_tokens(resp, 10)
        kill(victim)
        rest = await read_sse(resp)
        events = await _reparse(first) + rest
        assert events[-1] == "[DONE]"
        assert not any(isinstance(e, dict) and "error" in e for e in events), events
        text = stream_text(events)
        # Every token arrives exactly once: the budget is honoured across the two workers.
        assert len(tokenizer.encode(text)) == 60
        usage = [e["usage"] for e in events if isinstance(e, dict) and e.get("usage")]
        assert usage and usage[-1]["completion_tokens"] == 60
        assert await r.metric("pdserve_router_migrations_total") == 1
        # The survivor really did the rest of the work.
        assert await worker_metric(survivor.url, "vllm:generation_tokens_total") >= 60 - 30


async def test_migration_impossible_ends_with_error_event_then_done(worker_stack) -> None:
    (w,) = spawn(worker_stack, 1, speedup=1.0, pd=False, events=False)
    cfg = router_config(decode=[w.url], scrape_interval_s=60)
    async with run_router(cfg) as r:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "go on"}], "max_tokens": 200,
                "ignore_eos": True, "stream": True}
        resp = await r.post("/v1/chat/completions", body)
        assert resp.status == 200
        first, _ = await _stream_until_tokens(resp, 5)
        kill(w)
        rest = await asyncio.wait_for(read_sse(resp), timeout=20)
        assert rest[-1] == "[DONE]"
        errors = [e for e in rest if isinstance(e, dict) and "error" in e]
        assert len(errors) == 1 and "lost mid-stream" in errors[0]["error"]["message"]
        assert await r.metric("pdserve_router_migrations_total") == 1  # outcome=failed


async def test_client_disconnect_cancels_the_upstream_request(worker_stack) -> None:
    (w,) = spawn(worker_stack, 1, speedup=1.0, pd=False, events=False)
    cfg = router_config(decode=[w.url], scrape_interval_s=60)
    async with run_router(cfg) as r:
        resp = await r.post("/v1/completions", {"model": MODEL, "prompt": "x y z", "max_tokens": 2000,
                                                 "ignore_eos": True, "stream": True})
        await _stream_until_tokens(resp, 3)
        resp.close()  # the client goes away
        for _ in range(100):
            if await worker_metric(w.url, "vllm:num_requests_running") == 0:
                break
            await asyncio.sleep(0.05)
        assert await worker_metric(w.url, "vllm:num_requests_running") == 0
        assert await worker_metric(w.url, "vllm:generation_tokens_total") < 2000


async def _reparse(chunks: list[bytes]) -> list:
    import json

    out = []
    for block in b"".join(chunks).split(b"\n\n"):
        for line in block.split(b"\n"):
            if line.startswith(b"data: "):
                out.append("[DONE]" if line[6:] == b"[DONE]" else json.loads(line[6:]))
    return out


async def test_prefill_pool_down_falls_back_to_local_prefill(worker_stack) -> None:
    (d,) = spawn(worker_stack, 1, pd=True, events=False)
    cfg = router_config(prefill=[dead_url()], decode=[d.url], max_retries=1, scrape_interval_s=60,
                       worker_cooldown_s=0.0)
    async with run_router(cfg) as r:
        resp = await r.post("/v1/completions", {"model": MODEL, "prompt": "fall back " * 30, "max_tokens": 3})
        assert resp.status == 200, await resp.text()
        route = resp.headers["x-pdserve-route"]
        assert "mode=local" in route and "prefill failed" in route
        assert await r.metric("pdserve_router_pd_handoffs_total") == 1  # outcome=prefill_failed
        assert await worker_metric(d.url, "pdserve_worker_kv_transfers_total") == 0


async def test_no_decode_worker_at_all_is_503() -> None:
    from pdserve.router.shell.discovery import Endpoints

    cfg = router_config(decode=[dead_url()], scrape_interval_s=60)
    async with run_router(cfg) as r:
        r.state.apply_endpoints(Endpoints())  # every worker left the pool
        resp = await r.post("/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 1})
        body = await resp.json()
        assert resp.status == 503 and body["error"]["type"] == "ServiceUnavailableError"


async def test_non_streamed_request_is_redone_when_its_worker_dies(worker_stack) -> None:
    workers = spawn(worker_stack, 2, speedup=1.0, pd=False, events=False)
    cfg = router_config(decode=[w.url for w in workers], routing=RoutingSpec(policy="round_robin"), scrape_interval_s=60)
    async with run_router(cfg) as r:
        task = asyncio.create_task(r.post("/v1/completions", {"model": MODEL, "prompt": "redo me", "max_tokens": 80,
                                                               "ignore_eos": True}))
        await wait_for(lambda: any(p.ledger.requests(workers[0].url) for p in r.state.all_policies),
                       what="the request to reach the first worker")
        # Killed while generating (not before the worker had the request), as waited for, not slept on.
        for _ in range(200):
            if await worker_metric(workers[0].url, "vllm:generation_tokens_total") > 0:
                break
            await asyncio.sleep(0.05)
        assert await worker_metric(workers[0].url, "vllm:generation_tokens_total") > 0
        kill(workers[0])
        resp = await task
        body = await resp.json()
        assert resp.status == 200, body
        assert body["usage"]["completion_tokens"] == 80
        assert f"decode={workers[1].url}" in resp.headers["x-pdserve-route"]
        assert "retried" in resp.headers["x-pdserve-route"]


async def test_pd_decode_worker_killed_mid_stream_migrates(worker_stack) -> None:
    (p,) = spawn(worker_stack, 1, speedup=100.0, pd=True, events=False)
    decode = spawn(worker_stack, 2, speedup=1.0, pd=True, events=False)
    cfg = router_config(prefill=[p.url], decode=[w.url for w in decode], routing=RoutingSpec(decode_policy="round_robin"),
                       scrape_interval_s=60)
    async with run_router(cfg) as r:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "a long answer please " * 20}],
                "max_tokens": 50, "ignore_eos": True, "stream": True}
        resp = await r.post("/v1/chat/completions", body)
        assert resp.status == 200 and "mode=pd" in resp.headers["x-pdserve-route"]
        victim_url = resp.headers["x-pdserve-route"].split("decode=")[1].split(" ")[0]
        first, _ = await _stream_until_tokens(resp, 8)
        kill(next(w for w in decode if w.url == victim_url))
        events = await _reparse(first) + await read_sse(resp)
        assert events[-1] == "[DONE]" and not any(isinstance(e, dict) and "error" in e for e in events)
        assert len(tokenizer.encode(stream_text(events, "chat"))) == 50
        chunks = [e for e in events if isinstance(e, dict) and e.get("choices")]
        assert all(e["object"] == "chat.completion.chunk" for e in chunks)  # re-framed for the chat client
        assert await r.metric("pdserve_router_migrations_total") == 1


async def _raw_stream(url: str, version: str, max_tokens: int, rcvbuf: int | None = None,
                      hold_until: Callable[[], object] | None = None) -> bytes:
    """A streamed completion over a raw socket (optionally with a small receive buffer,
    not read until ``hold_until()`` is true); returns the response body, de-chunked."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket()
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (host, int(port)))
    reader, writer = await asyncio.open_connection(sock=sock)
    body = (f'{{"model": "{MODEL}", "prompt": "slow reader", "max_tokens": {max_tokens:d}, "ignore_eos": true, '
            f'"stream": true}}').encode()
    writer.write(b"POST /v1/completions HTTP/%s\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (version.encode(), len(body), body))
    if hold_until is not None:
        await wait_for(hold_until, timeout=60, what="the router to pause reading the worker")
    if rcvbuf:  # read the rest quickly (the window scale fixed at connect still caps it at 64 KB)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    raw = await asyncio.wait_for(reader.read(), timeout=60)
    writer.close()
    head, _, rest = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.") and b" 200 " in head.split(b"\r\n")[0], head[:200]
    if b"transfer-encoding: chunked" not in head.lower():
        return rest
    out, pos = [], 0
    while True:
        eol = rest.index(b"\r\n", pos)
        size = int(rest[pos:eol], 16)
        if size == 0:
            return b"".join(out)
        out.append(rest[eol + 2 : eol + 2 + size])
        assert rest[eol + 2 + size : eol + 4 + size] == b"\r\n"
        pos = eol + 4 + size


async def test_slow_client_pauses_the_worker_and_gets_the_whole_stream(worker_stack, monkeypatch) -> None:
    from pdserve.router.shell.http1 import Response

    pauses = []
    real_pause = Response.pause
    monkeypatch.setattr(Response, "pause", lambda self: (pauses.append(1), real_pause(self)))
    from pdserve.worker.testing import start_worker

    w = worker_stack.enter_context(start_worker(MODEL, speedup=1e6, args=["--max-model-len", "65536"]))
    async with run_router(router_config(decode=[w.url], scrape_interval_s=60)) as r:
        # ~6 MB of SSE into a client that reads nothing until the router has paused the
        # worker, through a small receive buffer: more than the kernel's socket buffers
        # (tcp_wmem tops out at 4 MB), so the router's own write buffer passes its
        # high-water mark (waited for, not slept on: a loaded machine streams slower).
        body = await _raw_stream(r.url, "1.1", 30000, rcvbuf=4096, hold_until=lambda: pauses)
        events = [e for e in body.split(b"\n\n") if e]
        assert events[-1] == b"data: [DONE]" and len(events) == 30001
        # HTTP/1.0 clients get the body unframed, ended by the connection's close.
        body = await _raw_stream(r.url, "1.0", 5)
        assert body.endswith(b"data: [DONE]\n\n") and body.count(b"\n\n") == 6
