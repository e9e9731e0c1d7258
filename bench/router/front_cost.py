"""What aiohttp's web server costs per streamed request, against a bare asyncio.Protocol server.

    flock /tmp/pdserve-bench.lock .venv/bin/python bench/router/front_cost.py --streams 256 --bursts 3 --reps 3 \\
        --out bench/router/results/front_cost.json

Sizes the lever that README section 6 names but nobody has built: taking aiohttp's server off
the router's hot path. Two servers answer the burst benchmark's chat requests
(``burst_client.py``, one new connection per stream) with the same streamed body and nothing
else: no upstream, no tokenizer, no routing. Both run on uvloop with the router's GC settings
(``router/shell/cli.py``: freeze after start-up, first threshold 50,000), read and JSON-decode
the body, and stream 32 content events and [DONE] as chunked SSE, one transport write per event
``--gap-ms`` apart (the head with the first event, the terminating chunk with [DONE], as the
router's relay writes them). What differs is only what carries a request to that code:

- ``aiohttp``: ``web.Application`` with one route and a ``StreamResponse`` whose held head is
  taken and written with the first event (the router's relay does the same);
- ``bare``: an ``asyncio.Protocol`` that finds the head's end, reads Content-Length and starts
  the stream as a task. It parses only what this request needs (no header validation, no
  keep-alive, no chunked request bodies), so its cost is a floor: a real front end must add
  those, and the difference is an upper bound of what one would save;
- ``lean``: the router's own lean front end (``router/shell/lean_server.py``, ``--http-server
  lean``): its ``Connection`` protocol and httptools framing, with a stand-in for the router
  behind it that opens the stream (``LeanExchange.open_stream``, head held) and writes the
  events as the others do.

Per burst: the server's CPU (utime + stime from /proc) per request. ``--reps`` alternates the
two servers (a fresh process each), after one unmeasured warm-up burst each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

EVENTS = [b"data: " + json.dumps({"id": "x", "object": "chat.completion.chunk", "choices": [
    {"index": 0, "delta": {"content": f" t{i}"}, "finish_reason": None}]}).encode() + b"\n\n" for i in range(32)]
EVENTS.append(b"data: [DONE]\n\n")
FRAMED = [b"%x\r\n%b\r\n" % (len(e), e) for e in EVENTS]
HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n")


async def stream_to(transport: asyncio.Transport, head: bytes, gap_s: float) -> None:
    transport.write(head + FRAMED[0])
    for chunk in FRAMED[1:-1]:
        await asyncio.sleep(gap_s)
        if transport.is_closing():
            return
        transport.write(chunk)
    await asyncio.sleep(gap_s)
    transport.write(FRAMED[-1] + b"0\r\n\r\n")


def serve_aiohttp(port: int, gap_s: float) -> None:
    import uvloop
    from aiohttp import web

    async def chat(request: web.Request) -> web.StreamResponse:
        json.loads(await request.read())
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        resp.enable_chunked_encoding()
        resp._send_headers_immediately = False  # as router/shell/relay.py: the head goes with the first event
        writer = await resp.prepare(request)
        head = bytes(writer._headers_buf)  # type: ignore[union-attr]
        writer._headers_buf, writer._headers_written = None, True  # type: ignore[union-attr]
        assert request.transport is not None
        await stream_to(request.transport, head, gap_s)
        writer._eof = True  # type: ignore[union-attr]  # the terminating chunk went with [DONE]
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=lambda *_: None, backlog=4096,
                loop=uvloop.new_event_loop())


class _Bare(asyncio.Protocol):
    def __init__(self, gap_s: float) -> None:
        self.gap_s = gap_s
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        length = 0
        for line in self.buf[:end].split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if len(self.buf) < end + 4 + length:
            return
        json.loads(self.buf[end + 4 : end + 4 + length])
        self.buf = self.buf[end + 4 + length :]
        assert self.transport is not None
        asyncio.get_running_loop().create_task(stream_to(self.transport, HEAD, self.gap_s))


def serve_bare(port: int, gap_s: float) -> None:
    import uvloop

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(lambda: _Bare(gap_s), "127.0.0.1", port, backlog=4096)
        async with server:
            await server.serve_forever()

    uvloop.run(main())


class _LeanStandIn:
    """What lean_server.Connection needs of its server, with the router replaced by the stream."""

    def __init__(self, gap_s: float) -> None:
        from types import SimpleNamespace

        from pdserve.router.shell.lean_http import DateHeader

        self.gap_s = gap_s
        self.state = SimpleNamespace(cfg=SimpleNamespace(max_body_bytes=16 * 1024 * 1024))
        self.connections: set = set()
        self.closing = False
        self.date = DateHeader()

    def started(self) -> None:
        pass

    def finished(self) -> None:
        pass

    async def dispatch(self, req, conn):  # type: ignore[no-untyped-def]
        from pdserve.router.shell.lean_server import LeanExchange

        ex = LeanExchange(req, conn)
        json.loads(await ex.read_body(1 << 24))
        stream = await ex.open_stream({"Content-Type": "text/event-stream", "Cache-Control": "no-cache"},
                                      hold_head=True)
        await stream_to(conn.transport, stream.take_head(), self.gap_s)
        stream.mark_ended()  # the terminating chunk went with [DONE]
        return stream


def serve_lean(port: int, gap_s: float) -> None:
    import uvloop

    from pdserve.router.shell.lean_server import Connection

    async def main() -> None:
        server = _LeanStandIn(gap_s)
        listener = await asyncio.get_running_loop().create_server(
            lambda: Connection(server), "127.0.0.1", port, backlog=4096)  # type: ignore[arg-type]
        async with listener:
            await listener.serve_forever()

    uvloop.run(main())


SERVERS = {"aiohttp": serve_aiohttp, "bare": serve_bare, "lean": serve_lean}


def _start(kind: str, gap_ms: float) -> tuple[subprocess.Popen, str]:
    from procs import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, __file__, "--as-server", kind, str(port), str(gap_ms)])
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError(f"{kind} server did not start") from None
            time.sleep(0.1)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--as-server":
        import gc

        gc.collect()
        gc.freeze()
        gc.set_threshold(50_000, 20, 100)  # the router's (router/shell/cli.py)
        kind, port, gap_ms = sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
        SERVERS[kind](port, gap_ms / 1000)
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--bursts", type=int, default=3, help="measured bursts per server and repetition")
    ap.add_argument("--reps", type=int, default=3, help="repetitions, the two servers alternating")
    ap.add_argument("--gap-ms", type=float, default=10.0, help="time between a stream's events")
    ap.add_argument("--client-procs", type=int, default=2)
    ap.add_argument("--servers", nargs="+", choices=list(SERVERS), default=list(SERVERS))
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    from burst_measure import burst_once
    from resultmeta import Run, write_result

    run = Run(runs=args.reps)
    bargs = argparse.Namespace(lead_s=1.0, max_tokens=32, prompt_words=64, timeout=60.0)
    procs = max(1, min(args.client_procs, args.streams))
    reps: dict[str, list[dict]] = {kind: [] for kind in args.servers}
    for _ in range(args.reps):
        for kind in reps:
            proc, url = _start(kind, args.gap_ms)
            try:
                burst_once(url, args.streams, procs, bargs, proc.pid, None)  # warm-up
                bursts = [burst_once(url, args.streams, procs, bargs, proc.pid, None) for _ in range(args.bursts)]
            finally:
                proc.terminate()
                proc.wait(30)
            n = args.streams * len(bursts)
            cpu = sum(b["router_cpu_s"] for b in bursts)
            kernel = sum(b["router_cpu_s"] * (b["router_kernel_share"] or 0.0) for b in bursts)
            reps[kind].append({"cpu_us_per_request": round(cpu * 1e6 / n, 1),
                               "user_us_per_request": round((cpu - kernel) * 1e6 / n, 1),
                               "kernel_us_per_request": round(kernel * 1e6 / n, 1),
                               "errors": sum(b["errors"] for b in bursts), "tokens": sum(b["tokens"] for b in bursts)})
            print(kind, reps[kind][-1], flush=True)
    summary = {kind: {k: median(r[k] for r in rs) for k in ("cpu_us_per_request", "user_us_per_request",
                                                              "kernel_us_per_request")} for kind, rs in reps.items()}
    for a, b in (("aiohttp", "bare"), ("lean", "bare"), ("aiohttp", "lean")):
        if a in reps and b in reps:  # per repetition (same moment of the run), then the median
            summary[f"{a}_minus_{b}_us_per_request"] = round(
                median(x["cpu_us_per_request"] - y["cpu_us_per_request"] for x, y in zip(reps[a], reps[b])), 1)
    doc = {"bench": "router_front_cost", "streams": args.streams, "bursts": args.bursts, "gap_ms": args.gap_ms,
           "summary": summary, "reps": reps}
    print(json.dumps(summary, indent=1))
    write_result(args.out, doc, run)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
