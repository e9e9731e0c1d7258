"""SIGTERM with a stream in flight (a pod deleted, a rolling restart): the router drains for
``--shutdown-timeout`` and ends what is still streaming with an OpenAI-style error event and
[DONE], never a cut connection, which a client over HTTP/1.0 could not tell from a short answer.
A real router process in front of a real mock worker."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest

from tests.router.conftest import MODEL, server_args, spawn

SHUTDOWN_TIMEOUT_S = 3.0


def _refused_within(port: int, timeout_s: float) -> float | None:
    """How long until a new connection to the router is refused (None: still accepted after ``timeout_s``)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        except ConnectionRefusedError:
            return time.monotonic() - start
        time.sleep(0.02)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def worker() -> Iterator:
    with ExitStack() as stack:
        yield spawn(stack, 1, speedup=1.0, pd=False, events=False)[0]  # real-time decoding: streams last


def _running(worker_url: str) -> float:
    text = httpx.get(f"{worker_url}/metrics", timeout=5).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("vllm:num_requests_running"))


@pytest.mark.parametrize(("processes", "client"), [(1, "http1"), (2, "http1"), (1, "aiohttp")])
def test_sigterm_ends_a_stream_in_flight_with_an_error_event_after_the_drain(worker, processes: int, client: str) -> None:
    port = _free_port()
    router = subprocess.Popen([sys.executable, "-m", "pdserve.cli", "router", "--decode", worker.url, "--port", str(port),
                               "--processes", str(processes), "--shutdown-timeout", str(SHUTDOWN_TIMEOUT_S),
                               "--upstream-client", client, "--tokenizer-mode", "mock", *server_args(), "--log-level", "WARNING"],
                              start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline and router.poll() is None, "router did not become healthy"
            time.sleep(0.1)
        body = {"model": MODEL, "prompt": "hello world", "max_tokens": 20000, "stream": True, "ignore_eos": True}
        chunks, events, done, sigterm_at = 0, [], False, 0.0
        # An exception here (httpx.RemoteProtocolError: incomplete chunked read) is the cut connection.
        with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=httpx.Timeout(10.0)) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    done = True
                    continue
                event = json.loads(line[len("data: "):])
                events.append(event)
                if event.get("choices"):
                    chunks += 1
                    if chunks == 5:
                        router.send_signal(signal.SIGTERM)  # the supervisor forwards it under --processes 2
                        sigterm_at = time.monotonic()
                    if chunks == 6:  # draining: the stream goes on, a new client is refused
                        refused_at = _refused_within(port, SHUTDOWN_TIMEOUT_S - 1.5)
                        assert refused_at is not None, "a new connection was accepted during the drain"
        ended = time.monotonic() - sigterm_at
        assert sigterm_at, "the stream ended before it could be interrupted"
        errors = [e["error"] for e in events if e.get("error")]
        assert done and errors and "router is shutting down" in errors[-1]["message"], events[-3:]
        # In flight until a second before the shutdown timeout (the drain), then ended, well before
        # aiohttp would cut the connection.
        assert SHUTDOWN_TIMEOUT_S - 1.5 < ended < SHUTDOWN_TIMEOUT_S, ended
        assert chunks > 5, "tokens kept flowing during the drain"
        assert router.wait(10) == 0
        # The worker saw its client go and stopped generating: no orphan decode.
        deadline = time.monotonic() + 10
        while _running(worker.url) > 0:
            assert time.monotonic() < deadline, "the worker still decodes for the stopped router"
            time.sleep(0.1)
    finally:
        if router.poll() is None:
            os.killpg(router.pid, signal.SIGKILL)
            router.wait(5)
