"""aiohttp vs starlette+uvicorn for the worker's SSE streaming (why the worker uses aiohttp).

    python bench/worker/http_framework.py [--concurrency 256] [--chunks 64] [--rounds 3]

Each framework serves the same endpoint in its own process: a stream of `--chunks`
SSE chunks (vLLM-sized JSON), one chunk per 5 ms "engine step" for every open stream,
as the worker does. A client keeps `--concurrency` streams open for `--rounds` rounds.
Reported: streamed chunks/s and server CPU microseconds per chunk (from /proc).
Writes http_framework_results.json / .md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

CHUNK = (b'data: {"id":"cmpl-0123456789abcdef","object":"text_completion","created":1700000000,"model":"llama",'
         b'"choices":[{"index":0,"text":" token","logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n')
STEP_S = 0.005


class Ticker:
    """One shared 'engine step' clock: every stream waits for the next tick, as tokens arrive per step."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    async def run(self) -> None:
        while True:
            await asyncio.sleep(STEP_S)
            self.event.set()
            self.event = asyncio.Event()


def serve_aiohttp(port: int) -> None:
    from aiohttp import web

    ticker = Ticker()

    async def stream(request: web.Request) -> web.StreamResponse:
        n = int(request.query.get("n", "64"))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for _ in range(n):
            await ticker.event.wait()
            await resp.write(CHUNK)
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def start(app: web.Application) -> None:
        app["ticker"] = asyncio.get_running_loop().create_task(ticker.run())

    app = web.Application()
    app.router.add_get("/stream", stream)
    app.on_startup.append(start)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


def serve_starlette(port: int) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    ticker = Ticker()

    async def stream(request: Request) -> StreamingResponse:
        n = int(request.query_params.get("n", "64"))

        async def gen():  # type: ignore[no-untyped-def]
            for _ in range(n):
                await ticker.event.wait()
                yield CHUNK
            yield b"data: [DONE]\n\n"

        return StreamingResponse(gen(), media_type="text/event-stream")

    async def lifespan(app):  # type: ignore[no-untyped-def]
        task = asyncio.get_running_loop().create_task(ticker.run())
        yield
        task.cancel()

    app = Starlette(routes=[Route("/stream", stream)], lifespan=lifespan)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def client(port: int, concurrency: int, chunks: int, rounds: int) -> int:
    total = 0

    async def one(session: aiohttp.ClientSession) -> int:
        n = 0
        async with session.get(f"http://127.0.0.1:{port}/stream?n={chunks}") as r:
            async for line in r.content:
                if line.startswith(b"data: {"):
                    n += 1
        return n

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
        for _ in range(rounds):
            total += sum(await asyncio.gather(*(one(s) for _ in range(concurrency))))
    return total


def measure(framework: str, concurrency: int, chunks: int, rounds: int) -> dict[str, float]:
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    proc = subprocess.Popen([sys.executable, __file__, "--serve", framework, "--port", str(port)])
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
        n = asyncio.run(client(port, concurrency, chunks, rounds))
        wall, cpu = time.monotonic() - t0, cpu_seconds(proc.pid) - cpu0
    finally:
        proc.terminate()
        proc.wait(10)
    return {"framework": framework, "chunks": n, "chunks_per_s": n / wall, "server_cpu_us_per_chunk": 1e6 * cpu / n}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--chunks", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--serve", choices=["aiohttp", "starlette"], help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--out-dir", type=Path, default=Path(__file__).parent)
    args = ap.parse_args(argv)
    if args.serve == "aiohttp":
        serve_aiohttp(args.port)
        return 0
    if args.serve == "starlette":
        serve_starlette(args.port)
        return 0
    os.nice(10)  # the client yields CPU to the servers under test
    rows = [measure(fw, args.concurrency, args.chunks, args.rounds) for fw in ("aiohttp", "starlette", "aiohttp")]
    res = {"concurrency": args.concurrency, "chunks_per_stream": args.chunks, "rows": rows,
           "load_average_1m": os.getloadavg()[0]}
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "http_framework_results.json").write_text(json.dumps(res, indent=2))
    md = ["# SSE streaming: aiohttp vs starlette+uvicorn (generated by bench/worker/http_framework.py)", "",
          f"{args.concurrency} concurrent streams x {args.chunks} chunks, {args.rounds} rounds, one chunk per "
          f"stream per 5 ms tick; aiohttp measured twice (before and after) to show the noise of this shared "
          f"machine (load average {res['load_average_1m']:.1f}).", "",
          "| framework | chunks/s | server CPU us per chunk |", "|---|---|---|"]
    md += [f"| {r['framework']} | {r['chunks_per_s']:.0f} | {r['server_cpu_us_per_chunk']:.1f} |" for r in rows]
    (args.out_dir / "http_framework_results.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
