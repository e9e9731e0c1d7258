"""Synthetic prompts for trace requests: token ids and prefix-cache block keys.

Traces carry lengths, not text. Mooncake's ``hash_ids`` name 512-token prompt
blocks; equal ids must become identical token blocks so that they share prefix-cache
blocks. Requests without hash ids get a prompt nobody else shares.

Block keys stand in for vLLM's sha256 chain: the simulator only needs equality of
prefixes, and sha256-cbor over the Mooncake trace's ~6 M distinct 16-token blocks
would cost ~40 s alone. A key is Python's hash of ``(parent key, hash id, block
index)``: integer-tuple hashing does not depend on PYTHONHASHSEED, so keys are the
same in every process, and chaining the parent key makes a key identify its whole
prefix, exactly the property vLLM's hashes have.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import count
from typing import Any, cast, overload

from pdserve.sim.traces import TraceRequest
from pdserve.worker.vllm_hash import BlockHasher

VOCAB = 32000
_FIRST_ID = 1000  # keep clear of special ids (EOS and friends) at the bottom of the vocabulary
_ROOT = 0x5EED


def _unique_id(index: int) -> int:
    # Negative ids never collide with a trace's own (non-negative) hash ids; -2 as
    # the start also avoids CPython's hash(-1) == hash(-2).
    return -2 - index


def hash_id_of_token(req: TraceRequest, pos: int, hash_block_tokens: int) -> int:
    if req.hash_ids:
        return req.hash_ids[pos // hash_block_tokens]
    return _unique_id(req.index)


def block_keys(req: TraceRequest, block_size: int, hash_block_tokens: int = 512,
               interned: KeyIds | None = None) -> list[int]:
    """Keys of the prompt's full ``block_size``-token blocks, chained like prefix hashes (with ``interned``:
    as small ints, see ``KeyIds``)."""
    n_full = req.input_tokens // block_size
    keys: list[int] = []
    parent = _ROOT
    if req.hash_ids:
        ids = req.hash_ids
        if block_size == hash_block_tokens:  # Mooncake at its own granularity: block k is hash block k
            for k in range(n_full):
                hid = ids[k]
                parent = hash((parent, 0, hid, hid, k))
                keys.append(parent)
        else:
            for k in range(n_full):
                # A block that straddles two hash blocks depends on both ids.
                first = ids[(k * block_size) // hash_block_tokens]
                last = ids[((k + 1) * block_size - 1) // hash_block_tokens]
                parent = hash((parent, 0, first, last, k))
                keys.append(parent)
    else:
        uid = _unique_id(req.index)
        for k in range(n_full):
            parent = hash((parent, 1, uid, k))
            keys.append(parent)
    return keys if interned is None else interned.of(keys)


class KeyIds:
    """Block keys as small ints, one table for a whole replay: equal exactly where the keys are equal. A
    64-bit int key is rehashed digit by digit in every dict it meets (the engines' block pools, the router's
    index and views: ~25 lookups per block and side in a P/D replay); an int below 2**30 hashes to itself.
    Ids count up from 1 (0 is falsy, which the hashers take for the root); a key's first id is kept, so
    ids skip numbers but stay unique and the same in every run."""

    __slots__ = ("_ids", "_next")

    def __init__(self) -> None:
        self._ids: dict[int, int] = {}
        self._next = count(1)

    def of(self, keys: list[int]) -> list[int]:
        return list(map(self._ids.setdefault, keys, self._next))  # in C: no Python step per key


class KeyHasher(BlockHasher):
    """The engines' hashes of the blocks ``block_keys`` does not cover: a prompt's last, partial block once
    output tokens fill it, and the output's blocks. Keys chained like ``block_keys`` (Python's hash of the
    parent key and the block's tokens) instead of vLLM's sha256 over a pickle: the engine and the router only
    compare them, and the simulator's prompt keys are not vLLM hashes either. A pickle and a sha256 of 512
    token ids cost ~7x a tuple hash; no ``None`` goes into the tuple, whose hash in Python 3.11 depends
    on its address (so keys would differ between processes)."""

    def hash_block(self, parent: bytes | None, tokens: Sequence[int], extra_keys: tuple[Any, ...] | None = None
                   ) -> bytes:
        # as BlockHasher: no parent (or a falsy one) means the root
        key = (parent or _ROOT, 2, tuple(tokens)) if extra_keys is None else (parent or _ROOT, 3, tuple(tokens),
                                                                               extra_keys)
        return cast("bytes", hash(key))


def token_ids(req: TraceRequest, hash_block_tokens: int = 512) -> list[int]:
    """Deterministic prompt token ids; equal hash ids at equal offsets give equal tokens."""
    out = []
    for pos in range(req.input_tokens):
        hid = hash_id_of_token(req, pos, hash_block_tokens)
        off = pos % hash_block_tokens if req.hash_ids else pos
        out.append(_FIRST_ID + hash((hid, off)) % (VOCAB - _FIRST_ID))
    return out


class ZeroPrompt(Sequence[int]):
    """``n`` zero token ids without a list of them: what the simulator hands the engine as a prompt.

    The engine identifies prompt blocks by the keys the simulator supplies (``block_keys``),
    so the ids' values never matter; it reads only the length and, for a block the keys do
    not cover, a slice. Building and freeing ``[0] * n`` for every prompt (tens of thousands
    of tokens in Mooncake, on the prefill and the decode side) was ~10 % of a P/D replay.
    """

    __slots__ = ("_n",)

    def __init__(self, n: int) -> None:
        self._n = n

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> list[int]: ...
    def __getitem__(self, i: int | slice) -> int | list[int]:
        if isinstance(i, slice):
            return [0] * len(range(*i.indices(self._n)))
        if not -self._n <= i < self._n:
            raise IndexError("prompt index out of range")
        return 0

    def __add__(self, other: list[int]) -> list[int]:
        return [0] * self._n + other

    def __eq__(self, other: object) -> bool:
        return len(self) == len(other) and all(x == 0 for x in other) if isinstance(other, Sequence) else False

    def __hash__(self) -> int:
        return hash((ZeroPrompt, self._n))

    def __repr__(self) -> str:
        return f"ZeroPrompt({self._n})"
