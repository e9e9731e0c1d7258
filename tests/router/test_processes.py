"""``pdserve router --processes N``: real router processes sharing one port."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack

import aiohttp
import pytest

from tests.router.conftest import MODEL, metric_sum, read_sse, server_args, spawn, stream_text


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except FileNotFoundError:
        return None


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture(scope="module")
def worker() -> Iterator:
    with ExitStack() as stack:
        yield spawn(stack, 1, speedup=1000.0, pd=False, events=False)[0]


@pytest.fixture
def router(worker) -> Iterator[tuple[subprocess.Popen, str]]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "pdserve.cli", "router", "--decode", worker.url, "--port",
                             str(port), "--processes", "2", "--policy", "round_robin", "--log-level", "WARNING",
                             "--tokenizer-mode", "mock", *server_args()],
                            stderr=subprocess.PIPE, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # lets the supervisor remove its metrics folder
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)


async def _health_pids(url: str, timeout_s: float = 30.0) -> set[int]:
    """Process ids answering /health over fresh connections (the kernel picks one per connection).

    Bounded by time, not by a number of answers: the processes start one after the other
    (each loads the tokenizer), so the first can answer hundreds of times before the second
    listens on a loaded machine."""
    pids: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and len(pids) < 2:
        try:
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s, \
                    s.get(url + "/health") as r:
                if r.status == 200:
                    pids.add((await r.json())["pid"])
        except aiohttp.ClientConnectionError:
            await __import__("asyncio").sleep(0.1)  # still starting
    return pids


async def test_two_processes_share_the_port_route_and_report_metrics_together(router) -> None:
    proc, url = router
    pids = await _health_pids(url)
    assert len(pids) == 2 and all(_ppid(p) == proc.pid for p in pids), pids
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s:
        for i in range(30):  # each on a fresh connection, so both processes serve some
            async with s.post(url + "/v1/completions", json={"model": MODEL, "prompt": f"hello {i}",
                                                             "max_tokens": 3, "stream": True}) as r:
                assert r.status == 200
                events = await read_sse(r)
                assert events[-1] == "[DONE]" and stream_text(events)
        # A request is counted once its stream has ended, which the server may finish after the client read
        # [DONE]: wait (bounded) for the last one before reading. A count that is lost still fails here.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            async with s.get(url + "/metrics") as r:
                if metric_sum(await r.text(), "pdserve_router_requests_total") >= 30:
                    break
            await asyncio.sleep(0.05)
        # Any process answers /metrics with every process's counts added up.
        for _ in range(4):
            async with s.get(url + "/metrics") as r:
                text = await r.text()
            assert metric_sum(text, "pdserve_router_requests_total") == 30
            assert metric_sum(text, "pdserve_router_time_to_first_token_seconds_count") == 30
            assert metric_sum(text, "pdserve_router_worker_up") == 1  # one worker, not one per process


async def test_sigterm_stops_every_process_and_frees_the_port(router) -> None:
    proc, url = router
    pids = await _health_pids(url)
    assert len(pids) == 2
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0
    assert not any(_alive(p) for p in pids)
    port = int(url.rsplit(":", 1)[1])
    with socket.socket() as s, pytest.raises(ConnectionRefusedError):
        s.connect(("127.0.0.1", port))  # nobody listens any more
    with socket.socket() as s:  # and nobody holds it (connections of the test may linger in TIME_WAIT)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))


async def test_a_process_that_dies_takes_the_others_down_with_a_clear_message(router) -> None:
    proc, url = router
    pids = sorted(await _health_pids(url))
    assert len(pids) == 2
    os.kill(pids[0], signal.SIGKILL)
    assert proc.wait(20) != 0
    assert not _alive(pids[1])
    assert f"process {pids[0]} exited" in proc.stderr.read().decode()  # type: ignore[union-attr]


async def _health(url: str) -> tuple[int, dict] | None:
    """One /health on a fresh connection (the kernel picks the process); None while nothing listens."""
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s, \
                s.get(url + "/health") as r:
            return r.status, await r.json()
    except aiohttp.ClientConnectionError:
        return None


async def test_health_is_ok_only_once_every_process_has_its_workers(worker, tmp_path) -> None:
    # Each process polls the discovery file on its own every 0.5 s: one read it, answered /health 200, and the other
    # still answered requests 503 "no worker available" (the demo in session 40's fresh-clone CI). The set reads
    # ready only when every process has a decode worker, so after the first 200 none answers 503.
    discovery = tmp_path / "discovery.json"
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "pdserve.cli", "router", "--discovery-file", str(discovery),
                             "--port", str(port), "--processes", "2", "--policy", "round_robin", "--log-level",
                             "WARNING", "--tokenizer-mode", "mock", *server_args()],
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        waiting: set[int] = set()  # both processes listen, neither has a worker
        deadline = time.monotonic() + 30
        while len(waiting) < 2 and time.monotonic() < deadline:
            got = await _health(url)
            if got is None:
                await asyncio.sleep(0.1)
                continue
            assert got[0] == 503, got
            waiting.add(got[1]["pid"])
        assert len(waiting) == 2, waiting
        discovery.write_text(f'{{"decode": ["{worker.url}"]}}')
        answers: list[tuple[int, int]] = []
        deadline = time.monotonic() + 10
        while not answers or answers[0][0] != 200:
            assert time.monotonic() < deadline, answers
            got = await _health(url)
            assert got is not None
            answers[:] = [(got[0], got[1]["pid"])]
        after_first = time.monotonic() + 1.5  # three polling periods
        while time.monotonic() < after_first:
            got = await _health(url)
            assert got is not None
            answers.append((got[0], got[1]["pid"]))
        assert {status for status, _ in answers} == {200}, [a for a in answers if a[0] != 200][:3]
        assert {pid for _, pid in answers} == waiting  # both answered
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
