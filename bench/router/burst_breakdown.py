"""Where pdserve's router CPU goes per request under a burst, by thread CPU time.

    flock /tmp/pdserve-bench.lock .venv/bin/python bench/router/burst_breakdown.py --streams 256 --bursts 6 \\
        --out bench/router/results/burst_breakdown9.json

``--http-server`` picks the front end whose sections are timed (lean, the router's default, or aiohttp).

py-spy's samples mislead on a 2-core box (a client write wakes the load client, which takes
the core while the router waits runnable in the write: those samples land on the write; see
README section 6). Here the router runs with its synchronous sections wrapped: each wrapper
adds the thread CPU time (``time.thread_time_ns``) spent inside the section (for coroutines,
inside each of their steps, not while suspended) and counts calls. The router's whole CPU
(utime + stime from /proc) over the measured bursts is the total; what no section holds is
the event loop's own C code (epoll, accept, the reads' recv, task switching). Top-level
sections are disjoint (each is entered from an event-loop callback); nested ones are part
of their parent. Same setup as ``burst.py`` (one mock worker, the local BPE tokenizer,
chat requests, new prompts every burst); the first burst is a warm-up, not counted (the
router snapshots its sums on SIGUSR1 after it; the scrape loop's own CPU over the bursts
counts in the total, outside the sections).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

HERE = Path(__file__).resolve().parent
OUT_ENV = "PDSERVE_BREAKDOWN_OUT"
# (label, parent label or None, module, attribute path, is a coroutine function)
# The front end's own sections, per --http-server; the handler's parent is the section that runs it.
FRONT_SECTIONS = {
    "aiohttp": (
        ("aiohttp: request handling, pdserve's handler inside", None, "aiohttp.web_protocol",
         "RequestHandler._handle_request", True),
        ("aiohttp: request bytes received and parsed", None, "aiohttp.web_protocol", "RequestHandler.data_received",
         False),
        ("aiohttp: connection accepted", None, "aiohttp.web_protocol", "RequestHandler.connection_made", False),
        ("aiohttp: connection closed", None, "aiohttp.web_protocol", "RequestHandler.connection_lost", False),
    ),
    "lean": (
        ("lean: request task, pdserve's handler inside", None, "pdserve.router.shell.lean_server",
         "Connection._serve", True),
        ("lean: request bytes received and parsed", None, "pdserve.router.shell.lean_server",
         "Connection.data_received", False),
        ("lean: connection accepted", None, "pdserve.router.shell.lean_server", "Connection.connection_made", False),
        ("lean: client's end of stream", None, "pdserve.router.shell.lean_server", "Connection.eof_received", False),
        ("lean: connection closed", None, "pdserve.router.shell.lean_server", "Connection.connection_lost", False),
    ),
}
READ_BODY = {"aiohttp": ("pdserve.router.shell.front_aiohttp", "AiohttpExchange.read_body"),
             "lean": ("pdserve.router.shell.lean_server", "LeanExchange.read_body")}


def sections(server: str) -> tuple[tuple[str, str | None, str, str, bool], ...]:
    front = FRONT_SECTIONS[server]
    task = front[0][0]
    body_module, body_path = READ_BODY[server]
    return (*front,
            ("relay: an upstream read parsed and written to the client", None, "pdserve.router.shell.http1",
             "_Conn.data_received", False),
            ("handler: all of it", task, "pdserve.router.shell.handler", "CompletionHandler.__call__", True),
            ("handler: read the body", "handler: all of it", body_module, body_path, True),
            ("handler: JSON, validation, chat template, encode, block keys", "handler: all of it",
             "pdserve.router.shell.handler", "CompletionHandler._prepare", False),
            ("chat template render + encode", "handler: JSON, validation, chat template, encode, block keys",
             "pdserve.tokenization.base", "ModelTokenizer.chat_ids", False),
            ("block keys", "handler: JSON, validation, chat template, encode, block keys",
             "pdserve.router.core.kv_index", "KvIndex.request_keys", False),
            ("route: pool views + scheduler", "handler: all of it", "pdserve.router.core.scheduler", "Scheduler.plan",
             False),
            ("upstream: send the request", "handler: all of it", "pdserve.router.shell.http1_pool", "Http1Pool.post",
             True),
            ("relay: response head, stream setup and end", "handler: all of it", "pdserve.router.shell.relay",
             "relay_stream", True))


class _Yield:
    """Passes a coroutine's yielded future up to the task unchanged (a transparent await)."""

    __slots__ = ("f",)

    def __init__(self, f: Any) -> None:
        self.f = f

    def __await__(self):  # type: ignore[no-untyped-def]
        return (yield self.f)


def _install(acc: dict[str, list[int]], server: str) -> None:
    import importlib

    tt = time.thread_time_ns
    for label, _parent, module, path, is_async in sections(server):
        owner: Any = importlib.import_module(module)
        *outer, name = path.split(".")
        for part in outer:
            owner = getattr(owner, part)
        f = getattr(owner, name)
        slot = acc.setdefault(label, [0, 0])

        def make(f: Callable[..., Any], slot: list[int], is_async: bool) -> Callable[..., Any]:
            if not is_async:
                @functools.wraps(f)
                def sync(*a: Any, **k: Any) -> Any:
                    t = tt()
                    try:
                        return f(*a, **k)
                    finally:
                        slot[0] += tt() - t
                        slot[1] += 1
                return sync

            @functools.wraps(f)
            async def steps(*a: Any, **k: Any) -> Any:
                coro = f(*a, **k)
                slot[1] += 1
                value: Any = None
                exc: BaseException | None = None
                while True:
                    t = tt()
                    try:
                        fut = coro.throw(exc) if exc is not None else coro.send(value)
                    except StopIteration as e:
                        return e.value
                    finally:
                        slot[0] += tt() - t
                    try:
                        value, exc = await _Yield(fut), None
                    except BaseException as e:  # noqa: BLE001 - handed back to the coroutine
                        value, exc = None, e
            return steps

        wrapped = make(f, slot, is_async)
        setattr(owner, name, wrapped)
        # Names imported elsewhere with ``from module import name`` are rebound too.
        for mod_name in ("pdserve.router.shell.handler", "pdserve.router.shell.relay"):
            mod = sys.modules.get(mod_name)
            if mod is not None and getattr(mod, name, None) is f:
                setattr(mod, name, wrapped)


def router_main(argv: list[str]) -> int:
    """The router with its sections timed; writes the sums to $PDSERVE_BREAKDOWN_OUT on exit."""
    import atexit

    acc: dict[str, list[int]] = {}
    _install(acc, argv[argv.index("--http-server") + 1] if "--http-server" in argv else "aiohttp")
    out = Path(os.environ[OUT_ENV])
    atexit.register(lambda: out.write_text(json.dumps(acc)))
    # SIGUSR1: a snapshot (the sums after the warm-up burst, subtracted from the final ones).
    signal.signal(signal.SIGUSR1, lambda *_: out.with_suffix(".warm").write_text(json.dumps(acc)))
    from pdserve.router.shell import cli

    return cli.main(argv)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--as-router":
        return router_main(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--bursts", type=int, default=6, help="bursts, the first a warm-up")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--prompt-words", type=int, default=64)
    ap.add_argument("--client-procs", type=int, default=2)
    ap.add_argument("--http-server", choices=sorted(FRONT_SECTIONS), default="lean",
                    help="the router's --http-server whose sections are timed")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    from burst_measure import MODEL, burst_once, cpu_split
    from procs import free_port, start_proc
    from resultmeta import Run, write_result

    from pdserve.tokenization.testing import build_bpe_tokenizer
    from pdserve.worker.testing import start_worker

    run = Run(runs=args.bursts - 1)
    bargs = argparse.Namespace(lead_s=1.0, max_tokens=args.max_tokens, prompt_words=args.prompt_words,
                               timeout=120.0)
    with ExitStack() as stack:
        tok = build_bpe_tokenizer(stack.enter_context(tempfile.TemporaryDirectory(prefix="breakdown-tok-")))
        sums = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="breakdown-"))) / "sections.json"
        w = stack.enter_context(start_worker(MODEL, speedup=1e9, tokenizer=str(tok),
                                             args=["--max-num-seqs", "4096", "--max-num-batched-tokens", "1048576"]))
        port = free_port()
        proc = start_proc(stack, [sys.executable, __file__, "--as-router", "--decode", w.url, "--tokenizer", str(tok),
                                  "--log-level", "WARNING", "--processes", "1", "--http-server", args.http_server,
                                  "--port", str(port)],
                          f"http://127.0.0.1:{port}/health", env={**os.environ, OUT_ENV: str(sums)})
        url = f"http://127.0.0.1:{port}"
        procs = max(1, min(args.client_procs, args.streams))
        burst_once(url, args.streams, procs, bargs, proc.pid, None)  # warm-up
        proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 30
        while not sums.with_suffix(".warm").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)  # written whole
        warm: dict[str, list[int]] = json.loads(sums.with_suffix(".warm").read_text())
        u0, k0 = cpu_split(proc.pid)
        bursts = [burst_once(url, args.streams, procs, bargs, proc.pid, None) for _ in range(args.bursts - 1)]
        u1, k1 = cpu_split(proc.pid)
        proc.send_signal(signal.SIGINT)  # a clean stop, so the sums are written
        proc.wait(30)
        acc: dict[str, list[int]] = json.loads(sums.read_text())
    measured = args.streams * (args.bursts - 1)
    total_us = ((u1 - u0) + (k1 - k0)) * 1e6 / measured
    rows = []
    for label, parent, *_ in sections(args.http_server):
        ns, calls = (a - b for a, b in zip(acc.get(label, [0, 0]), warm.get(label, [0, 0])))
        rows.append({"section": label, "parent": parent, "us_per_request": round(ns / 1e3 / measured, 1),
                     "calls_per_request": round(calls / measured, 2)})
    top = sum(r["us_per_request"] for r in rows if r["parent"] is None)
    doc = {"bench": "router_burst_breakdown", "streams": args.streams, "max_tokens": args.max_tokens,
           "http_server": args.http_server,
           "router_cpu_us_per_request": round(total_us, 1), "router_kernel_share": round((k1 - k0) / max((u1 - u0) + (k1 - k0), 1e-9), 3),
           "outside_sections_us_per_request": round(total_us - top, 1), "sections": rows,
           "bursts": bursts}
    print(json.dumps({k: v for k, v in doc.items() if k != "bursts"}, indent=1))
    write_result(args.out, doc, run)
    args.out.with_suffix(".md").write_text(markdown(json.loads(args.out.read_text())))
    return 0


def markdown(doc: dict) -> str:
    m = doc["meta"]
    lines = ["# Router CPU per request under a burst, by section (thread CPU time)\n",
             f"Command: `{m['command']}`  ",
             f"Commit {m['commit'][:10]}{' (dirty)' if m['dirty'] else ''}, {m['date']}, load average (1 min) "
             f"{m['loadavg_before']['1m']} before, {m['loadavg_after']['1m']} after; --http-server "
             f"{doc.get('http_server', 'aiohttp')}; {doc['streams']} simultaneous "
             f"streaming chats, {doc['max_tokens']} tokens each, {m['runs']} measured bursts\n",
             f"Router CPU per request (utime + stime over the measured bursts): "
             f"**{doc['router_cpu_us_per_request']} µs**, kernel share {doc['router_kernel_share']}; outside every "
             f"section (event loop C code, recv, accept): {doc['outside_sections_us_per_request']} µs\n",
             "| section | µs per request | calls per request |", "|---|---:|---:|"]
    depth: dict[str | None, int] = {None: -1}
    for r in doc["sections"]:
        depth[r["section"]] = depth.get(r["parent"], -1) + 1
        lines.append(f"| {'&nbsp;&nbsp;' * 2 * depth[r['section']]}{r['section']} | {r['us_per_request']} "
                     f"| {r['calls_per_request']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
