"""HfTokenizer.encode calls the Rust backend directly (the router's hot path) and must give
exactly what transformers' ``tokenizer(text, add_special_tokens=...)`` gives, which is
what vLLM calls; where transformers would do something else first, it must be used."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdserve.tokenization import load_tokenizer
from pdserve.tokenization.hf import HfTokenizer, _backend_encoder
from pdserve.tokenization.testing import SPECIAL_TOKENS, build_bpe_tokenizer


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> HfTokenizer:
    t = load_tokenizer(str(build_bpe_tokenizer(tmp_path_factory.mktemp("bpe"))))
    assert isinstance(t, HfTokenizer)
    return t


def reference(t: HfTokenizer, text: str, add_special_tokens: bool) -> list[int]:
    return list(t.hf(text, add_special_tokens=add_special_tokens)["input_ids"])


def test_the_stock_fast_tokenizer_takes_the_backend_path(tok: HfTokenizer) -> None:
    assert _backend_encoder(tok.hf) is not None


pieces = st.one_of(st.text(max_size=40), st.sampled_from([*SPECIAL_TOKENS, " ", "\n\n", "  x", "é", "日本語", "🙂"]))


@settings(max_examples=400, deadline=None)
@given(st.lists(pieces, max_size=12), st.booleans())
def test_backend_path_gives_transformers_ids(tok: HfTokenizer, parts: list[str], special: bool) -> None:
    text = "".join(parts)
    assert tok.encode(text, add_special_tokens=special) == reference(tok, text, special)


def test_chat_ids_unchanged(tok: HfTokenizer) -> None:
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello <|eot_id|> there"}]
    text = tok.render(msgs)
    assert tok.chat_ids(msgs) == reference(tok, text, False)


def test_backend_state_set_by_someone_else_falls_back_to_transformers(tok: HfTokenizer) -> None:
    backend = tok.hf._tokenizer
    text = "word " * 50
    backend.enable_truncation(8)  # transformers would switch it off before encoding
    try:
        assert len(tok.encode(text)) > 8
        assert tok.encode(text) == reference(tok, text, True)
    finally:
        backend.no_truncation()


def test_a_class_overriding_the_encode_chain_keeps_transformers_path(tok: HfTokenizer) -> None:
    class Custom(type(tok.hf)):  # type: ignore[misc]
        def _encode_plus(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            return super()._encode_plus(*args, **kwargs)

    obj = object.__new__(Custom)
    obj.__dict__.update(tok.hf.__dict__)
    assert _backend_encoder(obj) is None
