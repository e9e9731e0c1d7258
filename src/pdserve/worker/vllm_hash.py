"""vLLM's prefix-cache block hashes, per emulated version, algorithm and seed rule.

A block's hash is ``hash_fn((parent_hash or NONE_HASH, tuple(block_token_ids),
extra_keys))`` chained over full blocks (``vllm/v1/core/kv_cache_utils.py``:
``hash_block_tokens``, ``get_request_block_hasher``), with ``hash_fn`` one of
(``vllm/utils/hashing.py`` in 0.33, ``vllm/utils/__init__.py`` in 0.11):

- ``sha256``: SHA-256 of ``pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)`` (the default);
- ``sha256_cbor``: SHA-256 of ``cbor2.dumps(obj, canonical=True)``;
- ``xxhash`` / ``xxhash_cbor`` (0.33 only): ``xxh3_128_digest`` of the same two encodings.

The chain root ``NONE_HASH`` follows the version's ``init_none_hash`` (see
``vllm_emulation``): it may be random per process, exactly as in vLLM, so two mock
workers on vLLM's defaults can disagree on every hash; consumers key blocks by the
token ids in the events instead. KV events carry ``maybe_convert_block_hash``'s
64-bit int form (``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`` defaults to 1 in both versions).

Call ``block_hashes(token_ids, block_size, algo, version, seed_env)`` from a test to
compare with vLLM's own functions.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Callable, Sequence
from typing import Any

import cbor2

from pdserve.worker.vllm_emulation import (
    CRYPTO_HASH_ALGOS,
    CURRENT_VERSION,
    DEFAULT_NONE_HASH_SEED,
    VllmBehaviour,
    behaviour,
)

HashFn = Callable[[Any], bytes]
_MASK64 = (1 << 64) - 1


def sha256(obj: Any) -> bytes:
    return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def sha256_cbor(obj: Any) -> bytes:
    return hashlib.sha256(cbor2.dumps(obj, canonical=True)).digest()


def _xxh3_128(data: bytes) -> bytes:
    try:
        import xxhash
    except ImportError:  # vLLM keeps xxhash optional too, and fails the same way when asked for it
        raise ValueError("--prefix-caching-hash-algo xxhash needs the `xxhash` package (pip install xxhash)") from None
    return xxhash.xxh3_128_digest(data)


def xxhash_pickle(obj: Any) -> bytes:
    return _xxh3_128(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def xxhash_cbor(obj: Any) -> bytes:
    return _xxh3_128(cbor2.dumps(obj, canonical=True))


_HASH_FNS: dict[str, HashFn] = {
    "sha256": sha256, "sha256_cbor": sha256_cbor, "xxhash": xxhash_pickle, "xxhash_cbor": xxhash_cbor,
}


def hash_fn(algo: str, version: str = CURRENT_VERSION) -> HashFn:
    """vLLM's ``get_hash_fn_by_name`` for ``version``; refuses algorithms that version lacks."""
    b = behaviour(version)
    if algo not in b.hash_algos:
        raise ValueError(f"--prefix-caching-hash-algo {algo!r} is not in vLLM {b.version} "
                         f"(choose from {', '.join(b.hash_algos)})")
    return _HASH_FNS[algo]


def none_hash_seed(algo: str, version: str, seed_env: str | None) -> str | None:
    """The seed NONE_HASH is derived from, or None where vLLM uses ``os.urandom(32)`` directly (0.11)."""
    b = behaviour(version)
    if seed_env is not None:
        return seed_env
    if b.none_hash_rule == "seed_env_else_random":
        return None
    # 0.33 resolve_none_hash_seed: a random *seed string* for non-cryptographic algorithms.
    return DEFAULT_NONE_HASH_SEED if algo in CRYPTO_HASH_ALGOS else os.urandom(32).hex()


def none_hash(algo: str, version: str = CURRENT_VERSION, seed_env: str | None = None) -> bytes:
    """vLLM's ``init_none_hash`` result for this version, algorithm and PYTHONHASHSEED value."""
    fn = hash_fn(algo, version)
    seed = none_hash_seed(algo, version, seed_env)
    return os.urandom(32) if seed is None else fn(seed)


def is_reproducible(algo: str, version: str, seed_env: str | None) -> bool:
    """Whether two processes with these settings compute the same NONE_HASH."""
    return seed_env is not None or (behaviour(version).none_hash_rule == "seed_env_else_fixed_for_crypto"
                                    and algo in CRYPTO_HASH_ALGOS)


class BlockHasher:
    """One engine's hashing: the algorithm and the NONE_HASH it drew at start-up."""

    def __init__(self, algo: str = "sha256", version: str = CURRENT_VERSION, seed_env: str | None = None,
                 root: bytes | None = None) -> None:
        self.algo = algo
        self.version = version
        self.fn = hash_fn(algo, version)
        self.root = root if root is not None else none_hash(algo, version, seed_env)

    @classmethod
    def from_env(cls, algo: str, version: str) -> BlockHasher:
        """Seeded from this process's PYTHONHASHSEED, as vLLM's engine core is."""
        return cls(algo, version, os.environ.get("PYTHONHASHSEED"))

    def hash_block(self, parent: bytes | None, tokens: Sequence[int], extra_keys: tuple[Any, ...] | None = None
                   ) -> bytes:
        # vLLM tests `if not parent_block_hash`, so an empty parent also means the root.
        return self.fn((parent or self.root, tuple(tokens), extra_keys))

    def block_hashes(self, token_ids: Sequence[int], block_size: int, extra_keys: tuple[Any, ...] | None = None,
                     parent: bytes | None = None) -> list[bytes]:
        """Chained hashes of every full block of ``token_ids`` (a partial tail is not hashed)."""
        if block_size <= 0:
            raise ValueError(f"block_size must be positive, got {block_size}")
        out: list[bytes] = []
        prev = parent
        for start in range(0, len(token_ids) - block_size + 1, block_size):
            # Extra keys are per block in vLLM; the mock's only ones (cache_salt) sit on the request's
            # first block, so they apply when hashing starts at the root.
            first = start == 0 and parent is None
            prev = self.hash_block(prev, token_ids[start:start + block_size], extra_keys if first else None)
            out.append(prev)
        return out


def block_hashes(token_ids: Sequence[int], block_size: int = 16, algo: str = "sha256",
                 version: str = CURRENT_VERSION, seed_env: str | None = None,
                 extra_keys: tuple[Any, ...] | None = None) -> list[bytes]:
    """vLLM's block hashes of a request's full blocks (``extra_keys`` apply to the first block)."""
    return BlockHasher(algo, version, seed_env).block_hashes(token_ids, block_size, extra_keys)


def cache_salt_extra_keys(salt: str | None, version: str = CURRENT_VERSION) -> tuple[Any, ...] | None:
    """The first block's extra keys for a request's ``cache_salt`` (``generate_block_hash_extra_keys``)."""
    if not salt:
        return None
    b: VllmBehaviour = behaviour(version)
    return (("cache_salt", salt),) if b.cache_salt_extra_key == "tagged" else (salt,)


def event_extra_keys(extra_keys: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
    """0.33's ``to_event_extra_keys`` for one block: tagged keys are published untagged."""
    if extra_keys is None:
        return None
    return tuple(k[1:] if isinstance(k, tuple) and k[0] == "mm" else (k[1] if isinstance(k, tuple) else k)
                 for k in extra_keys)


def to_external(h: bytes) -> int:
    """``maybe_convert_block_hash``: the digest as a big-endian int, masked to 64 bits."""
    return int.from_bytes(h, byteorder="big") & _MASK64
