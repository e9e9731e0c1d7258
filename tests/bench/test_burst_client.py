"""The burst benchmark's load client: what it counts as the first token and as the end,
whatever way the bytes are cut (chunked framing across reads, tokens split by reads)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "router"))

import burst_client  # noqa: E402

ROLE = b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'


def token(text: str) -> bytes:
    return b'data: {"choices":[{"index":0,"delta":{"content":"%s"}}]}\n\n' % text.encode()


def chunked(events: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%b\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"


HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
EVENTS = [ROLE, token(" a"), token(" b"), token(" c"), b"data: [DONE]\n\n"]


class FakeTransport:
    def __init__(self) -> None:
        self.written = b""
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True


def feed(wire: bytes, cuts: list[int]) -> burst_client.Stream:
    loop = asyncio.new_event_loop()
    try:
        done = loop.create_future()
        s = burst_client.Stream(b"GET / HTTP/1.1\r\n\r\n", "chat", 0.0, done)
        t = FakeTransport()
        s.connection_made(t)  # type: ignore[arg-type]
        assert t.written.startswith(b"GET")
        last = 0
        for c in sorted(set(cuts)) + [len(wire)]:
            if c > last:
                s.data_received(wire[last:c])
                last = c
        if not s.finished:
            s.connection_lost(None)
        assert done.done() and t.closed
        return s
    finally:
        loop.close()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=400), max_size=30))
def test_any_cut_of_a_chunked_stream_gives_three_tokens_a_first_token_and_the_end(cuts: list[int]) -> None:
    wire = HEAD + chunked(EVENTS)
    s = feed(wire, cuts)
    assert s.result.error is None
    assert s.result.tokens == 3  # the role chunk's empty content is not a token
    assert s.result.ttft_s is not None and s.result.e2e_s is not None


@given(st.lists(st.integers(min_value=1, max_value=400), max_size=10))
def test_a_plain_body_without_chunking_also_counts(cuts: list[int]) -> None:
    wire = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + b"".join(EVENTS)
    s = feed(wire, cuts)
    assert (s.result.error, s.result.tokens) == (None, 3)


def test_no_first_token_before_content_and_no_end_without_done() -> None:
    wire = HEAD + chunked([ROLE])[:-5]  # the role chunk only, then the connection drops
    s = feed(wire, [])
    assert s.result.ttft_s is None and s.result.e2e_s is None
    assert s.result.error is not None and "before [DONE]" in s.result.error


def test_an_error_status_is_an_error_with_its_body() -> None:
    wire = b'HTTP/1.1 429 Too Many Requests\r\nContent-Length: 20\r\n\r\n{"error":"too many"}'
    s = feed(wire, [30])
    assert s.result.error is not None and s.result.error.startswith("HTTP 429") and "too many" in s.result.error
    assert s.result.tokens == 0


def test_dechunker_keeps_data_that_looks_like_framing() -> None:
    d = burst_client.Dechunker()
    payload = b"0\r\n\r\nnot the end\r\n"
    wire = b"%x\r\n%b\r\n0\r\n\r\n" % (len(payload), payload)
    assert b"".join(d.feed(wire[i:i + 1]) for i in range(len(wire))) == payload
    assert d.finished
