"""KV event lag on the live stack: worker publish -> router receive, per event batch.

The simulator's default ``kv_event_lag_s`` (pdserve.sim.config) models when a step's KV
events reach the router's index. This measures it on what the router really runs
against: a mock worker publishing vLLM's ZMQ ``EventBatch`` (``[ts, events, rank]``,
``ts`` = the worker's wall clock at publish) and a SUB socket on loopback decoding each
message with the router's own parser (``pdserve.router.shell.kv_events.parse_message``).
Lag = receive time - ``ts``. Requests run a few at a time so batches come from busy
steps, as in service.

    python bench/sim/kv_event_lag.py --requests 200 --out bench/sim/results/kv_event_lag.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

import aiohttp
import msgpack
import zmq
import zmq.asyncio

from pdserve.router.shell.kv_events import parse_message
from pdserve.worker.testing import start_worker

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from resultmeta import Run, write_result  # noqa: E402

MODEL = "mock-llama"


async def measure(url: str, endpoint: str, requests: int, concurrency: int, speedup: float) -> list[float]:
    ctx = zmq.asyncio.Context.instance()
    sock = ctx.socket(zmq.SUB)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    lags: list[float] = []
    done = asyncio.Event()

    async def receive() -> None:
        while not done.is_set():
            try:
                frames = await asyncio.wait_for(sock.recv_multipart(), timeout=0.2)
            except TimeoutError:
                continue
            now = time.time()
            parse_message(frames)  # what the router does with it, so malformed batches fail here too
            ts = msgpack.unpackb(frames[2], raw=False, strict_map_key=False)[0]
            lags.append(now - float(ts))

    async def client(session: aiohttp.ClientSession, k: int) -> None:
        for i in range(k, requests, concurrency):
            body = {"model": MODEL, "prompt": f"request {i} " + "shared words " * (50 + i % 200), "max_tokens": 8,
                    "ignore_eos": True}
            async with session.post(url + "/v1/completions", json=body) as r:
                await r.read()

    rx = asyncio.create_task(receive())
    await asyncio.sleep(0.5)  # the SUB socket's subscription reaches the publisher
    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(client(session, k) for k in range(concurrency)))
    await asyncio.sleep(0.5)
    done.set()
    await rx
    sock.close()
    return lags


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--speedup", type=float, default=1.0, help="mock worker speed-up (1 = the profile's step times)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    run = Run()
    events = json.dumps({"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://127.0.0.1:*"})
    with start_worker(MODEL, args=["--kv-events-config", events], speedup=args.speedup) as w:
        lags = asyncio.run(measure(w.url, w.kv_events_endpoint, args.requests, args.concurrency, args.speedup))
    if not lags:
        print("no KV event batches received", file=sys.stderr)
        return 1
    lags.sort()

    def pct(p: float) -> float:  # nearest rank
        return round(lags[min(len(lags) - 1, int(p / 100 * len(lags)))] * 1000, 3)

    doc = {"batches": len(lags), "lag_ms": {"p50": round(statistics.median(lags) * 1000, 3), "p90": pct(90),
                                            "p99": pct(99), "max": round(lags[-1] * 1000, 3)},
           "requests": args.requests, "concurrency": args.concurrency, "speedup": args.speedup}
    write_result(args.out, doc, run)
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
