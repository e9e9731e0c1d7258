"""A vLLM-shaped chained block hash for the router's KV index and the simulator.

This is NOT what a vLLM worker computes by default: it is ``sha256_cbor`` (SHA-256 of
canonical CBOR) of ``(parent or NONE_HASH, tuple(block_tokens), extra_keys)`` with
``NONE_HASH = sha256_cbor(PYTHONHASHSEED or "0")``, i.e. vLLM's hash only for
``--prefix-caching-hash-algo sha256_cbor`` with ``PYTHONHASHSEED=0``. vLLM's defaults
(sha256 over pickle; a NONE_HASH that is random or "vllm-none-hash" depending on the
version) are emulated by the mock worker in ``pdserve.worker.vllm_hash``, so a consumer
of real KV events cannot rely on matching vLLM's hashes: the router is moving to its own
hash of the events' ``token_ids``. What remains here serves the router until then and the
simulator (which only needs a stable, collision-free chain).

KV events carry vLLM's 64-bit integer form of a hash: the digest read as a big-endian
integer, masked to 64 bits, i.e. its last 8 bytes (``to_external``).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from typing import Any

import cbor2

# The seed used when PYTHONHASHSEED is unset.
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
