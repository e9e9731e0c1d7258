"""A decode worker lost after its stream's last token but before the usage event and ``[DONE]``: the stream is
complete, so the router ends it (usage when asked for, then ``[DONE]``) instead of resuming it elsewhere.

Fresh-clone CI, session 42: the chaos test lost a decode node between a 16-token stream's last token and its
usage, and the client got ``[DONE]`` without the usage it asked for. A stream that stopped early (``stop``) would
have been continued on another worker past the model's own end.

The workers are fakes on loopback: each writes the given token events and then ends its body without ``[DONE]``,
which the router reads as a lost worker (``relay.relay_stream``).
"""

from __future__ import annotations

import json

import pytest
from aiohttp import web

from pdserve.router.core.spec import RoutingSpec
from tests.router.conftest import MODEL, read_sse, router_config, run_router, serve_app, stream_text


def _worker(tokens: list[str], finish: str | None, asked: list[dict]) -> web.Application:
    async def complete(request: web.Request) -> web.StreamResponse:
        asked.append(await request.json())
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i, text in enumerate(tokens):
            last = i == len(tokens) - 1
            choice = {"index": 0, "text": text, "finish_reason": finish if last else None}
            await resp.write(b"data: " + json.dumps({"id": "x", "model": MODEL, "choices": [choice]}).encode() + b"\n\n")
        await resp.write_eof()  # lost: no usage, no [DONE]
        return resp

    app = web.Application()
    app.router.add_post("/v1/completions", complete)
    return app


@pytest.mark.parametrize(("tokens", "finish", "max_tokens"), [
    ([" one", " two"], "stop", 16),  # stopped early: a continuation would write past the model's end
    ([" one", " two", " three", " four"], "length", 4),  # every token sent
])
async def test_a_finished_stream_is_ended_not_resumed(tokens: list[str], finish: str, max_tokens: int) -> None:
    asked: list[dict] = []
    async with serve_app(_worker(tokens, finish, asked)) as (a, _), serve_app(_worker(tokens, finish, asked)) as (b, _):
        cfg = router_config(decode=[a, b], routing=RoutingSpec(policy="round_robin"), scrape_interval_s=60)
        async with run_router(cfg) as r:
            body = {"model": MODEL, "prompt": "a b c", "max_tokens": max_tokens, "stream": True,
                    "stream_options": {"include_usage": True}}
            resp = await r.post("/v1/completions", body)
            assert resp.status == 200
            events = await read_sse(resp)
    assert len(asked) == 1, f"resumed a finished stream: {asked[1:]}"
    assert events[-1] == "[DONE]"
    assert not any(isinstance(e, dict) and "error" in e for e in events), events
    assert stream_text(events) == "".join(tokens)
    usage = [e["usage"] for e in events if isinstance(e, dict) and e.get("usage")]
    assert len(usage) == 1 and usage[0]["completion_tokens"] == len(tokens) and usage[0]["prompt_tokens"] > 0
    assert usage[0]["total_tokens"] == usage[0]["prompt_tokens"] + len(tokens)
