"""The router's own prefix-block keys (pure, no I/O).

The router does not reproduce vLLM's block hashes: vLLM's algorithm (``sha256`` over
pickle by default, ``sha256_cbor``, ``xxhash``...) and its NONE_HASH seed rule differ
between versions and deployments. Instead every key is computed *here*, from token
ids, the same way for both sides of a match:

- a worker's cached blocks, from the ``token_ids`` its ``BlockStored`` events carry
  (``KvIndex.apply`` chains them through the parent block);
- a request's prompt, from the model's token ids the router tokenized.

``key = blake2b-64(parent key, block token ids, extra keys)``, chained from block 0
(parent ``None``), one key per *full* block of ``block_size`` tokens. Extra keys are
vLLM's event form (0.33: per block, the LoRA name, multimodal ``(id, offset)`` pairs,
the ``cache_salt`` on the first block; 0.11: only ``lora_id``), so a salted or LoRA
prompt never matches a plain one.

Hashing a 2,000-token prompt is 125 blake2b calls; prompts repeat their prefixes
(system prompts, conversation history), so each (parent, block, extra) -> key result
is remembered in a bounded memo (cleared when full; hot prefixes are re-learned).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from typing import Any

Extra = tuple[Any, ...] | None


def _extra_bytes(extra: Extra) -> bytes:
    # repr of nested tuples of str/int/bytes/None is deterministic and unambiguous.
    return b"" if extra is None else repr(extra).encode()


def block_key(parent: int | None, tokens: Sequence[int], extra: Extra = None) -> int:
    """One block's key given its parent's key (``None`` for the first block)."""
    h = hashlib.blake2b(digest_size=8)
    h.update(b"\x00" * 8 if parent is None else b"\x01" + parent.to_bytes(8, "big"))
    h.update(struct.pack(f"<I{len(tokens)}q", len(tokens), *tokens))
    h.update(_extra_bytes(extra))
    return int.from_bytes(h.digest(), "big")


def freeze(value: Any) -> Any:
    """msgpack gives lists where vLLM had tuples: make extra keys hashable tuples again."""
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    return value


class BlockHasher:
    def __init__(self, block_size: int = 16, max_entries: int = 50_000) -> None:
        if block_size <= 0 or max_entries <= 0:
            raise ValueError(f"block_size and max_entries must be positive, got {block_size}, {max_entries}")
        self.block_size = block_size
        self.max_entries = max_entries
        self._memo: dict[tuple[int | None, tuple[int, ...], Extra], int] = {}
        self.hits = 0
        self.misses = 0

    def key(self, parent: int | None, block: tuple[int, ...], extra: Extra = None) -> int:
        memo_key = (parent, block, extra)
        k = self._memo.get(memo_key)
        if k is None:
            k = block_key(parent, block, extra)
            if len(self._memo) >= self.max_entries:
                self._memo.clear()
            self._memo[memo_key] = k
            self.misses += 1
        else:
            self.hits += 1
        return k

    def request_keys(self, token_ids: Sequence[int], *, cache_salt: str | None = None,
                     lora_name: str | None = None) -> list[int]:
        """Keys of every full block of a prompt, with vLLM's event extra keys for a
        LoRA adapter (every block) and a ``cache_salt`` (first block only)."""
        bs = self.block_size
        out: list[int] = []
        parent: int | None = None
        lora = (lora_name,) if lora_name else ()
        rest: Extra = lora or None
        full = len(token_ids) - len(token_ids) % bs
        for start in range(0, full, bs):
            extra = (lora + (cache_salt,) if cache_salt else rest) if start == 0 else rest
            parent = self.key(parent, tuple(token_ids[start : start + bs]), extra)
            out.append(parent)
        return out

    # The policies' historical name for the same thing (keys of a plain prompt).
    def external_hashes(self, token_ids: Sequence[int]) -> list[int]:
        return self.request_keys(token_ids)

    def __len__(self) -> int:
        return len(self._memo)
