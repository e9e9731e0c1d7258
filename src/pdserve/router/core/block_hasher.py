"""The router's own prefix-block keys (pure, no I/O).

The router does not reproduce vLLM's block hashes: vLLM's algorithm (``sha256`` over
pickle by default, ``sha256_cbor``, ``xxhash``...) and its NONE_HASH seed rule differ
between versions and deployments. Instead every key is computed *here*, from token
ids, the same way for both sides of a match:

- a worker's cached blocks, from the ``token_ids`` its ``BlockStored`` events carry
  (``KvIndex.apply`` chains them through the parent block, ``BlockHasher.key``);
- a request's prompt, from the model's token ids the router tokenized
  (``BlockHasher.request_keys``).

``key = blake2b-64(parent key, block token ids, extra keys)``, chained from block 0
(parent ``None``), one key per *full* block of ``block_size`` tokens. Extra keys are
vLLM's event form (0.33: per block, the LoRA name, multimodal ``(id, offset)`` pairs,
the ``cache_salt`` on the first block; 0.11: only ``lora_id``), so a salted or LoRA
prompt never matches a plain one.

Cost (the router hashes every prompt on its event loop): the prompt's ids are packed
to bytes with one ``struct.pack`` and each block is one blake2b call over a slice of
them, chained through the previous digest, about 1 µs a block. A memo of
(parent, block, extra) -> key was dropped: building its tuple key cost more than the
blake2b call it saved (bench/router/burst.py; 317-token prompts: 80 -> 20 µs).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from typing import Any

Extra = tuple[Any, ...] | None

_ROOT = b"\x00" * 8  # the parent field of block 0
_blake2b = hashlib.blake2b
_CHILD = _blake2b(b"\x01", digest_size=8)  # a later block's hash state after its first byte (copied, never updated)


def _extra_bytes(extra: Extra) -> bytes:
    # repr of nested tuples of str/int/bytes/None is deterministic and unambiguous.
    return b"" if extra is None else repr(extra).encode()


def _digest(parent: bytes, head: bytes, block: bytes, extra: bytes) -> bytes:
    """``parent``: ``_ROOT`` or b"\\x01" + the parent's 8-byte digest; ``head``: the block's
    token count (``<I``); ``block``: its ids as little-endian int64s."""
    return _blake2b(parent + head + block + extra, digest_size=8).digest()


def block_key(parent: int | None, tokens: Sequence[int], extra: Extra = None) -> int:
    """One block's key given its parent's key (``None`` for the first block)."""
    n = len(tokens)
    d = _digest(_ROOT if parent is None else b"\x01" + parent.to_bytes(8, "big"), struct.pack("<I", n),
                struct.pack(f"<{n}q", *tokens), _extra_bytes(extra))
    return int.from_bytes(d, "big")


def freeze(value: Any) -> Any:
    """msgpack gives lists where vLLM had tuples: make extra keys hashable tuples again."""
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    return value


class BlockHasher:
    def __init__(self, block_size: int = 16) -> None:
        if block_size <= 0:
            raise ValueError(f"block_size must be positive, got {block_size}")
        self.block_size = block_size
        self._head = struct.pack("<I", block_size)

    def key(self, parent: int | None, block: Sequence[int], extra: Extra = None) -> int:
        """A worker's block (from a KV event) given its parent's key."""
        return block_key(parent, block, extra)

    def request_keys(self, token_ids: Sequence[int], *, cache_salt: str | None = None,
                     lora_name: str | None = None) -> list[int]:
        """Keys of every full block of a prompt, with vLLM's event extra keys for a
        LoRA adapter (every block) and a ``cache_salt`` (first block only): the same
        values as chaining ``key`` block by block."""
        bs = self.block_size
        full = len(token_ids) - len(token_ids) % bs
        if not full:
            return []
        data = struct.pack(f"<{full}q", *token_ids[:full])
        lora = (lora_name,) if lora_name else ()
        rest = _extra_bytes(lora or None)
        first = _extra_bytes(lora + (cache_salt,)) if cache_salt else rest
        head, step = self._head, bs * 8
        d = _digest(_ROOT, head, data[:step], first)
        digests = [d]
        # Every later block's input starts with b"\x01": copying a hash state that holds it
        # skips blake2b's keyword parsing and set-up per block, and the keys come out of one
        # struct.unpack, not an int.from_bytes each (same bytes hashed, same keys; ~25 % of
        # this function's CPU for a 319-token prompt, numbers in the commit that made this).
        fresh = _CHILD.copy
        for off in range(step, full * 8, step):
            h = fresh()
            h.update(d + head + data[off : off + step] + rest)
            d = h.digest()
            digests.append(d)
        return list(struct.unpack(f">{len(digests)}Q", b"".join(digests)))
