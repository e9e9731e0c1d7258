import json
from hypothesis import given, settings
from hypothesis import strategies as st

from pdserve.router.shell import sse


def chunk(kind: str, text: str, finish: str | None = None) -> bytes:
    if kind == "chat":
        c = {"index": 0, "delta": {"content": text}, "finish_reason": finish}
    else:
        c = {"index": 0, "text": text, "finish_reason": finish}
    return sse.frame({"id": "cmpl-1", "model": "m", "created": 5, "choices": [c]})


def test_tracker_reassembles_text_across_arbitrary_splits() -> None:
    stream = chunk("chat", "Hello") + chunk("chat", " world") + chunk("chat", "", "stop") + sse.DONE
    for cut in range(1, len(stream)):
        t = sse.StreamTracker("chat")
        n = t.feed(stream[:cut]) + t.feed(stream[cut:])
        assert n == 2
        assert t.text_of(0) == "Hello world" and t.finished == {0: "stop"} and t.done
        assert t.stream_id == "cmpl-1" and t.model == "m"


def test_tracker_sees_usage_errors_and_ignores_garbage() -> None:
    t = sse.StreamTracker("completions", collect=True)
    t.feed(b": keep-alive\n\ndata: not json\n\n" + chunk("completions", "a"))
    assert t.drain() == [(0, "a", None)] and t.drain() == []
    t.feed(sse.frame({"id": "x", "choices": [], "usage": {"completion_tokens": 3}}))
    assert t.usage == {"completion_tokens": 3}
    t.feed(sse.error_event("boom"))
    assert t.error and t.error["message"] == "boom"
    assert not t.complete


def test_reframe_produces_the_clients_format() -> None:
    t = sse.StreamTracker("chat")
    t.feed(chunk("chat", "x"))
    obj = json.loads(sse.reframe("chat", "more", None, t, "m")[6:])
    assert obj["object"] == "chat.completion.chunk" and obj["choices"][0]["delta"] == {"content": "more"}
    assert obj["id"] == "cmpl-1" and obj["created"] == 5
    obj = json.loads(sse.reframe("completions", "more", "length", t, "m")[6:])
    assert obj["choices"][0]["text"] == "more" and obj["choices"][0]["finish_reason"] == "length"
    err = json.loads(sse.error_event("bad", code=503)[6:])
    assert err["error"]["code"] == 503 and err["error"]["type"] == "ServiceUnavailableError"


def test_passthrough_tracker_agrees_with_the_full_parser() -> None:
    for kind in ("completions", "chat"):
        role = sse.frame({"id": "c", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        stream = (role if kind == "chat" else b"") + chunk(kind, "Hello") + b": ping\n\n" + chunk(kind, " there") + \
            chunk(kind, "", "length") + sse.frame({"id": "c", "choices": [], "usage": {"x": 1}}) + sse.DONE
        for cut in (1, 7, len(stream) // 2, len(stream) - 1):
            t = sse.PassThroughTracker(kind)
            n = t.feed(stream[:cut]) + t.feed(stream[cut:])
            assert n == 2 and t.done and t.finished
            full = t.parsed()
            assert full.text_of(0) == "Hello there" and full.stream_id in ("c", "cmpl-1")
    t = sse.PassThroughTracker("completions", keep=False)
    t.feed(chunk("completions", "x"))
    assert t.chunks == 1 and t.parsed().text_of(0) == ""


def test_passthrough_tracker_counts_markers_cut_anywhere_and_reads_done_from_the_end() -> None:
    for kind in ("completions", "chat"):
        role = sse.frame({"id": "c", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        # Token texts that look like framing must not fool the byte scans.
        body = (role if kind == "chat" else b"") + chunk(kind, "data: [DONE]") + chunk(kind, "") + \
            chunk(kind, '"text":"') + chunk(kind, "x", "stop")
        for size in (1, 2, 3, 5, 8, 13, 64):
            for stream, done in ((body + sse.DONE, True), (body, False)):
                t = sse.PassThroughTracker(kind)
                n = sum(t.feed(stream[i : i + size]) for i in range(0, len(stream), size))
                assert (n, t.done, t.finished) == (3, done, True), (kind, size, done)
                assert t.parsed().text_of(0) == 'data: [DONE]"text":"x'
    t = sse.PassThroughTracker("completions")
    assert not t.done and t.feed(sse.DONE) == 0 and t.done


def test_tracker_keeps_generated_token_ids_only_when_every_chunk_has_them() -> None:
    # vLLM streams ``token_ids`` per choice with return_token_ids: migration resumes with them.
    def with_ids(kind: str, text: str, ids: list[int]) -> bytes:
        obj = json.loads(chunk(kind, text)[6:])
        obj["choices"][0]["token_ids"] = ids
        return sse.frame(obj)

    for kind in ("completions", "chat"):
        t = sse.StreamTracker(kind)
        t.feed(with_ids(kind, "Hel", [7, 8]) + with_ids(kind, "lo", [9]) + with_ids(kind, "", [10]))
        assert t.ids_of(0) == [7, 8, 9, 10] and t.text_of(0) == "Hello"
        t.feed(chunk(kind, " world"))  # one chunk without ids: the ids are no longer complete
        assert t.ids_of(0) is None
    assert sse.StreamTracker("completions").ids_of(0) == []


_TEXTS = ["", "x", "data: [DONE]", '"text":"', '"content":"', '"finish_reason":"', "\n\n", "é", "tok"]


@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from(["completions", "chat"]),
       texts=st.lists(st.sampled_from(_TEXTS), min_size=0, max_size=8),
       finish=st.booleans(), done=st.booleans(), pings=st.booleans(),
       cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=12))
def test_passthrough_tracker_is_independent_of_how_reads_cut_the_stream(kind: str, texts: list[str], finish: bool,
                                                                        done: bool, pings: bool,
                                                                        cuts: list[int]) -> None:
    # Whole-event reads take the scan-the-read-alone path, reads cut mid-event the tail path:
    # any mix of the two counts what one read of the whole stream counts.
    body = b"".join((b": ping\n\n" if pings else b"") + chunk(kind, t) for t in texts)
    stream = body + (chunk(kind, "", "stop") if finish else b"") + (sse.DONE if done else b"")
    one = sse.PassThroughTracker(kind)
    expect = one.feed(stream) if stream else 0
    assert expect == sum(1 for t in texts if t)
    bounds = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    t = sse.PassThroughTracker(kind)
    n = sum(t.feed(stream[a:b]) for a, b in zip(bounds, bounds[1:]) if b > a)
    assert (n, t.done, t.finished) == (expect, one.done, one.finished) == (expect, done, finish)
