"""Encoding a rendered chat prompt piece by piece, with the pieces' ids remembered.

A chat request re-sends its whole conversation every turn, and the template renders
it to one text, so the router would BPE-encode the same history again at every turn
(the HF ``tokenizers`` encode costs about 0.1-0.3 µs a character here: a 4,000-token
history is ~1 ms of event-loop CPU per request; bench/router/tokenize_cost.py).

HF ``tokenizers`` itself encodes a text in independent pieces: it first cuts the text
at every added token that is not ``normalized`` (the chat template's special tokens:
``<|start_header_id|>``, ``<|eot_id|>``...), then normalizes, pre-tokenizes and
BPE-encodes each piece on its own (``AddedVocabulary::extract_and_normalize``). So
``encode(text)`` is the concatenation of the pieces' encodes and the added tokens'
ids, and a piece seen before (an earlier turn, a shared system prompt, the
template's fixed text) can take its ids from a cache. Only the new pieces go to the
backend, in one ``encode_batch_fast`` call.

That identity holds when nothing in the pipeline looks beyond its piece. ``plan``
checks this when the tokenizer is loaded and returns None (plain encoding) otherwise:
an added token that strips the whitespace around it (``lstrip``/``rstrip``) or must be
a single word moves the cut; a pre-tokenizer outside the per-piece ones below (e.g.
``Metaspace`` with ``prepend_scheme="first"``, which treats the text's first piece
differently) may see the position. Only encodes without special tokens use it (chat
prompts: the template writes BOS itself), so no post-processor runs.

A piece not in the cache (a new prompt) that is plain ASCII goes word by word through
``words.WordEncoder`` when the tokenizer is a byte-level BPE it accepts: the same ids,
without the backend's pre-tokenizer, and with the words' ids remembered.
"""

from __future__ import annotations

import json
import re
from array import array
from collections.abc import Iterable, Mapping
from typing import Any

from pdserve.tokenization.words import WordEncoder

# Pre-tokenizers whose output on a piece does not depend on where the piece sits in
# the text (tokenizers/src/pre_tokenizers/*: each splits by the piece's own content).
_PER_PIECE_PRE_TOKENIZERS = frozenset({"ByteLevel", "Split", "Digits", "Punctuation", "Whitespace",
                                       "WhitespaceSplit", "BertPreTokenizer", "UnicodeScripts"})


def _per_piece(pre: Mapping[str, Any] | None) -> bool:
    if pre is None:
        return True
    if pre.get("type") == "Sequence":
        return all(_per_piece(p) for p in pre.get("pretokenizers") or [])
    return pre.get("type") in _PER_PIECE_PRE_TOKENIZERS


def literal_trie(words: Iterable[str]) -> str:
    """A regex matching any of ``words`` (non-empty literals), the longest one where several
    match at a position (the backend's leftmost-longest match), written as a trie of their
    common prefixes: ``<\\|(?:eot_id\\|>|start_header_id\\|>)`` rather than one alternative per
    word. Python's ``re`` tries the alternatives of a plain alternation one by one at every
    position of the text; a trie tests one character there, and a literal prefix lets it skip
    ahead. Real vocabularies have hundreds of added tokens (Llama 3: 256, reserved ones
    included), where the plain alternation cost several times the trie per chat prompt (numbers
    in the commit that made this). Longest wins because a word that ends where longer ones go
    on is an optional group, tried greedily first and given up only if the longer one fails."""
    root: dict[str, dict] = {}
    for w in words:
        node = root
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}  # a word ends here

    def emit(node: dict[str, dict]) -> str:
        branches = [re.escape(ch) + emit(node[ch]) for ch in sorted(k for k in node if k)]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if "" in node else body

    return emit(root)


class SegmentEncoder:
    """``encode(text)`` == the backend's ``encode(text, add_special_tokens=False).ids``,
    with the ids of pieces between added tokens kept in an LRU bounded by characters
    (ids as int64 arrays: ~8 bytes a token, and nothing for the garbage collector to
    walk; 2 M characters are ~600 k tokens, ~7 MB with the text). For one thread at a
    time, as the router's and the mock worker's event loops call it: the cache's
    read-then-reinsert is not atomic."""

    def __init__(self, backend: Any, cut: re.Pattern[str], token_ids: dict[str, int],
                 max_chars: int = 2_000_000, words: WordEncoder | None = None) -> None:
        self._backend = backend
        # New pieces of plain ASCII: word by word with the words' ids remembered (words.py).
        self._words = words
        self._cut = cut
        self._ids = token_ids
        self.max_chars = max_chars
        self._cache: dict[str, array[int]] = {}
        self._chars = 0
        self.hits = 0
        self.misses = 0

    @classmethod
    def plan(cls, backend: Any, max_chars: int = 2_000_000) -> SegmentEncoder | None:
        """A segment encoder for this ``tokenizers.Tokenizer``, or None where the pieces
        are not independent (see the module docstring)."""
        if backend is None or getattr(backend, "encode_special_tokens", False):
            return None
        try:
            pre = json.loads(backend.to_str()).get("pre_tokenizer")
        except (ValueError, AttributeError):
            return None
        if not _per_piece(pre):
            return None
        cuts: dict[str, int] = {}
        for tid, tok in backend.get_added_tokens_decoder().items():
            if tok.normalized:
                continue  # matched inside the pieces, after normalization: the backend does it
            if tok.lstrip or tok.rstrip or tok.single_word or not tok.content:
                return None
            cuts[tok.content] = tid
        if not cuts:
            return None
        return cls(backend, re.compile("(" + literal_trie(cuts) + ")"), cuts, max_chars, WordEncoder.plan(backend))

    def encode(self, text: str) -> list[int]:
        parts = self._cut.split(text)  # pieces at even positions, added tokens at odd ones
        cache = self._cache
        known: dict[str, Any] = {}
        todo: list[str] = []
        for p in parts[0::2]:
            if not p or p in known:
                continue
            ids = cache.pop(p, None)
            if ids is None:
                if p not in todo:
                    todo.append(p)
                continue
            cache[p] = ids  # most recently used last
            known[p] = ids
        self.hits += len(known)
        if todo:
            self.misses += len(todo)
            words = self._words
            if words is not None:
                rest = []
                for piece in todo:
                    wids = words.encode_array(piece) if words.plain(piece) else None
                    if wids is None:
                        rest.append(piece)
                    else:
                        known[piece] = wids
                        self._remember(piece, wids)
                todo = rest
            if todo:
                for piece, enc in zip(todo, self._backend.encode_batch_fast(todo, add_special_tokens=False)):
                    known[piece] = ids = array("q", enc.ids)
                    self._remember(piece, ids)
        # Joined as int64 arrays (pieces are copied, not iterated) and made a list once.
        out: array[int] = array("q")
        added = self._ids
        for i, p in enumerate(parts):
            if i % 2:
                out.append(added[p])
            elif p:
                out.extend(known[p])
        return out.tolist()

    def _remember(self, piece: str, ids: array[int]) -> None:
        if len(piece) > self.max_chars:
            return
        cache = self._cache
        self._chars += len(piece)
        cache[piece] = ids
        while self._chars > self.max_chars:
            oldest = next(iter(cache))
            self._chars -= len(oldest)
            del cache[oldest]

    def clear(self) -> None:
        self._cache.clear()
        self._chars = 0

    def __len__(self) -> int:
        return len(self._cache)
