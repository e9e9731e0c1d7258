"""vLLM prefix block hashes for routing, memoised across requests (pure, no I/O).

Hashing a 2,000-token prompt (125 sha256-over-CBOR blocks) costs about 1 ms of router
CPU per request. Prompts repeat their prefixes (system prompts, conversation history),
so each (parent hash, block tokens) -> hash result is remembered; a repeated block then
costs a dict lookup instead of a CBOR encode and a sha256. The table is bounded and
simply cleared when full (recent prefixes are re-learned on their next use).
"""

from __future__ import annotations

from collections.abc import Sequence

from pdserve.common.hashing import hash_block_tokens, to_external


class BlockHasher:
    def __init__(self, block_size: int = 16, max_entries: int = 50_000) -> None:
        if block_size <= 0 or max_entries <= 0:
            raise ValueError(f"block_size and max_entries must be positive, got {block_size}, {max_entries}")
        self.block_size = block_size
        self.max_entries = max_entries
        self._memo: dict[tuple[bytes | None, tuple[int, ...]], tuple[bytes, int]] = {}
        self.hits = 0
        self.misses = 0

    def external_hashes(self, token_ids: Sequence[int]) -> list[int]:
        """The 64-bit hashes (as KV events carry them) of every full block, in order."""
        bs = self.block_size
        memo = self._memo
        out: list[int] = []
        parent: bytes | None = None
        full = len(token_ids) - len(token_ids) % bs
        for start in range(0, full, bs):
            block = tuple(token_ids[start : start + bs])
            key = (parent, block)
            hit = memo.get(key)
            if hit is None:
                h = hash_block_tokens(parent, block)
                hit = (h, to_external(h))
                if len(memo) >= self.max_entries:
                    memo.clear()
                memo[key] = hit
                self.misses += 1
            else:
                self.hits += 1
            parent = hit[0]
            out.append(hit[1])
        return out

    def __len__(self) -> int:
        return len(self._memo)
