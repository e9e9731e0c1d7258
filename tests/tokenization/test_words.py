"""New plain-ASCII pieces are encoded word by word with the words' ids remembered
(pdserve.tokenization.words): the ids must be exactly the backend's encode, for both
forms of byte-level pre-tokenizer (GPT-2's ByteLevel regex, Llama 3's Split + ByteLevel),
and other pipelines or other text must keep the backend's encode."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import regex
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from tokenizers import Regex, Tokenizer, normalizers, pre_tokenizers

from pdserve.tokenization import load_tokenizer
from pdserve.tokenization.hf import HfTokenizer
from pdserve.tokenization.segments import SegmentEncoder
from pdserve.tokenization.testing import SPECIAL_TOKENS, CountingBackend, build_bpe_tokenizer
from pdserve.tokenization.words import GPT2_PATTERN, WordEncoder, ascii_pattern, cut_by_spaces

# Llama 3's pre-tokenizer regex (its tokenizer.json), with ByteLevel(use_regex=False) after it.
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen 2's: Llama 3's with single digits.
QWEN2_PATTERN = LLAMA3_PATTERN.replace(r"\p{N}{1,3}", r"\p{N}")


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> HfTokenizer:
    t = load_tokenizer(str(build_bpe_tokenizer(tmp_path_factory.mktemp("bpe"))))
    assert isinstance(t, HfTokenizer)
    return t


def backend_of(tok: HfTokenizer) -> Tokenizer:
    return Tokenizer.from_str(tok.hf._tokenizer.to_str())  # a copy: tests may change its pipeline


def llama3_form(tok: HfTokenizer) -> Tokenizer:
    b = backend_of(tok)
    b.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    return b


def expected(b: Tokenizer, text: str) -> list[int]:
    return list(b.encode(text, add_special_tokens=False).ids)


# Text where the words repeat and every regex alternative is exercised (contractions in
# both cases, digit runs, punctuation runs, whitespace runs before words and at the end).
plain_text = st.lists(st.sampled_from(["word", "Word", " word", "12", "1234567", " 7", "'s", "'S", "'ll", "'t",
                                       "don't", " ", "  ", "\t", "\n", "\r\n", "\n\n", "!", "?!", " ...", "(x)",
                                       "a", " the", "~", "`", "\"", "{", "}"]), max_size=40).map("".join)
any_plain = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126) | st.sampled_from("\t\n\r"),
                    max_size=60)


@pytest.mark.parametrize("form", ["gpt2", "llama3"])
def test_plan_accepts_both_byte_level_forms(tok: HfTokenizer, form: str) -> None:
    b = backend_of(tok) if form == "gpt2" else llama3_form(tok)
    assert WordEncoder.plan(b) is not None


@pytest.mark.parametrize("form", ["gpt2", "llama3"])
@settings(max_examples=400, deadline=None)
@given(texts=st.lists(plain_text | any_plain, min_size=1, max_size=4))
def test_word_ids_are_the_backends(tok: HfTokenizer, form: str, texts: list[str]) -> None:
    b = backend_of(tok) if form == "gpt2" else llama3_form(tok)
    words = WordEncoder.plan(b, max_words=50)  # small: eviction happens
    assert words is not None
    for text in texts:  # one encoder over several texts: remembered words are reused
        assume(not any(s in text for s in SPECIAL_TOKENS))  # SegmentEncoder cuts those out first
        assert words.plain(text)
        ids = words.encode(text)  # both regexes match every character: no gap, no fallback
        assert ids == expected(b, text), text


def test_other_pipelines_keep_the_backend(tok: HfTokenizer) -> None:
    with_normalizer = backend_of(tok)
    with_normalizer.normalizer = normalizers.Lowercase()
    prefix_space = backend_of(tok)
    prefix_space.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
    metaspace = backend_of(tok)
    metaspace.pre_tokenizer = pre_tokenizers.Metaspace()
    spec: dict[str, Any] = json.loads(backend_of(tok).to_str())
    spec["model"]["dropout"] = 0.1
    dropout = Tokenizer.from_str(json.dumps(spec))
    for b in (with_normalizer, prefix_space, metaspace, dropout):
        assert WordEncoder.plan(b) is None


def test_new_plain_prompts_skip_the_backend(tok: HfTokenizer) -> None:
    plan = SegmentEncoder.plan(tok.hf._tokenizer)
    assert plan is not None and plan._words is not None
    spy = CountingBackend(tok.hf._tokenizer)
    seg = SegmentEncoder(spy, plan._cut, plan._ids, words=plan._words)
    first = tok.render([{"role": "user", "content": "request 1: please summarise word1 word2 word3"}])
    second = tok.render([{"role": "user", "content": "request 2: please summarise word4 word1 déjà vu"}])
    assert seg.encode(first) == list(tok.hf(first, add_special_tokens=False)["input_ids"])
    assert spy.texts == []  # every piece plain: words, not the backend
    assert seg.encode(second) == list(tok.hf(second, add_special_tokens=False)["input_ids"])
    assert spy.texts == ["\n\nrequest 2: please summarise word4 word1 déjà vu"]  # not ASCII: the backend


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(plain_text, st.text(max_size=20), st.sampled_from(SPECIAL_TOKENS)), max_size=10))
def test_chat_encode_with_words_is_transformers(tok: HfTokenizer, parts: list[str]) -> None:
    text = "".join(parts)
    assert tok._encode_chat(text, add_special_tokens=False) == list(tok.hf(text, add_special_tokens=False)["input_ids"])


@pytest.mark.parametrize("pattern", [GPT2_PATTERN, LLAMA3_PATTERN, QWEN2_PATTERN])
@settings(max_examples=300, deadline=None)
@given(text=plain_text | any_plain)
def test_ascii_pattern_splits_plain_text_as_regex_does(pattern: str, text: str) -> None:
    fast = ascii_pattern(pattern)
    assert fast is not None  # the three real split regexes are translated
    assert fast.findall(text) == regex.compile(pattern).findall(text)


@pytest.mark.parametrize("pattern", [r"\p{Lu}+|\s+", r"\P{L}+", r"\pL+", r"[\p{L}--[a-z]]+", r"\p{L}+|\p{M}+"])
def test_ascii_pattern_refuses_what_it_cannot_translate(pattern: str) -> None:
    assert ascii_pattern(pattern) is None


@pytest.mark.parametrize("form", ["gpt2", "llama3"])
def test_word_encoder_splits_with_the_stdlib_re(tok: HfTokenizer, form: str) -> None:
    b = backend_of(tok) if form == "gpt2" else llama3_form(tok)
    words = WordEncoder.plan(b)
    assert words is not None
    assert isinstance(words._split.__self__, re.Pattern)  # type: ignore[attr-defined]


def test_the_space_cut_patterns_are_the_real_split_regexes() -> None:
    # The cut by spaces is allowed by string equality with these: a copy that drifted from
    # the tokenizer.json form would silently lose the fast path (or, worse, grant it).
    from pdserve.tokenization import words as w

    assert w.SPACE_CUT_PATTERNS == {GPT2_PATTERN, LLAMA3_PATTERN, QWEN2_PATTERN}
    assert (w.LLAMA3_PATTERN, w.QWEN2_PATTERN) == (LLAMA3_PATTERN, QWEN2_PATTERN)


spaced_text = st.lists(st.sampled_from(["word", "Word", " ", " ", " ", "  ", "12", "1234", "'s", "'ll", "don't", "\t",
                                        "\n", "\r\n", "!", "?!", "...", "(x)", "a", "~", "\"", "x1", " \n", "\n "]),
                       max_size=40).map("".join)


@pytest.mark.parametrize("pattern", [GPT2_PATTERN, LLAMA3_PATTERN, QWEN2_PATTERN])
@settings(max_examples=400, deadline=None)
@given(texts=st.lists(spaced_text | any_plain, min_size=1, max_size=4))
def test_ids_cut_by_spaces_are_the_ids_by_pre_tokens(tok: HfTokenizer, pattern: str, texts: list[str]) -> None:
    # The fast path (pieces between spaces, remembered) against the pre-token path on the same
    # text, for each pattern the cut is allowed for; and both against the backend.
    b = backend_of(tok)
    b.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    words = WordEncoder.plan(b, max_words=30)  # small: eviction happens
    assert words is not None and words._spaced is not None
    for text in texts:
        assume(not any(s in text for s in SPECIAL_TOKENS))
        parts = cut_by_spaces(text)
        if parts is not None:
            assert words._by_spaces(parts) == words._pre_tokens(text), text
        assert words.encode(text) == expected(b, text), text


@pytest.mark.parametrize("pattern", [GPT2_PATTERN, LLAMA3_PATTERN, QWEN2_PATTERN])
@settings(max_examples=1000, deadline=None)
@given(text=spaced_text | any_plain)
def test_pre_tokens_of_the_pieces_are_the_texts(pattern: str, text: str) -> None:
    # The claim the cut rests on, with the reference regex engine: pre-tokens (not only ids:
    # a vocabulary without a merge for "  " hides a wrong cut there) never cross the cut.
    parts = cut_by_spaces(text)
    assume(parts is not None)
    assert parts is not None
    split = regex.compile(pattern).findall
    pieces = [parts[0], *(" " + p for p in parts[1:])]
    assert [w for piece in pieces if piece for w in split(piece)] == split(text)


@pytest.mark.parametrize("text", ["a  ", "a\n  b", "a\t ", "x\r\n  y"])
def test_text_with_a_space_after_whitespace_is_not_cut(text: str) -> None:
    # Here a run of whitespace holds the space: "a  " is "a", "  " for every pattern.
    assert cut_by_spaces(text) is None


def test_new_prompts_are_cut_by_spaces(tok: HfTokenizer) -> None:
    words = WordEncoder.plan(backend_of(tok))
    assert words is not None and words._spaced is not None
    text = "request 7: please summarise word1 word2 word1,"
    assert words.encode(text) == expected(backend_of(tok), text)
    assert set(words._spaced) == {"7:", "please", "summarise", "word1", "word2", "word1,"}
    before = dict(words._ids)
    assert words.encode("\n\nword2 word1 please") == expected(backend_of(tok), "\n\nword2 word1 please")
    assert "\n\nword2" not in words._spaced and before.keys() <= words._ids.keys()
    # After whitespace a space may join a whitespace pre-token: such text keeps the pre-tokens.
    n = len(words._spaced)
    assert words.encode("word9 \n word8") == expected(backend_of(tok), "word9 \n word8")
    assert len(words._spaced) == n


def test_other_split_patterns_are_not_cut_by_spaces(tok: HfTokenizer) -> None:
    b = backend_of(tok)
    b.pre_tokenizer = pre_tokenizers.Sequence([  # a regex whose pre-tokens may hold spaces
        pre_tokenizers.Split(Regex(r"\p{L}+ \p{L}+|\s+|\p{L}+|\p{N}+|[^\s\p{L}\p{N}]+"), behavior="isolated",
                             invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    words = WordEncoder.plan(b)
    assert words is not None and words._spaced is None
    assert words.encode("ab cd ef 12") == expected(b, "ab cd ef 12")
