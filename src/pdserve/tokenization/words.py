"""Byte-level BPE of plain ASCII text, word by word, with the words' ids remembered.

A new prompt has no piece in ``SegmentEncoder``'s cache, so the backend encodes it
whole, and most of that time is its pre-tokenizer (the split regex, offsets and the
byte-to-unicode mapping of every piece: ``tokenize_cost.json``'s
``raw_tokenizers_encode_bpe_ms``), not the BPE merges. But new prompts are mostly made
of words seen before. For a byte-level BPE, ``tokenizers`` computes the ids of a text as
follows: no normalizer; the pre-tokenizer splits the text with one regex into
pre-tokens (matches and the gaps between them: ``Isolated``), maps each pre-token's
bytes to the ByteLevel alphabet, and the BPE model tokenizes each pre-token on its own.
So the ids are the concatenation of ``model.tokenize(mapped(word))`` over the regex's
pre-tokens, and a word's ids can be remembered.

``WordEncoder.plan`` accepts only that pipeline, in the two forms tokenizers write it
(``ByteLevel(use_regex=True)``, GPT-2's regex: GPT-2, RoBERTa, our test tokenizer; and
``Sequence[Split(Regex, Isolated), ByteLevel(use_regex=False)]``: Llama 3, Qwen 2),
with no added token matched inside pieces (``normalized``), no normalizer and a BPE
without dropout; anything else returns None. It splits only text of printable ASCII,
tab, LF and CR (``plain``): there the ``regex`` module and the backend's Oniguruma agree
on ``\\p{L}``, ``\\p{N}`` and ``\\s`` (Unicode's categories and whitespace differ between
the engines' versions only outside ASCII). Other text goes to the backend as before.
tests/tokenization/test_words.py compares both forms with the backend on random text.
"""

from __future__ import annotations

import json
import re
from typing import Any

import regex

# tokenizers/src/pre_tokenizers/byte_level.rs: the regex of ByteLevel(use_regex=true).
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
# Characters on which the regex engines agree (see the module docstring).
_PLAIN = re.compile(r"[\x20-\x7e\t\n\r]*")


def _byte_level_ascii() -> dict[int, str]:
    """GPT-2's bytes_to_unicode for the ASCII bytes: printable ones map to themselves,
    the others (here: tab, LF, CR, space) to 256 + their rank among the unprintable."""
    printable = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    table, n = {}, 0
    for b in range(256):
        if b in printable:
            mapped = b
        else:
            mapped, n = 256 + n, n + 1
        if b < 128:
            table[b] = chr(mapped)
    return table


_TO_BYTE_LEVEL = str.maketrans(_byte_level_ascii())


def _split_pattern(pre: Any) -> str | None:
    """The pre-tokenizer's split regex when it is one of the two byte-level forms."""
    if not isinstance(pre, dict):
        return None
    if pre.get("type") == "ByteLevel":
        return GPT2_PATTERN if pre.get("use_regex", True) and not pre.get("add_prefix_space") else None
    if pre.get("type") != "Sequence":
        return None
    parts = pre.get("pretokenizers") or []
    if len(parts) != 2:
        return None
    split, level = parts
    if (split.get("type") != "Split" or split.get("behavior") != "Isolated" or split.get("invert")
            or not isinstance(split.get("pattern"), dict) or "Regex" not in split["pattern"]):
        return None
    if level.get("type") != "ByteLevel" or level.get("use_regex", True) or level.get("add_prefix_space"):
        return None
    return str(split["pattern"]["Regex"])


class WordEncoder:
    """``encode(text)`` == the backend's ``encode(text, add_special_tokens=False).ids`` for
    text with no added token in it and ``plain(text)``; one thread at a time."""

    def __init__(self, model: Any, pattern: str, max_words: int = 200_000) -> None:
        self._tokenize = model.tokenize
        self._split = regex.compile(pattern).findall
        self.max_words = max_words
        self._ids: dict[str, list[int]] = {}

    @classmethod
    def plan(cls, backend: Any, max_words: int = 200_000) -> WordEncoder | None:
        try:
            spec = json.loads(backend.to_str())
        except (ValueError, AttributeError):
            return None
        model = spec.get("model") or {}
        if spec.get("normalizer") is not None or model.get("type") != "BPE" or model.get("dropout"):
            return None
        if any(t.get("normalized") for t in spec.get("added_tokens") or []):
            return None  # matched inside pieces, across word boundaries
        pattern = _split_pattern(spec.get("pre_tokenizer"))
        if pattern is None:
            return None
        try:
            return cls(backend.model, pattern, max_words)
        except (regex.error, AttributeError):
            return None

    @staticmethod
    def plain(text: str) -> bool:
        return _PLAIN.fullmatch(text) is not None

    def encode(self, text: str) -> list[int] | None:
        """The ids, or None when the regex left a gap (then the caller asks the backend)."""
        words = self._split(text)
        if sum(map(len, words)) != len(text):
            return None  # characters no alternative matched: tokenizers keeps them as pre-tokens
        known = self._ids
        out: list[int] = []
        for w in words:
            ids = known.get(w)
            if ids is None:
                ids = [t.id for t in self._tokenize(w.translate(_TO_BYTE_LEVEL))]
                if len(known) >= self.max_words:
                    del known[next(iter(known))]  # the oldest: a bounded memo, not an LRU
                known[w] = ids
            out += ids
        return out

    def __len__(self) -> int:
        return len(self._ids)
