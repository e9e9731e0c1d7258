import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdserve.common import tokenizer
from pdserve.router.requests import RequestError, parse_request, prompt_block_hashes


def test_completion_prompt_forms() -> None:
    assert parse_request(b'{"model":"m","prompt":"hello world"}', "completions").prompt_ids == tokenizer.encode(
        "hello world")
    assert parse_request(b'{"prompt":[5,6,7]}', "completions").prompt_ids == [5, 6, 7]
    assert parse_request(b'{"prompt":["a b","c"]}', "completions").prompt_ids == tokenizer.encode("a b")
    p = parse_request(b'{"prompt":"x","stream":true,"stream_options":{"include_usage":true},"foo":1}', "completions")
    assert p.stream and p.include_usage and p.body["foo"] == 1


def test_chat_uses_the_shared_template() -> None:
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    p = parse_request(json.dumps({"model": "m", "messages": msgs}).encode(), "chat")
    assert p.prompt_ids == tokenizer.encode(tokenizer.apply_chat_template(msgs))


@pytest.mark.parametrize(
    ("raw", "kind", "fragment", "param"),
    [
        (b"{", "completions", "not valid JSON", None),
        (b"[1]", "completions", "must be a JSON object", None),
        (b'{"model":"m"}', "completions", "prompt", "prompt"),
        (b'{"prompt":"x","max_tokens":"7"}', "completions", "max_tokens", "max_tokens"),
        (b'{"prompt":"x","max_tokens":-1}', "completions", "max_tokens", "max_tokens"),
        (b'{"prompt":"x","stream":"yes"}', "completions", "stream", "stream"),
        (b'{"prompt":[]}', "completions", "must not be empty", "prompt"),
        (b'{"messages":[]}', "chat", "messages", "messages"),
        (b'{"messages":[{"content":"x"}]}', "chat", "role", "messages"),
        (b'{"prompt":"x","n":0}', "completions", "n", "n"),
    ],
)
def test_bad_requests_name_the_problem(raw: bytes, kind: str, fragment: str, param: str | None) -> None:
    with pytest.raises(RequestError) as e:
        parse_request(raw, kind)  # type: ignore[arg-type]
    assert e.value.status == 400 and fragment in e.value.message
    assert e.value.param == param
    assert e.value.body()["error"]["type"] == "BadRequestError"


def test_block_hashes_are_vllm_64bit_ints() -> None:
    hs = prompt_block_hashes(list(range(40)), 16)
    assert len(hs) == 2 and all(isinstance(h, int) and 0 <= h < 2**64 for h in hs)
    assert prompt_block_hashes(list(range(32)), 16) == hs


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=200), json_values.map(lambda v: json.dumps(v).encode())),
       st.sampled_from(["completions", "chat"]))
def test_fuzz_parse_only_ever_accepts_or_raises_request_error(raw: bytes, kind: str) -> None:
    try:
        p = parse_request(raw, kind)  # type: ignore[arg-type]
    except RequestError as e:
        assert 400 <= e.status < 500 and e.message
    else:
        assert isinstance(p.prompt_ids, list)


def test_block_hasher_matches_vllm_hashing_and_memoises() -> None:
    from pdserve.router.block_hasher import BlockHasher

    ids = list(range(1000, 1000 + 100))
    h = BlockHasher(16, max_entries=8)
    first = h.external_hashes(ids)
    assert first == prompt_block_hashes(ids, 16) and len(first) == 6
    assert h.external_hashes(ids[:70] + [5] * 30) [:4] == first[:4]
    assert h.hits == 4 and len(h) <= 8
    for k in range(5):  # overflowing the table clears it; results stay exact
        assert h.external_hashes([k] * 48) == prompt_block_hashes([k] * 48, 16)
    assert h.external_hashes(ids) == first
