"""The lean front end's framing (router/shell/lean_http.py), without sockets."""

from __future__ import annotations

from pdserve.router.shell.lean_http import Continue, Refusal, Request, RequestReader, response_head

BODY = b'{"model": "m", "prompt": "hi"}'
HEAD = (b"POST /v1/completions?x=1 HTTP/1.1\r\nHost: r\r\nX-Request-Id: abc\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(BODY))


def test_a_request_fed_byte_by_byte_comes_out_whole() -> None:
    reader = RequestReader(max_body_bytes=1000)
    out = []
    for i in range(len(HEAD + BODY)):
        out += reader.feed((HEAD + BODY)[i:i + 1])
        assert reader.in_request == (i < len(HEAD + BODY) - 1)
    assert len(out) == 1 and isinstance(out[0], Request)
    req = out[0]
    assert (req.method, req.path, req.version, req.body, req.keep_alive) == ("POST", "/v1/completions", "1.1", BODY,
                                                                            True)
    assert req.headers["x-request-id"] == "abc" and req.headers["content-type"] == "application/json"


def test_pipelined_requests_come_out_in_order() -> None:
    reader = RequestReader(max_body_bytes=1000)
    second = HEAD.replace(b"abc", b"def").replace(b"HTTP/1.1\r\n", b"HTTP/1.1\r\nConnection: close\r\n", 1)
    out = reader.feed(HEAD + BODY + second + BODY)
    assert [r.headers["x-request-id"] for r in out if isinstance(r, Request)] == ["abc", "def"]
    assert [r.keep_alive for r in out if isinstance(r, Request)] == [True, False]


def test_an_oversized_header_is_431_naming_it() -> None:
    reader = RequestReader(max_body_bytes=1000)
    out = reader.feed(b"POST /v1/completions HTTP/1.1\r\nX-Big: " + b"y" * 20_000 + b"\r\n\r\n")
    assert len(out) == 1 and isinstance(out[0], Refusal), out
    assert out[0].status == 431 and "x-big" in out[0].message.lower() and out[0].param == "X-Big"
    assert reader.feed(b"GET / HTTP/1.1\r\n\r\n") == []  # refused: the connection is done


def test_a_header_section_fed_in_pieces_is_bounded() -> None:
    reader = RequestReader(max_body_bytes=1000, max_field_bytes=100, max_head_bytes=1000)
    out = reader.feed(b"POST / HTTP/1.1\r\n")
    for _ in range(100):
        out += reader.feed(b"X-Many: " + b"y" * 50 + b"\r\n")
    assert [type(e) for e in out] == [Refusal] and out[0].status == 431, out


def test_too_many_headers_is_431() -> None:
    reader = RequestReader(max_body_bytes=1000, max_headers=10)
    out = reader.feed(b"GET /health HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(11)) + b"\r\n")
    assert isinstance(out[0], Refusal) and out[0].status == 431


def test_a_content_length_over_the_limit_is_413_before_the_body() -> None:
    reader = RequestReader(max_body_bytes=10)
    out = reader.feed(HEAD)
    assert len(out) == 1 and isinstance(out[0], Refusal) and out[0].status == 413, out
    assert str(len(BODY)) in out[0].message


def test_a_chunked_body_over_the_limit_is_413() -> None:
    reader = RequestReader(max_body_bytes=10)
    out = reader.feed(b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n12345678\r\n")
    assert out == []
    out = reader.feed(b"8\r\n12345678\r\n0\r\n\r\n")
    assert isinstance(out[0], Refusal) and out[0].status == 413


def test_a_chunked_body_within_the_limit_is_joined() -> None:
    reader = RequestReader(max_body_bytes=100)
    out = reader.feed(b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
    assert isinstance(out[0], Request) and out[0].body == b"abcde"


def test_malformed_requests_are_400() -> None:
    for raw in (b"NOT HTTP\r\n\r\n", b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n",
                b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"):
        out = RequestReader(max_body_bytes=100).feed(raw)
        assert len(out) == 1 and isinstance(out[0], Refusal) and out[0].status == 400, (raw, out)


def test_a_body_cut_short_by_the_client_is_400_naming_the_bytes() -> None:
    reader = RequestReader(max_body_bytes=1000)
    assert reader.feed(HEAD + BODY[:10]) == []
    refusal = reader.eof()
    assert refusal is not None and refusal.status == 400
    assert f"10 of {len(BODY)} bytes" in refusal.message
    assert RequestReader(max_body_bytes=1000).eof() is None  # nothing started: nothing to refuse


def test_expect_100_continue_is_announced_before_the_body() -> None:
    reader = RequestReader(max_body_bytes=1000)
    out = reader.feed(HEAD.replace(b"Host: r\r\n", b"Host: r\r\nExpect: 100-continue\r\n"))
    assert [type(e) for e in out] == [Continue]
    out = reader.feed(BODY)
    assert isinstance(out[0], Request) and out[0].body == BODY


def test_response_heads() -> None:
    date = b"date: x\r\n"
    head = response_head("1.1", 200, {"content-type": "text/event-stream"}, date, content_length=None, keep_alive=True)
    assert head == b"HTTP/1.1 200 OK\r\ndate: x\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    head = response_head("1.0", 400, {"x-request-id": "a\r\nSet-Cookie: b"}, date, content_length=3,
                         keep_alive=False)
    assert head == (b"HTTP/1.0 400 Bad Request\r\ndate: x\r\nx-request-id: a  Set-Cookie: b\r\ncontent-length: 3\r\n"
                    b"connection: close\r\n\r\n")
