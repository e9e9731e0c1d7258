import functools
import json
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdserve.router.core.block_hasher import BlockHasher, block_key
from pdserve.router.core.requests import RequestError
from pdserve.router.core.requests import parse_request as _parse
from pdserve.tokenization import load_tokenizer
from pdserve.tokenization.testing import build_bpe_tokenizer


@functools.cache
def _tokenizer():
    """One BPE tokenizer for the module: the fixture's and the hypothesis tests' (which take no fixture)."""
    with tempfile.TemporaryDirectory(prefix="pdserve-bpe-") as d:  # loaded into memory; the files can go
        return load_tokenizer(str(build_bpe_tokenizer(d)))


@pytest.fixture(scope="module")
def tok():
    return _tokenizer()


def parse_request(raw: bytes, kind):
    return _parse(raw, kind, _tokenizer())


def test_completion_prompt_forms(tok) -> None:
    p = _parse(b'{"model":"m","prompt":"hello world"}', "completions", tok)
    assert p.prompt_ids == tok.encode("hello world", add_special_tokens=True)  # vLLM's default: BOS added
    assert p.prompt_ids[1:] == tok.encode("hello world", add_special_tokens=False)
    assert _parse(b'{"prompt":"hello world","add_special_tokens":false}', "completions", tok).prompt_ids == \
        p.prompt_ids[1:]
    assert _parse(b'{"prompt":[5,6,7]}', "completions", tok).prompt_ids == [5, 6, 7]
    assert _parse(b'{"prompt":["a b","c"]}', "completions", tok).prompt_ids == tok.encode("a b")
    p = _parse(b'{"prompt":"x","stream":true,"stream_options":{"include_usage":true},"foo":1,"cache_salt":"s"}',
               "completions", tok)
    assert p.stream and p.include_usage and p.body["foo"] == 1 and p.cache_salt == "s"


def test_token_prompts_are_left_to_the_worker_to_judge(tok) -> None:
    # vLLM accepts ids up to the model's vocab size (may exceed the tokenizer's): no stricter check here.
    assert _parse(json.dumps({"prompt": [1, tok.vocab_size + 3]}).encode(), "completions", tok).prompt_ids == [
        1, tok.vocab_size + 3]


def test_chat_ids_are_the_models(tok) -> None:
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    p = _parse(json.dumps({"model": "m", "messages": msgs}).encode(), "chat", tok)
    assert p.prompt_ids == tok.chat_ids(msgs)
    assert all(0 <= i < tok.vocab_size for i in p.prompt_ids)
    body = {"messages": msgs + [{"role": "assistant", "content": "Sure"}], "add_generation_prompt": False,
            "continue_final_message": True}
    assert _parse(json.dumps(body).encode(), "chat", tok).prompt_ids == tok.chat_ids(
        body["messages"], add_generation_prompt=False, continue_final_message=True)
    p = _parse(json.dumps({"messages": msgs, "add_special_tokens": True}).encode(), "chat", tok)
    assert p.prompt_ids == tok.chat_ids(msgs, add_special_tokens=True)


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}],
          "continue_final_message": True}, "Cannot set both"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}]},
         "image_url"),
        ({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"tokenize": True}},
         "unexpected chat template kwargs"),
    ],
)
def test_chat_requests_vllm_refuses_are_400(tok, body, fragment) -> None:
    with pytest.raises(RequestError) as e:
        _parse(json.dumps(body).encode(), "chat", tok)
    assert e.value.status == 400 and fragment in e.value.message and e.value.param == "messages"


@pytest.mark.parametrize(
    ("raw", "kind", "fragment", "param"),
    [
        (b"{", "completions", "not valid JSON", None),
        (b"[1]", "completions", "must be a JSON object", None),
        (b'{"model":"m"}', "completions", "prompt", "prompt"),
        (b'{"prompt":"x","max_tokens":"lots"}', "completions", "max_tokens", "max_tokens"),
        (b'{"prompt":"x","max_tokens":-1}', "completions", "max_tokens", "max_tokens"),
        (b'{"prompt":"x","stream":"maybe"}', "completions", "stream", "stream"),
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


@pytest.mark.parametrize(
    ("raw", "stream", "include_usage"),
    [
        # vLLM's request models are pydantic in lax mode (OpenAIBaseModel: ConfigDict(extra="allow") only), so
        # a worker accepts these; the router, which used strict types, refused them with a 400.
        (b'{"prompt":"x","stream":"yes","max_tokens":"7"}', True, False),
        (b'{"prompt":"x","stream":1,"n":"1"}', True, False),
        # vLLM StreamOptions.include_usage defaults to True: stream_options {} asks for usage
        # (serving_completion.py: include_usage = stream_options.include_usage when stream_options is set).
        (b'{"prompt":"x","stream":true,"stream_options":{}}', True, True),
        (b'{"prompt":"x","stream":true,"stream_options":{"include_usage":"false"}}', True, False),
        (b'{"prompt":"x","stream":true,"stream_options":{"include_usage":null}}', True, False),
    ],
)
def test_fields_read_as_vllm_reads_them(raw: bytes, stream: bool, include_usage: bool) -> None:
    p = parse_request(raw, "completions")
    assert (p.stream, p.include_usage) == (stream, include_usage)
    assert p.body == json.loads(raw)  # forwarded as the client sent it: the worker reads it the same way


def test_router_and_worker_share_one_set_of_request_models() -> None:
    from pdserve.common import openai_protocol as shared
    from pdserve.router.core import requests
    from pdserve.worker import protocol

    assert issubclass(requests.CompletionBody, shared.CompletionFields)
    assert issubclass(protocol.CompletionRequest, shared.CompletionFields)
    assert issubclass(requests.ChatBody, shared.ChatFields) and issubclass(protocol.ChatCompletionRequest,
                                                                         shared.ChatFields)
    body = {"messages": [{"role": "user", "content": "hi"}], "stream": "true", "tools": [{"type": "function"}]}
    worker = protocol.ChatCompletionRequest.model_validate(body)
    router = requests.ChatBody.model_validate(body)
    assert worker.stream is router.stream is True and worker.tools == router.tools


def test_block_keys_are_chained_64bit_ints() -> None:
    h = BlockHasher(16)
    hs = h.request_keys(list(range(40)))
    assert len(hs) == 2 and all(isinstance(k, int) and 0 <= k < 2**64 for k in hs)
    assert h.request_keys(list(range(32))) == hs
    assert hs[1] == block_key(hs[0], tuple(range(16, 32)))
    assert h.request_keys(list(range(32)), cache_salt="s")[0] != hs[0]


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


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=2**31), max_size=120), st.sampled_from([1, 4, 16]),
       st.sampled_from([None, "s3cret", "x'y"]), st.sampled_from([None, "sql-adapter"]))
def test_request_keys_equal_the_event_side_chain(ids: list[int], bs: int, salt: str | None,
                                                 lora: str | None) -> None:
    # The index matches a prompt's keys against keys it chained from KV events with
    # BlockHasher.key: the packed one-pass request path must give the same values.
    h = BlockHasher(bs)
    lora_t = (lora,) if lora else ()
    expected, parent = [], None
    for i in range(len(ids) // bs):
        extra = (lora_t + (salt,) if salt else lora_t or None) if i == 0 else (lora_t or None)
        parent = h.key(parent, tuple(ids[i * bs : (i + 1) * bs]), extra)
        expected.append(parent)
    assert h.request_keys(ids, cache_salt=salt, lora_name=lora) == expected
