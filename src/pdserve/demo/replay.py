"""Replays the workload against the router over real HTTP and times every token.

TTFT and ITL are measured as a client sees them (streamed completions through the
router), which is what the SLOs are about.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import httpx

from pdserve.demo.workload import DemoRequest


@dataclass(slots=True)
class RequestResult:
    index: int
    sent_at: float  # seconds after the replay started
    prompt_tokens: int
    ttft_s: float | None = None
    gaps_s: list[float] = field(default_factory=list)  # inter-token latencies
    e2e_s: float | None = None
    output_tokens: int = 0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.ttft_s is not None


def error_message(err: object) -> str:
    """The text of an OpenAI-style ``error`` value: its ``message``, or the value itself where it has none (a bare
    string, or an object without one). Also read by pdserve.loadgen.aiperf for aiperf's per-request records."""
    return str(err.get("message", err)) if isinstance(err, Mapping) else str(err)


def _body_error(raw: bytes) -> str:
    """An error response's OpenAI-style message; a body without one as text."""
    text = raw.decode(errors="replace")
    try:
        err = json.loads(text).get("error")
    except (ValueError, AttributeError):
        return text
    return error_message(err) if err else text


async def send_one(client: httpx.AsyncClient, url: str, model: str, req: DemoRequest, t0: float) -> RequestResult:
    res = RequestResult(req.index, time.monotonic() - t0, req.prompt_tokens)
    body = {
        "model": model,
        "prompt": req.prompt,
        "max_tokens": req.max_tokens,
        # Replay the trace's output length, as benchmark clients do.
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    start = time.monotonic()
    last: float | None = None
    try:
        async with client.stream("POST", f"{url}/v1/completions", json=body) as resp:
            if resp.status_code != 200:
                res.error = f"HTTP {resp.status_code}: {_body_error(await resp.aread())}"[:200]
                return res
            async for line in resp.aiter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    res.error = error_message(chunk["error"])[:200]
                    return res
                usage = chunk.get("usage")
                if usage:
                    res.output_tokens = int(usage.get("completion_tokens", res.output_tokens))
                if any(c.get("text") for c in chunk.get("choices", [])):
                    now = time.monotonic()
                    if last is None:
                        res.ttft_s = now - start
                    else:
                        res.gaps_s.append(now - last)
                    last = now
        res.e2e_s = time.monotonic() - start
        if res.ttft_s is None:
            res.error = "the stream ended without a token"
    except (httpx.HTTPError, json.JSONDecodeError) as e:
        res.error = f"{type(e).__name__}: {e}"[:200]
    return res


async def replay(
    url: str,
    model: str,
    requests: list[DemoRequest],
    on_result: Callable[[RequestResult], None],
    on_sent: Callable[[DemoRequest], None] = lambda r: None,
    timeout_s: float = 60.0,
) -> list[RequestResult]:
    """Sends each request at its time (open loop: late responses do not delay arrivals)."""
    limits = httpx.Limits(max_connections=512, max_keepalive_connections=64)
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=5.0), limits=limits) as client:
        t0 = time.monotonic()
        tasks: list[asyncio.Task[RequestResult]] = []
        for req in requests:
            delay = req.send_at_s - (time.monotonic() - t0)
            if delay > 0:
                await asyncio.sleep(delay)
            on_sent(req)
            task = asyncio.create_task(send_one(client, url, model, req, t0))
            task.add_done_callback(lambda t: on_result(t.result()))
            tasks.append(task)
        return list(await asyncio.gather(*tasks))
