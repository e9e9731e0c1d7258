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
from array import array
from typing import Any

import regex

# tokenizers/src/pre_tokenizers/byte_level.rs: the regex of ByteLevel(use_regex=true).
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
# Llama 3's split regex (its tokenizer.json), and Qwen 2's (single digits).
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = LLAMA3_PATTERN.replace(r"\p{N}{1,3}", r"\p{N}")
# Split regexes whose pre-tokens never run across a space that follows a non-space: in each,
# a space can only be the first character of a pre-token or part of an all-whitespace one.
# So every pre-token ends at such a space, and, as matching at a position depends only on
# the text from there on, the pre-tokens of the text are those of its pieces cut before each
# such space (``WordEncoder._by_spaces``). Any other regex: pre-tokens only.
SPACE_CUT_PATTERNS = frozenset({GPT2_PATTERN, LLAMA3_PATTERN, QWEN2_PATTERN})
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

# On plain text (``_PLAIN``) the Unicode classes are these ASCII sets.
_ASCII_CLASSES = {"L": "A-Za-z", "N": "0-9"}
# Strings on which the translated pattern is checked against ``regex`` before it is used:
# every character class of plain text, in runs, next to each other, contractions in both cases.
_PROBES = ("Hello world's 'S 'll 'T don't I'M we've 12 1234567 x1 1x a_b 3.14 (x) {} [] ?! ... ~`\"'\"",
           "  two  spaces\tand\ttabs \n\nnew\r\nlines \n \r \t\t\n  end  ", "\n", " ", "a", "9999 9",
           "".join(chr(c) for c in range(32, 127)), "".join(chr(c) + " " for c in range(32, 127)) + "\r\n\t")


def ascii_pattern(pattern: str) -> re.Pattern[str] | None:
    """``pattern`` (``regex`` syntax, Unicode classes ``\\p{L}``, ``\\p{N}``) as a stdlib ``re``
    pattern that splits plain text the same way, or None. ``re`` runs these split regexes about
    2.4x faster than ``regex`` (34 against 14 µs for a 64-word prompt, bench/router/burst.py),
    but has no ``\\p{..}``; on plain text the letters and digits are ASCII, so the classes
    become ranges. Any other Unicode escape, nested set syntax or a mismatch with ``regex`` on
    the probe strings gives None: the caller keeps ``regex``."""
    out: list[str] = []
    i, in_class = 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            nxt = pattern[i + 1 : i + 2]
            if nxt in ("p", "P"):
                m = re.match(r"\\p\{(L|N)\}", pattern[i:])
                if m is None:
                    return None  # \P{..}, \pL, \p{Lu}, ...: not translated
                ranges = _ASCII_CLASSES[m.group(1)]
                out.append(ranges if in_class else f"[{ranges}]")
                i += m.end()
                continue
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            if c == "[" or pattern.startswith(("&&", "--", "||", "~~"), i):
                return None  # regex's set operations
            if c == "]":
                in_class = False
        elif c == "[":
            in_class = True
            out.append(c)
            i += 1
            if pattern[i : i + 1] == "^":
                out.append("^")
                i += 1
            if pattern[i : i + 1] == "]":  # a literal ] first in the class
                out.append("\\]")
                i += 1
            continue
        out.append(c)
        i += 1
    try:
        translated = re.compile("".join(out))
        reference = regex.compile(pattern)
    except (re.error, regex.error):
        return None
    if any(translated.findall(p) != reference.findall(p) for p in _PROBES):
        return None
    return translated


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


def cut_by_spaces(text: str) -> list[str] | None:
    """``text.split(" ")`` when every space in ``text`` follows a character that is not
    whitespace (or starts the text), else None. For a ``SPACE_CUT_PATTERNS`` regex the
    pre-tokens of ``text`` are then those of its first part followed by those of " " + each
    other part. After whitespace a space may belong to a run of whitespace ("a\\n  " is
    "a", "\\n  "), so such text is not cut. (Plain text only: its whitespace is space, tab,
    LF and CR.)"""
    if "  " in text or "\n " in text or "\t " in text or "\r " in text:
        return None
    return text.split(" ")


class WordEncoder:
    """``encode(text)`` == the backend's ``encode(text, add_special_tokens=False).ids`` for
    text with no added token in it and ``plain(text)``; one thread at a time."""

    def __init__(self, model: Any, pattern: str, max_words: int = 200_000) -> None:
        self._tokenize = model.tokenize
        # Only ever applied to plain text (the caller checks ``plain`` first).
        fast = ascii_pattern(pattern)
        self._split = fast.findall if fast is not None else regex.compile(pattern).findall
        self.max_words = max_words
        self._ids: dict[str, bytes] = {}  # a pre-token's ids, as int64 bytes in native order
        # Text between spaces, by what follows the space (" word12," -> "word12,"), when the
        # regex allows the cut: its ids likewise (see ``_by_spaces``).
        self._spaced: dict[str, bytes] | None = {} if pattern in SPACE_CUT_PATTERNS else None

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
        ids = self.encode_array(text)
        return None if ids is None else ids.tolist()

    def encode_array(self, text: str) -> array[int] | None:
        """``encode`` as an int64 array (what ``SegmentEncoder`` keeps and joins). Ids are
        remembered as their int64 bytes, so a text's ids are one ``bytes.join`` and one copy
        into the array: no Python int per id on the way."""
        parts = cut_by_spaces(text) if self._spaced is not None else None
        found = self._pre_tokens(text) if parts is None else self._by_spaces(parts)
        if found is None:
            return None
        out = array("q")
        out.frombytes(found)
        return out

    def _by_spaces(self, parts: list[str]) -> bytes | None:
        """The ids of a text given as ``cut_by_spaces`` cut it, a piece at a time: each piece's
        ids are its pre-tokens' (``SPACE_CUT_PATTERNS``), remembered by piece. The regex then
        runs only on pieces not seen before (numbers in the commit that made this)."""
        spaced = self._spaced
        assert spaced is not None
        found = list(map(spaced.get, parts))
        first = self._pre_tokens(parts[0]) if parts[0] else b""  # no space before it
        if first is None:
            return None
        found[0] = first
        if None in found:
            for i in range(1, len(found)):
                if found[i] is None:
                    part = parts[i]
                    ids = spaced.get(part)  # the same new piece twice in this text
                    if ids is None:
                        ids = self._pre_tokens(" " + part)
                        if ids is None:
                            return None
                        if len(spaced) >= self.max_words:
                            del spaced[next(iter(spaced))]  # the oldest: a bounded memo, not an LRU
                        spaced[part] = ids
                    found[i] = ids
        return b"".join(found)  # type: ignore[arg-type]

    def _pre_tokens(self, text: str) -> bytes | None:
        """The ids of ``text`` pre-token by pre-token, or None when the regex left a gap."""
        words = self._split(text)
        if sum(map(len, words)) != len(text):
            return None  # characters no alternative matched: tokenizers keeps them as pre-tokens
        known = self._ids
        # Lookups in one C-level pass; words not remembered yet are filled in after.
        found = list(map(known.get, words))
        if None in found:
            for i, ids in enumerate(found):
                if ids is None:
                    w = words[i]
                    ids = known.get(w)  # the same new word twice in this text
                    if ids is None:
                        ids = array("q", [t.id for t in self._tokenize(w.translate(_TO_BYTE_LEVEL))]).tobytes()
                        if len(known) >= self.max_words:
                            del known[next(iter(known))]  # the oldest: a bounded memo, not an LRU
                        known[w] = ids
                    found[i] = ids
        return b"".join(found)  # type: ignore[arg-type]

    def __len__(self) -> int:
        return len(self._ids)
