"""The body guard skips its walk over the decoded JSON when the raw bytes already rule
out lone surrogates and deep nesting (``_cannot_offend``): every body must get the same
answer (value, or the same 400 message) as with the walk always run."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdserve.router.core import body_guard
from pdserve.router.core.body_guard import MAX_DEPTH, load_json_body
from pdserve.router.core.errors import RequestError

texts = st.text(max_size=12) | st.sampled_from(["\ud800", "a\udfffb", "\ud83d\ude42", "é", "日本", "\x00"])
values = st.recursive(st.none() | st.booleans() | st.integers() | texts,
                      lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
                      max_leaves=12)


def nested(depth: int, inner: object) -> object:
    for _ in range(depth):
        inner = [inner]
    return inner


def encodings(value: object) -> list[bytes]:
    out = [json.dumps(value).encode(),  # \\uXXXX escapes
           json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")]  # raw (encoded) surrogates
    try:
        out.append(json.dumps(value, ensure_ascii=False).encode("utf-16"))
    except UnicodeEncodeError:
        pass
    return out


def outcome(raw: bytes) -> tuple[str, object]:
    try:
        return "ok", load_json_body(raw)
    except RequestError as e:
        return "400", e.message


@settings(max_examples=600, deadline=None)
@given(values, st.sampled_from([0, 1, MAX_DEPTH - 2, MAX_DEPTH, MAX_DEPTH + 1]))
def test_skipping_the_walk_never_changes_the_answer(value: object, depth: int) -> None:
    for raw in encodings(nested(depth, value)):
        fast = outcome(raw)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(body_guard, "_cannot_offend", lambda raw, max_depth: False)
            assert fast == outcome(raw), raw[:200]


def test_plain_bodies_skip_the_walk_and_offending_ones_do_not() -> None:
    chat = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi é 日本"}]}, ensure_ascii=False)
    assert body_guard._cannot_offend(chat.encode(), MAX_DEPTH)
    for raw in (b'{"prompt": "hi \\ud800"}', b'{"prompt": "hi \\uDC00"}', '{"prompt": "\ud800"}'.encode(
            "utf-8", "surrogatepass"), b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1),
            json.dumps({"prompt": "x"}).encode("utf-16-le")):
        assert not body_guard._cannot_offend(raw, MAX_DEPTH), raw[:40]
