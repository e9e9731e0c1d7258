"""SIGTERM while a stream is being migrated: its decode worker died a moment before the router was told
to stop (a node drained, a rolling restart of both). The drain covers migrations like any other stream:
one that can finish within ``--shutdown-timeout`` finishes, whole; one that cannot is ended with the
OpenAI-style shutdown error event and [DONE] a second before the deadline, never a cut connection.
A real router process in front of two real mock workers, on loopback."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace

import httpx
import pytest

from pdserve.router.shell.relay import RouterShuttingDown, _unless_ending
from pdserve.tokenization import mock as tokenizer
from tests.router.conftest import MODEL, kill, metric_sum, server_args, spawn

PROMPT = "tell me a long story " * 10
KILL_AFTER = 20  # tokens streamed before the decode worker dies


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _router(decode: list[str], shutdown_timeout_s: float, processes: int, client: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "pdserve.cli", "router", "--decode", *decode,
                             "--port", str(port), "--processes", str(processes), "--shutdown-timeout", str(shutdown_timeout_s),
                             "--upstream-client", client, "--tokenizer-mode", "mock", *server_args(),
                             "--log-level", "WARNING"], start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1).json().get("workers", {}).get("decode") == len(decode):
                    break
            except (httpx.HTTPError, ValueError):
                pass
            assert time.monotonic() < deadline and proc.poll() is None, "router did not become healthy"
            time.sleep(0.1)
        yield url, proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


@dataclass
class Streamed:
    text: str = ""
    chunks: int = 0
    chunks_after_sigterm: int = 0
    events: list[dict] = field(default_factory=list)
    done: bool = False
    sigterm_at: float = 0.0
    ended_after_s: float = 0.0


def _stream_kill_sigterm(url: str, router: subprocess.Popen[bytes], workers: list, max_tokens: int) -> tuple[Streamed, object]:
    """Streams a completion; after KILL_AFTER tokens SIGKILLs its decode worker and at once SIGTERMs
    the router, so the migration to the other worker runs inside the router's drain. Any exception
    from httpx here (incomplete chunked read) is a cut connection."""
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": max_tokens, "stream": True, "ignore_eos": True,
            "stream_options": {"include_usage": True}}
    out = Streamed()
    survivor = None
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=httpx.Timeout(30.0)) as r:
        assert r.status_code == 200
        victim_url = r.headers["x-pdserve-route"].split("decode=")[1].split(" ")[0]
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                out.done = True
                continue
            event = json.loads(line[len("data: "):])
            out.events.append(event)
            if event.get("choices"):
                out.text += event["choices"][0]["text"]
                out.chunks += 1
                out.chunks_after_sigterm += bool(out.sigterm_at)
                if out.chunks == KILL_AFTER:
                    victim = next(w for w in workers if w.url == victim_url)
                    survivor = next(w for w in workers if w.url != victim_url)
                    kill(victim)
                    router.send_signal(signal.SIGTERM)  # the supervisor forwards it under --processes 2
                    out.sigterm_at = time.monotonic()
    out.ended_after_s = time.monotonic() - out.sigterm_at
    assert out.sigterm_at, "the stream ended before the worker could be killed"
    return out, survivor


def _metric(worker_url: str, name: str) -> float:
    return metric_sum(httpx.get(f"{worker_url}/metrics", timeout=5).text, name)


CASES = [(1, "http1"), (2, "http1"), (1, "aiohttp")]


@pytest.mark.parametrize(("processes", "client"), CASES)
def test_a_migration_in_flight_at_sigterm_finishes_within_the_drain(processes: int, client: str) -> None:
    # ~8 ms a token on an idle machine: the ~280 tokens left take ~2.5 s, well within 10 s.
    max_tokens, shutdown_timeout_s = 300, 10.0
    with ExitStack() as stack:
        workers = spawn(stack, 2, speedup=1.0, pd=False, events=False)
        with _router([w.url for w in workers], shutdown_timeout_s, processes, client) as (url, router):
            got, survivor = _stream_kill_sigterm(url, router, workers, max_tokens)
            errors = [e["error"] for e in got.events if e.get("error")]
            assert not errors and got.done, got.events[-3:]
            # Whole: every token once (the budget kept across the two workers), usage counting them all.
            assert len(tokenizer.encode(got.text)) == max_tokens
            usage = [e["usage"] for e in got.events if e.get("usage")]
            assert usage and usage[-1]["completion_tokens"] == max_tokens, usage
            assert got.ended_after_s < shutdown_timeout_s - 1.0
            # The victim may have sent a few more tokens than the client had read when it died.
            assert _metric(survivor.url, "vllm:generation_tokens_total") >= max_tokens // 2, "the survivor generated the rest"
            # The router exits cleanly as soon as the stream is done, not at the deadline.
            assert router.wait(shutdown_timeout_s) == 0


@pytest.mark.parametrize(("processes", "client"), CASES)
def test_a_migration_still_streaming_at_the_deadline_ends_with_an_error_event(processes: int, client: str) -> None:
    max_tokens, shutdown_timeout_s = 20000, 3.0
    with ExitStack() as stack:
        workers = spawn(stack, 2, speedup=1.0, pd=False, events=False)
        with _router([w.url for w in workers], shutdown_timeout_s, processes, client) as (url, router):
            got, survivor = _stream_kill_sigterm(url, router, workers, max_tokens)
            errors = [e["error"] for e in got.events if e.get("error")]
            assert got.done and errors and "router is shutting down" in errors[-1]["message"], got.events[-3:]
            assert got.chunks_after_sigterm > 10, "the migrated stream flowed during the drain"
            # Ended a second before the deadline, well before aiohttp would cut the connection.
            assert shutdown_timeout_s - 1.5 < got.ended_after_s < shutdown_timeout_s, got.ended_after_s
            assert router.wait(10) == 0
            # The survivor saw the router go and stopped generating: no orphan decode.
            deadline = time.monotonic() + 10
            while _metric(survivor.url, "vllm:num_requests_running") > 0:
                assert time.monotonic() < deadline, "the survivor still decodes for the stopped router"
                time.sleep(0.1)


async def test_a_continuation_still_being_placed_gives_up_when_the_drain_ends() -> None:
    # The window between a worker's death and the continuation's first byte: end_streams cannot end a
    # response that does not exist yet, so the placing is raced against state.ending.
    state = SimpleNamespace(ending=asyncio.Event())
    cancelled = asyncio.Event()

    async def placing() -> object:
        try:
            await asyncio.sleep(3600)  # a worker that accepts the connection and never answers
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return None

    waiting = asyncio.ensure_future(_unless_ending(state, placing()))  # type: ignore[arg-type]
    await asyncio.sleep(0.05)
    assert not waiting.done()
    state.ending.set()
    with pytest.raises(RouterShuttingDown):
        await asyncio.wait_for(waiting, 5)
    assert cancelled.is_set(), "the attempt given up is cancelled, not left running"
    # After the drain ended, no continuation is even started.
    never = placing()
    with pytest.raises(RouterShuttingDown):
        await _unless_ending(state, never)  # type: ignore[arg-type]
