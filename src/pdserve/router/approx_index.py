"""Approximate prefix index built from the router's own routing decisions (pure).

No KV events: when the router sends a prompt to a worker it assumes the worker now
caches that prompt's blocks, for ``ttl_s`` seconds since last use (a stand-in for the
worker's LRU eviction). Bounded to ``max_blocks`` block hashes, least recently used
first out.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Sequence


class ApproxPrefixIndex:
    def __init__(self, ttl_s: float = 120.0, max_blocks: int = 1_000_000) -> None:
        if ttl_s <= 0:
            raise ValueError(f"ttl_s must be positive, got {ttl_s}")
        if max_blocks <= 0:
            raise ValueError(f"max_blocks must be positive, got {max_blocks}")
        self.ttl_s = ttl_s
        self.max_blocks = max_blocks
        self._blocks: OrderedDict[Hashable, dict[str, float]] = OrderedDict()
        self._count: dict[str, int] = {}

    def record(self, worker_id: str, hashes: Iterable[Hashable], now: float) -> None:
        blocks = self._blocks
        count = self._count
        for h in hashes:
            entry = blocks.get(h)
            if entry is None:
                blocks[h] = {worker_id: now}
                count[worker_id] = count.get(worker_id, 0) + 1
            else:
                if worker_id not in entry:
                    count[worker_id] = count.get(worker_id, 0) + 1
                entry[worker_id] = now
                blocks.move_to_end(h)
        while len(blocks) > self.max_blocks:
            _, entry = blocks.popitem(last=False)
            for w in entry:
                count[w] -= 1

    def overlaps(self, hashes: Sequence[Hashable], worker_ids: Iterable[str], now: float) -> dict[str, int]:
        """Leading blocks of ``hashes`` each worker is believed to hold (omitted when 0)."""
        active = set(worker_ids)
        result: dict[str, int] = {}
        horizon = now - self.ttl_s if math.isfinite(self.ttl_s) else -math.inf
        depth = 0
        for h in hashes:
            if not active:
                break
            entry = self._blocks.get(h)
            if entry is None:
                alive: set[str] = set()
            else:
                alive = {w for w in active if w in entry and entry[w] >= horizon}
            if len(alive) != len(active):
                if depth:
                    for w in active - alive:
                        result[w] = depth
                active = alive
                if not active:
                    break
            depth += 1
        if depth:
            for w in active:
                result[w] = depth
        return result

    def size_of(self, worker_id: str) -> int:
        """Blocks attributed to the worker (including expired ones not yet evicted)."""
        return self._count.get(worker_id, 0)

    def forget_worker(self, worker_id: str) -> None:
        for entry in self._blocks.values():
            entry.pop(worker_id, None)
        self._count.pop(worker_id, None)

    def __len__(self) -> int:
        return len(self._blocks)
