"""Live stack helpers shared by fidelity.py and hop_probe.py (not a script).

Starts ``pdserve worker`` processes and ``pdserve router`` on loopback and replays
requests against them as streaming completions, recording per request the actual
send time, the first-token and later token times, and the workers the router chose
(from its ``x-pdserve-route`` debug header).
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack, contextmanager
from collections.abc import Iterator
from dataclasses import dataclass, field

import aiohttp
import httpx

from pdserve.common.procs import stop_group
from pdserve.worker.testing import start_worker

NIXL = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"})
_ROUTE = re.compile(r"\b(prefill|decode)=(\S+) \[")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_router(prefill: list[str], decode: list[str], policy: str) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    cmd = [sys.executable, "-m", "pdserve.cli", "router", "--host", "127.0.0.1", "--port", str(port),
           "--policy", policy, "--decode-policy", "least_loaded", "--log-level", "WARNING",
           "--tokenizer-mode", "mock",  # mock workers: pdserve's hash-word tokenizer
           "--processes", "1"]  # one routing state, as the simulator's
    if prefill:
        cmd += ["--prefill", *prefill]
    cmd += ["--decode", *decode]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"router exited: {proc.stderr.read().decode() if proc.stderr else ''}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    stop(proc)
    raise TimeoutError("router did not become healthy within 30 s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    stop_group(proc)


@dataclass
class Stack:
    """Running workers (prefill first) and, unless direct, the router in front."""

    url: str  # where clients send
    prefill: list[str]
    decode: list[str]
    worker_urls: list[str] = field(default_factory=list)

    def sim_id(self, url: str, role: str, disagg: bool) -> str:
        """The simulator's name for the worker at ``url`` (P0.., D0.. or C0..)."""
        if role == "prefill":
            return f"P{self.prefill.index(url)}"
        return f"{'D' if disagg else 'C'}{self.decode.index(url)}"


def worker_args(topology: str, token_budget: int, max_model_len: int, kv_link_gbps: float) -> list[str]:
    """``pdserve worker`` flags matching a SimConfig's pool settings."""
    args = ["--kv-transfer-config", NIXL, "--mock-kv-link-gbps", str(kv_link_gbps), "--mock-side-channel-port", "0"]
    if topology == "colocated":
        args += ["--no-enable-chunked-prefill", "--max-num-batched-tokens", str(max_model_len)]
    elif topology == "chunked":
        args += ["--max-num-batched-tokens", str(token_budget)]
    return args


@contextmanager
def live_stack(n_prefill: int, n_decode: int, wargs: Sequence[str], speedup: float, profile: str, policy: str,
               *, direct: bool = False) -> Iterator[Stack]:
    """Workers at ``speedup`` behind a router (or, with ``direct``, the first decode worker alone)."""
    with ExitStack() as es:
        workers = [es.enter_context(start_worker("mock", args=list(wargs), speedup=speedup, profile=profile))
                   for _ in range(n_prefill + n_decode)]
        pre = [w.url for w in workers[:n_prefill]]
        dec = [w.url for w in workers[n_prefill:]]
        if direct:
            yield Stack(dec[0], pre, dec, pre + dec)
            return
        router, url = start_router(pre, dec, policy)
        es.callback(stop, router)
        yield Stack(url, pre, dec, pre + dec)


@dataclass
class LiveRequest:
    """One request as the client saw it; times are wall seconds from the replay's t0."""

    index: int
    scheduled_s: float
    sent_s: float = float("nan")
    first_token_s: float = float("nan")
    token_s: list[float] = field(default_factory=list)
    prefill_worker: str = ""
    decode_worker: str = ""
    error: str = ""

    @property
    def ttft_s(self) -> float:
        return self.first_token_s - self.sent_s

    @property
    def gaps(self) -> list[float]:
        return [b - a for a, b in zip(self.token_s, self.token_s[1:])]


async def replay(url: str, schedule: Sequence[tuple[int, float, list[int], int]]) -> list[LiveRequest]:
    """Send each (index, wall offset, prompt ids, output tokens) at its offset; stream the answers."""
    out = [LiveRequest(i, at) for i, at, _, _ in schedule]
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=600)) as session:
        t0 = time.perf_counter() + 0.5

        async def one(rec: LiveRequest, prompt: list[int], n_out: int) -> None:
            await asyncio.sleep(max(0.0, t0 + rec.scheduled_s - time.perf_counter()))
            body = {"model": "mock", "prompt": prompt, "max_tokens": n_out, "min_tokens": n_out,
                    "ignore_eos": True, "stream": True}
            rec.sent_s = time.perf_counter() - t0
            try:
                async with session.post(f"{url}/v1/completions", json=body) as resp:
                    resp.raise_for_status()
                    for role, worker in _ROUTE.findall(resp.headers.get("x-pdserve-route", "")):
                        setattr(rec, f"{role}_worker", worker)
                    async for raw in resp.content:
                        line = raw.strip()
                        if line.startswith(b"data: ") and line != b"data: [DONE]":
                            chunk = json.loads(line[6:])
                            if chunk.get("choices") and chunk["choices"][0].get("text") is not None:
                                rec.token_s.append(time.perf_counter() - t0)
            except (TimeoutError, aiohttp.ClientError) as e:
                rec.error = f"{type(e).__name__}: {e}"
            if rec.token_s:
                rec.first_token_s = rec.token_s[0]

        await asyncio.gather(*(one(rec, p, n) for rec, (_, _, p, n) in zip(out, schedule)))
    return out


def loop_lag(worker_urls: Sequence[str]) -> dict[str, dict[str, float]]:
    """Each worker's event-loop lag histogram summary: samples and the share later than 5/20/50 ms."""
    out: dict[str, dict[str, float]] = {}
    for url in worker_urls:
        text = httpx.get(f"{url}/metrics", timeout=5).text
        buckets: dict[float, float] = {}
        for line in text.splitlines():
            if line.startswith("pdserve_worker_event_loop_lag_seconds_bucket"):
                le = line.split('le="', 1)[1].split('"', 1)[0]
                buckets[float(le)] = float(line.rsplit(" ", 1)[1])
        total = buckets.get(float("inf"), 0.0)
        row = {"samples": total}
        for ms in (5, 20, 50):
            below = max((c for le, c in buckets.items() if le <= ms / 1000), default=0.0)
            row[f"over_{ms}ms"] = round((total - below) / total, 4) if total else 0.0
        out[url] = row
    return out
