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
        blocks = self._blocks
        depth = 0
        for h in hashes:
            entry = blocks.get(h)
            if entry is None:
                break
            # Iterate the (usually 1-3) holders of this block, not all candidates.
            alive = {w for w, t in entry.items() if t >= horizon and w in active}
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


class RecentRoutes:
    """Which worker each block hash was last routed to, and when: a cheap,
    short-lived stand-in for KV events that have not arrived yet.

    One worker per block (the latest), plain dict, no LRU bookkeeping: recording a
    prompt costs one dict store per block. Stale entries are purged in bulk when
    the table outgrows ``max_blocks``.
    """

    def __init__(self, ttl_s: float = 10.0, max_blocks: int = 200_000) -> None:
        if ttl_s <= 0 or max_blocks <= 0:
            raise ValueError(f"ttl_s and max_blocks must be positive, got {ttl_s}, {max_blocks}")
        self.ttl_s = ttl_s
        self.max_blocks = max_blocks
        self._last: dict[Hashable, tuple[str, float]] = {}

    def record(self, worker_id: str, hashes: Iterable[Hashable], now: float) -> None:
        last = self._last
        mark = (worker_id, now)
        for h in hashes:
            last[h] = mark
        if len(last) > self.max_blocks:
            horizon = now - self.ttl_s
            self._last = {h: m for h, m in last.items() if m[1] >= horizon}
            if len(self._last) > self.max_blocks:
                self._last = {}

    def overlap(self, hashes: Sequence[Hashable], now: float) -> tuple[str | None, int]:
        """(worker, leading blocks) last routed together, or (None, 0)."""
        last = self._last
        horizon = now - self.ttl_s
        worker: str | None = None
        depth = 0
        for h in hashes:
            m = last.get(h)
            if m is None or m[1] < horizon or (worker is not None and m[0] != worker):
                break
            worker = m[0]
            depth += 1
        return worker, depth

    def forget_worker(self, worker_id: str) -> None:
        self._last = {h: m for h, m in self._last.items() if m[0] != worker_id}

    def __len__(self) -> int:
        return len(self._last)
