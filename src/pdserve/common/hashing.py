"""vLLM v1 prefix-cache block hashing, bit for bit.

vLLM (``vllm/v1/core/kv_cache_utils.py``, ``vllm/utils/hashing.py``) hashes each
full block of ``block_size`` tokens as::

    sha256_cbor((parent_block_hash or NONE_HASH, tuple(block_token_ids), extra_keys))

with ``sha256_cbor(x) = sha256(cbor2.dumps(x, canonical=True)).digest()``. The
chain's root ``NONE_HASH`` comes from ``init_none_hash``: ``sha256_cbor(os.environ
["PYTHONHASHSEED"])`` (the env var's *string*) when the variable is set, and 32
random bytes when it is not.

Random roots would make the mock workers' hashes unpredictable to the router, so
here an unset PYTHONHASHSEED falls back to the fixed seed ``"0"``: the root equals
what vLLM computes when run with ``PYTHONHASHSEED=0``. Deployments of real vLLM
next to pdserve's router therefore set ``PYTHONHASHSEED=0`` (the operator does), and
both sides agree. A set PYTHONHASHSEED is honoured exactly like vLLM does.

KV events carry vLLM's 64-bit integer form of a hash (``maybe_convert_block_hash``
with ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES``): the digest read as a big-endian
integer, masked to 64 bits, i.e. its last 8 bytes.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from typing import Any

import cbor2

# The seed used when PYTHONHASHSEED is unset (vLLM would pick random bytes).
DEFAULT_HASH_SEED = "0"
DEFAULT_BLOCK_SIZE = 16
_MASK64 = (1 << 64) - 1


def sha256_cbor(obj: Any) -> bytes:
    """vLLM's ``sha256_cbor``: SHA-256 of the canonical CBOR encoding of ``obj``."""
    return hashlib.sha256(cbor2.dumps(obj, canonical=True)).digest()


def make_none_hash(seed: str | None = None) -> bytes:
    """The chain root for a given PYTHONHASHSEED value (``None`` = the fixed default)."""
    return sha256_cbor(DEFAULT_HASH_SEED if seed is None else seed)


NONE_HASH: bytes = make_none_hash(os.environ.get("PYTHONHASHSEED"))


def hash_block_tokens(
    parent: bytes | None,
    tokens: Sequence[int],
    extra_keys: tuple[Any, ...] | None = None,
) -> bytes:
    """Hash one block given its parent's hash (``None`` for the first block)."""
    # vLLM tests `if not parent_block_hash`, so an empty parent also means the root.
    return sha256_cbor((parent or NONE_HASH, tuple(tokens), extra_keys))


def block_hashes(
    token_ids: Sequence[int],
    block_size: int = DEFAULT_BLOCK_SIZE,
    extra_keys: tuple[Any, ...] | None = None,
    parent: bytes | None = None,
) -> list[bytes]:
    """Chained hashes of every *full* block of ``token_ids`` (a partial tail is skipped)."""
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    out: list[bytes] = []
    prev = parent
    full = len(token_ids) - len(token_ids) % block_size
    for start in range(0, full, block_size):
        prev = hash_block_tokens(prev, token_ids[start : start + block_size], extra_keys)
        out.append(prev)
    return out


def extend_block_hashes(
    existing: list[bytes],
    token_ids: Sequence[int],
    block_size: int = DEFAULT_BLOCK_SIZE,
    extra_keys: tuple[Any, ...] | None = None,
) -> list[bytes]:
    """Append hashes for blocks that became full since ``existing`` was computed (in place)."""
    n_full = len(token_ids) // block_size
    prev = existing[-1] if existing else None
    for i in range(len(existing), n_full):
        prev = hash_block_tokens(prev, token_ids[i * block_size : (i + 1) * block_size], extra_keys)
        existing.append(prev)
    return existing


def to_external(h: bytes) -> int:
    """vLLM's 64-bit int form of a block hash, as sent in KV events."""
    return int.from_bytes(h, byteorder="big") & _MASK64
