"""``--tokenizer-mode mock``: the hash-word tokenizer of pdserve's mock worker.

Chosen only explicitly (``--tokenizer-mode mock``); it is not any model's tokenizer
and its ids are not in a real vocabulary. Deployments use the served model's
tokenizer (modes auto/hf/slow/mistral).

It is not a real BPE: text is split into pieces (a word or a punctuation mark with
the whitespace before it, or a run of whitespace), and each piece gets a stable id.
Pieces from a small built-in vocabulary get small fixed ids, so the mock worker can
generate readable text; any other piece gets ``VOCAB_BASE + blake2b(piece) mod
HASHED_SPACE``. Ids depend only on the piece text, so two processes in mock mode agree on them.

``decode`` of a hashed id uses a per-process reverse table filled by ``encode``; an
id never seen by this process decodes to ``" <id>"`` so the output stays readable.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pdserve.tokenization.base import ChatOptions, ChatTemplateError, ModelTokenizer, check_chat_args

# Special tokens of the one chat template (Llama-3 style markers).
BOS = "<|begin_of_text|>"
EOT = "<|eot_id|>"
START_HEADER = "<|start_header_id|>"
END_HEADER = "<|end_header_id|>"
SPECIAL_TOKENS: dict[str, int] = {BOS: 1, EOT: 2, START_HEADER: 3, END_HEADER: 4}
BOS_ID = SPECIAL_TOKENS[BOS]
EOS_ID = SPECIAL_TOKENS[EOT]
_SPECIAL_BY_ID = {v: k for k, v in SPECIAL_TOKENS.items()}

# Words the mock worker samples its output from; id = WORDS_BASE + index.
_WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her she there been one all we their has would when if so no will "
    "more can its some time than only into other these two may then first any like very could "
    "new now way also made after over did many before must through back years where much your "
    "well down should because each just those people how too little state good make world still "
    "own see men work long get here between both life being under never day same another know "
    "while last might us great old year off come since against go came right used take three "
    "model token cache prefill decode request server latency memory block router batch stream "
    "queue engine worker value system data result light water river city small large open "
    "green quiet simple clear early late bright house road story music paper field signal"
).split()
WORDS_BASE = 16
VOCAB_BASE = 1024  # first id of the hashed space; everything below is fixed
HASHED_SPACE = (1 << 31) - VOCAB_BASE  # ids fit in int32; collisions are negligible
VOCAB_SIZE = VOCAB_BASE + HASHED_SPACE
WORD_IDS: tuple[int, ...] = tuple(WORDS_BASE + i for i in range(len(_WORDS)))

_FIXED_PIECES: dict[str, int] = {}
for _i, _w in enumerate(_WORDS):
    _FIXED_PIECES[" " + _w] = WORDS_BASE + _i
_PUNCT = [".", ",", "!", "?", ":", ";", "\n", "\n\n", " "]
for _j, _p in enumerate(_PUNCT):
    _FIXED_PIECES[_p] = WORDS_BASE + len(_WORDS) + _j
PUNCT_IDS: dict[str, int] = {p: _FIXED_PIECES[p] for p in _PUNCT}
_FIXED_BY_ID: dict[int, str] = {v: k for k, v in _FIXED_PIECES.items()}
assert WORDS_BASE + len(_FIXED_PIECES) < VOCAB_BASE

_SPECIAL_RE = "|".join(re.escape(s) for s in SPECIAL_TOKENS)
# A special token, or optional leading spaces + a word / one symbol, or whitespace.
_PIECE_RE = re.compile(rf"{_SPECIAL_RE}| ?[^\W_]+| ?[^\s\w]|_+|\s+", re.UNICODE)

_reverse: dict[int, str] = {}
_REVERSE_LIMIT = 1 << 20  # bound memory for long-lived processes


def _hashed_id(piece: str) -> int:
    digest = hashlib.blake2b(piece.encode("utf-8"), digest_size=8).digest()
    return VOCAB_BASE + int.from_bytes(digest, "big") % HASHED_SPACE


# piece -> id for every piece seen (special and fixed pieces pre-filled); bounded like _reverse.
_ids: dict[str, int] = {**SPECIAL_TOKENS, **_FIXED_PIECES}


def _piece_id(piece: str) -> int:
    tid = _ids.get(piece)
    if tid is not None:
        return tid
    tid = _hashed_id(piece)
    if len(_reverse) < _REVERSE_LIMIT:
        _reverse.setdefault(tid, piece)
        _ids[piece] = tid
    return tid


def encode(text: str) -> list[int]:
    """Token ids of ``text``; the same text gives the same ids in every process."""
    if not isinstance(text, str):
        raise TypeError(f"encode expects str, got {type(text).__name__}")
    ids = _ids
    return [ids.get(p) or _piece_id(p) for p in _PIECE_RE.findall(text)]


def id_to_piece(tid: int) -> str:
    piece = _FIXED_BY_ID.get(tid)
    if piece is not None:
        return piece
    piece = _SPECIAL_BY_ID.get(tid)
    if piece is not None:
        return piece
    return _reverse.get(tid, f" <{tid}>")


def decode(ids: Iterable[int], skip_special_tokens: bool = True) -> str:
    """Text of ``ids``; special tokens are dropped unless ``skip_special_tokens=False``."""
    parts = []
    for tid in ids:
        if skip_special_tokens and tid in _SPECIAL_BY_ID:
            continue
        parts.append(id_to_piece(tid))
    return "".join(parts)


def apply_chat_template(messages: Sequence[Mapping[str, object]], add_generation_prompt: bool = True) -> str:
    """The one chat template (Llama-3 layout). Content may be a string or OpenAI text parts."""
    check_chat_args(messages, add_generation_prompt, continue_final_message=False)  # a ChatTemplateError (ValueError)
    out = [BOS]
    for i, msg in enumerate(messages):
        role = msg["role"]
        out.append(f"{START_HEADER}{role}{END_HEADER}\n\n{_content_text(msg.get('content'), i)}{EOT}")
    if add_generation_prompt:
        out.append(f"{START_HEADER}assistant{END_HEADER}\n\n")
    return "".join(out)


def _content_text(content: object, index: int) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            else:
                raise ValueError(f"messages[{index}].content: only text parts are supported")
        return "".join(texts)
    raise ValueError(f"messages[{index}].content must be a string or a list of text parts")


class MockTokenizer(ModelTokenizer):
    """The module's functions behind the ``ModelTokenizer`` interface."""

    def __init__(self) -> None:
        self.name = "mock"
        self.mode = "mock"
        self.vocab_size = VOCAB_SIZE
        self.eos_token_id = EOS_ID

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        # No BOS is ever added: the mock worker's completions never had one.
        return encode(text)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return decode(ids, skip_special_tokens=skip_special_tokens)

    def _chat_ids(self, messages: Sequence[Mapping[str, Any]], opts: ChatOptions) -> list[int]:
        try:
            text = apply_chat_template(messages, add_generation_prompt=opts.add_generation_prompt)
        except ValueError as e:
            raise ChatTemplateError(str(e)) from e
        if opts.continue_final_message and text.endswith(EOT):
            text = text[: -len(EOT)]
        return self.encode(text, add_special_tokens=opts.add_special_tokens)
