"""The load side of ``burst.py``: N streaming requests opened at one instant, in its own process.

    python bench/router/burst_client.py --url http://127.0.0.1:8000 --streams 128 --start-at EPOCH

Every stream opens its own TCP connection at ``--start-at`` (wall clock, so several
client processes start one burst together), sends one streaming chat (or completion)
request and reads the answer to ``data: [DONE]``. Prints one JSON object: per stream the
time to the first content token, measured from the common start instant (``ttft_s``: what
a user who arrived at that instant waits, including this client's own delay in opening
its connections) and from the stream's own connect call (``ttft_own_s``), end-to-end
time, content tokens counted, and errors.

Why not aiohttp: one asyncio ``Protocol`` per stream, with no reader task and no
per-chunk parsing beyond finding the first token, costs a fraction of a client session's
CPU; on a 2-core machine shared with the router and the worker, a heavy client would be
what is measured. The same client drives every target, so its own cost cancels in the
ratios. Stdlib only (plus uvloop when installed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

# A content token: a delta/choice whose text is not empty (vLLM's first chat chunk
# carries the role with "content":"", which is not a token).
TOKEN = {"chat": re.compile(rb'"content": ?"(?!")'), "completion": re.compile(rb'"text": ?"(?!")')}
DONE = b"data: [DONE]"


@dataclass
class Result:
    ttft_s: float | None = None
    ttft_own_s: float | None = None
    e2e_s: float | None = None
    gap_max_s: float | None = None  # longest wait between two reads after the first token (worst ITL)
    tokens: int = 0
    error: str | None = None


class Dechunker:
    """Incremental HTTP/1.1 chunked transfer decoding (the body may be cut anywhere)."""

    def __init__(self) -> None:
        self.pending = b""
        self.left = 0  # bytes of the current chunk's data still to come (+2 for its CRLF)
        self.finished = False

    def feed(self, data: bytes) -> bytes:
        out = []
        buf = self.pending + data
        self.pending = b""
        i = 0
        while i < len(buf) and not self.finished:
            if self.left:
                take = min(self.left, len(buf) - i)
                out.append(buf[i:i + take])
                self.left -= take
                i += take
                continue
            if buf.startswith(b"\r\n", i):
                i += 2
                continue
            end = buf.find(b"\r\n", i)
            if end < 0:
                self.pending = buf[i:]
                break
            size = int(buf[i:end].split(b";", 1)[0], 16)
            i = end + 2
            if size == 0:
                self.finished = True
            self.left = size
        return b"".join(out)


class Stream(asyncio.Protocol):
    def __init__(self, request: bytes, kind: str, base: float, done: asyncio.Future[None]) -> None:
        self.request = request
        self.token = TOKEN[kind]
        self.base = base
        self.started = time.perf_counter()
        self.done = done
        self.result = Result()
        self.head = b""
        self.headers_done = False
        self.chunked = False
        self.dechunk = Dechunker()
        self.body: list[bytes] = []
        self.tail = b""  # the last bytes of the body, where a token or [DONE] may be cut in two
        self.transport: asyncio.Transport | None = None
        self.finished = False
        self.last_read = 0.0  # perf_counter() of the last body read once the first token came

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not an asyncio.Transport
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        if not self.headers_done:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return
            head, data = self.head[:end], self.head[end + 4:]
            self.headers_done = True
            status = head.split(b" ", 2)[1] if head.startswith(b"HTTP/") else b"?"
            self.chunked = b"transfer-encoding: chunked" in head.lower()
            if status != b"200":
                self.finish(f"HTTP {status.decode(errors='replace')}: {data[:300].decode(errors='replace')}")
                return
        if self.chunked:
            data = self.dechunk.feed(data)
        if not data:
            return
        self.body.append(data)
        window = self.tail + data
        if self.last_read:
            gap = now - self.last_read
            if self.result.gap_max_s is None or gap > self.result.gap_max_s:
                self.result.gap_max_s = gap
            self.last_read = now
        elif self.result.ttft_s is None and self.token.search(window):
            self.result.ttft_s = now - self.base
            self.result.ttft_own_s = now - self.started
            self.last_read = now
        if DONE in window:
            self.result.e2e_s = now - self.base
            self.finish(None)
            return
        self.tail = window[-48:]

    def finish(self, error: str | None) -> None:
        if self.finished:  # (wait_for cancels ``done`` on a timeout: a flag, not done.done())
            return
        self.finished = True
        self.result.error = error
        self.result.tokens = len(self.token.findall(b"".join(self.body)))
        if not self.done.done():
            self.done.set_result(None)
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.finish(f"connection closed before [DONE]: {exc!r}")


def request_body(kind: str, model: str, prompt: str, max_tokens: int) -> bytes:
    """One stream's JSON body (``tokenize_cost.py`` times the router's front door on the same bytes)."""
    body: dict = {"model": model, "max_tokens": max_tokens, "ignore_eos": True, "stream": True}
    if kind == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return json.dumps(body).encode()


def build_request(url: str, kind: str, model: str, prompt: str, max_tokens: int) -> tuple[str, int, bytes]:
    u = urlsplit(url)
    path = "/v1/chat/completions" if kind == "chat" else "/v1/completions"
    raw = request_body(kind, model, prompt, max_tokens)
    head = (f"POST {path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\nContent-Type: application/json\r\n"
            f"Accept: text/event-stream\r\nContent-Length: {len(raw)}\r\n\r\n").encode()
    return u.hostname or "127.0.0.1", u.port or 80, head + raw


async def burst(url: str, kind: str, model: str, prompts: list[str], max_tokens: int, start_at: float,
                timeout_s: float) -> list[Result]:
    loop = asyncio.get_running_loop()
    reqs = [build_request(url, kind, model, p, max_tokens) for p in prompts]
    delay = start_at - time.time()
    if delay > 0:
        await asyncio.sleep(delay)
    base = time.perf_counter() - max(0.0, time.time() - start_at)  # perf_counter() at start_at

    async def one(host: str, port: int, req: bytes) -> Result:
        done: asyncio.Future[None] = loop.create_future()
        proto = Stream(req, kind, base, done)
        try:
            await loop.create_connection(lambda: proto, host, port)
            await asyncio.wait_for(done, timeout_s)
        except (TimeoutError, OSError) as e:
            proto.finish(f"{type(e).__name__}: {e}")
        return proto.result

    return await asyncio.gather(*(one(*r) for r in reqs))


def prompts_for(n: int, offset: int, words: int) -> list[str]:
    """Distinct prompts (the stream's number first, so no two share a cached prefix beyond
    the chat template) of about ``words`` words."""
    filler = " ".join(f"word{i % 97}" for i in range(max(0, words - 4)))
    return [f"request {offset + i}: please summarise {filler}" for i in range(n)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--streams", type=int, required=True)
    ap.add_argument("--offset", type=int, default=0, help="numbering of this process's prompts")
    ap.add_argument("--start-at", type=float, required=True, help="wall-clock time (time.time()) to open them all")
    ap.add_argument("--kind", choices=["chat", "completion"], default="chat")
    ap.add_argument("--model", default="mock-llama")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--prompt-words", type=int, default=64)
    ap.add_argument("--timeout", type=float, default=120.0, help="per stream, seconds")
    ap.add_argument("--out", type=Path, default=None, help="write the JSON here instead of stdout")
    args = ap.parse_args()
    try:
        from uvloop import run
    except ImportError:
        run = asyncio.run  # type: ignore[assignment]
    results = run(burst(args.url, args.kind, args.model, prompts_for(args.streams, args.offset,
                                                                             args.prompt_words),
                                args.max_tokens, args.start_at, args.timeout))
    doc = json.dumps({"ttft_s": [r.ttft_s for r in results], "ttft_own_s": [r.ttft_own_s for r in results],
                      "e2e_s": [r.e2e_s for r in results], "gap_max_s": [r.gap_max_s for r in results],
                      "tokens": [r.tokens for r in results],
                      "errors": [r.error for r in results if r.error]})
    if args.out:
        args.out.write_text(doc + "\n")
    else:
        sys.stdout.write(doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
