"""Chat prompts are encoded piece by piece between special tokens, with the pieces' ids
cached (pdserve.tokenization.segments): the ids must be exactly transformers'
``tokenizer(text, add_special_tokens=False)`` (what vLLM calls), a conversation's
history must not be re-encoded at its next turn, and tokenizers whose pieces are not
independent must keep the plain encode."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdserve.tokenization import load_tokenizer
from pdserve.tokenization.hf import HfTokenizer
from pdserve.tokenization.segments import SegmentEncoder
from pdserve.tokenization.testing import SPECIAL_TOKENS, CountingBackend, build_bpe_tokenizer


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> HfTokenizer:
    t = load_tokenizer(str(build_bpe_tokenizer(tmp_path_factory.mktemp("bpe"))))
    assert isinstance(t, HfTokenizer)
    return t


def reference(t: HfTokenizer, text: str) -> list[int]:
    return list(t.hf(text, add_special_tokens=False)["input_ids"])


def counted(tok: HfTokenizer, max_chars: int = 2_000_000) -> tuple[SegmentEncoder, CountingBackend]:
    plan = SegmentEncoder.plan(tok.hf._tokenizer)
    assert plan is not None
    spy = CountingBackend(tok.hf._tokenizer)
    return SegmentEncoder(spy, plan._cut, plan._ids, max_chars=max_chars), spy


pieces = st.one_of(st.text(max_size=30), st.sampled_from([*SPECIAL_TOKENS, " ", "\n\n", "  x", "é", "🙂",
                                                          "<|eot_id", "|>", "<|begin_of_text|><|eot_id|>"]))
# One warm encoder across examples (hits and a 300-character LRU that evicts), one fresh per example.
_WARM: dict[str, SegmentEncoder] = {}


@settings(max_examples=500, deadline=None)
@given(st.lists(pieces, max_size=14))
def test_piecewise_ids_are_transformers_ids(tok: HfTokenizer, parts: list[str]) -> None:
    text = "".join(parts)
    warm = _WARM.setdefault("enc", counted(tok, max_chars=300)[0])
    fresh = SegmentEncoder.plan(tok.hf._tokenizer)
    assert fresh is not None
    expected = reference(tok, text)
    assert fresh.encode(text) == expected
    assert warm.encode(text) == expected
    assert warm.encode(text) == expected  # now from the cache


def test_the_next_turn_encodes_only_what_is_new(tok: HfTokenizer) -> None:
    enc, spy = counted(tok)
    history = "Explain the prefill and decode split in detail, with the KV transfer. " * 40
    turn1 = [{"role": "system", "content": "You are a careful assistant."}, {"role": "user", "content": history}]
    text1 = tok.render(turn1)
    assert enc.encode(text1) == reference(tok, text1)
    sent_first = sum(map(len, spy.texts))
    assert sent_first >= len(history)
    spy.texts.clear()
    turn2 = [*turn1, {"role": "assistant", "content": "It splits the work in two pools."},
             {"role": "user", "content": "And the router?"}]
    text2 = tok.render(turn2)
    assert enc.encode(text2) == reference(tok, text2)
    # Only the two new messages' pieces (and no history) went to the backend.
    assert sum(map(len, spy.texts)) < 100 and not any(history.strip() in t for t in spy.texts)
    assert enc.hits >= 2


def test_chat_ids_use_the_piece_cache(tok: HfTokenizer) -> None:
    msgs = [{"role": "user", "content": "summarise the cluster's state " * 20}]
    assert tok._segments is not None
    before = tok._segments.hits
    ids = tok.chat_ids(msgs)
    assert tok.chat_ids(msgs) == ids == reference(tok, tok.render(msgs))
    assert tok._segments.hits > before


def _trained(tmp: Path, pre_tokenizer: Any, added: list[Any]) -> Any:
    from tokenizers import Tokenizer, models, trainers

    t = Tokenizer(models.BPE(unk_token="<unk>"))
    t.pre_tokenizer = pre_tokenizer
    t.train_from_iterator(["hello world, the router keeps a prefix index"] * 50,
                          trainers.BpeTrainer(vocab_size=200, special_tokens=["<unk>"], show_progress=False))
    t.add_special_tokens(added)
    return t


def _forced(backend: Any, tokens: list[str]) -> SegmentEncoder:
    ids = {s: backend.token_to_id(s) for s in tokens}
    return SegmentEncoder(backend, re.compile("(" + "|".join(map(re.escape, tokens)) + ")"), ids)


def test_pieces_that_are_not_independent_keep_the_plain_encode(tmp_path: Path) -> None:
    from tokenizers import AddedToken, pre_tokenizers

    # Metaspace "first" prepends its marker only to the text's first piece.
    meta = _trained(tmp_path, pre_tokenizers.Metaspace(prepend_scheme="first"), [AddedToken("<s>", special=True)])
    text = "hello<s>world"
    assert _forced(meta, ["<s>"]).encode(text) != meta.encode(text, add_special_tokens=False).ids
    assert SegmentEncoder.plan(meta) is None
    # An added token that swallows the whitespace beside it moves the cut.
    strip = _trained(tmp_path, pre_tokenizers.ByteLevel(add_prefix_space=False),
                     [AddedToken("<x>", special=True, lstrip=True, rstrip=True)])
    text = "hello <x> world"
    assert _forced(strip, ["<x>"]).encode(text) != strip.encode(text, add_special_tokens=False).ids
    assert SegmentEncoder.plan(strip) is None
    # The same layout with plain special tokens is planned.
    plain = _trained(tmp_path, pre_tokenizers.ByteLevel(add_prefix_space=False), [AddedToken("<x>", special=True)])
    enc = SegmentEncoder.plan(plain)
    assert enc is not None and enc.encode(text) == plain.encode(text, add_special_tokens=False).ids


def _leftmost_longest_split(words: set[str], text: str) -> list[str]:
    """What the backend does with added tokens: scan left to right, at each position take the
    longest word starting there (written without regexes, as the reference)."""
    out, piece, i = [], "", 0
    while i < len(text):
        hit = max((w for w in words if text.startswith(w, i)), key=len, default=None)
        if hit is None:
            piece += text[i]
            i += 1
        else:
            out += [piece, hit]
            piece, i = "", i + len(hit)
    return out + [piece]


@settings(max_examples=400, deadline=None)
@given(st.sets(st.text(alphabet="<|ab>", min_size=1, max_size=5), min_size=1, max_size=12),
       st.text(alphabet="<|ab>xy", max_size=40))
def test_the_trie_of_added_tokens_cuts_where_the_backend_does(words: set[str], text: str) -> None:
    # Few letters, so the words share prefixes and one is often a prefix of another.
    from pdserve.tokenization.segments import literal_trie

    assert re.compile("(" + literal_trie(words) + ")").split(text) == _leftmost_longest_split(words, text)


def test_a_vocabulary_with_hundreds_of_added_tokens_encodes_as_the_backend(tmp_path: Path) -> None:
    # Llama 3's shape: 256 added tokens sharing the '<|' prefix, reserved ones included.
    from tokenizers import AddedToken

    t = load_tokenizer(str(build_bpe_tokenizer(tmp_path)))
    assert isinstance(t, HfTokenizer)
    backend = t.hf._tokenizer
    backend.add_special_tokens([AddedToken(f"<|reserved_special_token_{i}|>", special=True, normalized=False)
                                for i in range(250)])
    plan = SegmentEncoder.plan(backend)
    assert plan is not None
    text = ("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi <|reserved_special_token_12|>"
            "<|reserved_special_token_1|> <|reserved_special_token_1<|eot_id|>")
    assert plan.encode(text) == backend.encode(text, add_special_tokens=False).ids
