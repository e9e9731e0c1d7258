"""Paged KV blocks with prefix caching and LRU eviction, after vLLM v1's BlockPool.

A block is *cached* once it is full and its hash registered; when its last user
frees it, it goes to the tail of the free queue but keeps its hash, so a later
request with the same prefix can take it back (a prefix hit). Allocation pops from
the head of the free queue, evicting the least recently freed cached block. The pool
records stored / removed hashes so the engine can publish vLLM's KV events.

Blocks that hold no reusable content (a prompt's partial last block, anything with caching
off) go to the *head* of the free queue when freed, so they are reused before any cached
block is evicted: vLLM 0.33's ``BlockPool.free_blocks`` (``prepend_n`` of the non-cached
blocks, ``append_n`` of the cached ones). vLLM 0.11 appends every freed block to the tail,
so there a partial block takes a cached block's LRU place (``uncached_first=False``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import islice


@dataclass(slots=True)
class StoredBlocks:
    """One vLLM ``BlockStored`` event: consecutive blocks of one request."""

    block_hashes: list[bytes]
    parent_block_hash: bytes | None
    token_ids: list[int]
    extra_keys: list[tuple[object, ...] | None]  # per block, as hashed


@dataclass(slots=True)
class KvEvents:
    stored: list[StoredBlocks] = field(default_factory=list)
    removed: list[bytes] = field(default_factory=list)
    cleared: bool = False


class BlockPool:
    """Fixed pool of ``num_blocks`` blocks; all operations are O(blocks touched)."""

    def __init__(self, num_blocks: int, enable_caching: bool = True, uncached_first: bool = True) -> None:
        if num_blocks <= 0:
            raise ValueError(f"num_blocks must be positive, got {num_blocks}")
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self.uncached_first = uncached_first
        self.ref_cnt = [0] * num_blocks
        self.block_hash: list[bytes | None] = [None] * num_blocks
        # Free blocks in eviction order (head = evicted first); values unused.
        self.free: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        # hash -> blocks holding that content (vLLM's BlockHashToBlockMap: two requests that computed
        # the same prefix concurrently both cache it); a prefix hit takes the first
        self.cached: dict[bytes, list[int]] = {}
        self.events = KvEvents()

    @property
    def num_free(self) -> int:
        return len(self.free)

    def usage(self) -> float:
        return 1.0 - len(self.free) / self.num_blocks

    def drain_events(self) -> KvEvents:
        ev, self.events = self.events, KvEvents([], [], False)  # positional: no default_factory calls
        return ev

    def find_prefix(self, hashes: Sequence[bytes], max_blocks: int) -> list[int]:
        """Block ids of the longest cached prefix of ``hashes`` (at most ``max_blocks``), not yet taken."""
        if not self.enable_caching:
            return []
        out: list[int] = []
        cached = self.cached
        for h in hashes[:max_blocks]:
            holders = cached.get(h)
            if holders is None:
                break
            out.append(holders[0])
        return out

    # The simulator moves every prompt's blocks through these (prefill and decode side, tens of blocks each),
    # so their loops bind what they use to locals.
    def touch(self, block_ids: Sequence[int]) -> None:
        """Take a reference on blocks found by ``find_prefix`` (removing free ones from the queue)."""
        ref_cnt = self.ref_cnt
        free = self.free
        for bid in block_ids:
            c = ref_cnt[bid]
            if c == 0:
                del free[bid]
            ref_cnt[bid] = c + 1

    def allocate(self, n: int) -> list[int]:
        """``n`` fresh blocks, evicting cached free blocks in LRU order. Caller checks ``num_free``."""
        free = self.free
        if n > len(free):
            raise RuntimeError(f"allocate({n}) with only {len(free)} free blocks")
        # the head of the queue read in C, then each block taken out (faster than a popitem per block)
        out = list(islice(free, n))
        ref_cnt = self.ref_cnt
        block_hash = self.block_hash
        cached = self.cached
        removed = self.events.removed
        for bid in out:
            del free[bid]
            ref_cnt[bid] = 1
            h = block_hash[bid]
            if h is not None:
                block_hash[bid] = None
                holders = cached.get(h)
                if holders is not None and bid in holders:
                    # vLLM's _maybe_evict_cached_block: one BlockRemoved per evicted block, even
                    # when another block still holds the same content
                    if len(holders) == 1:
                        del cached[h]
                    else:
                        holders.remove(bid)
                    removed.append(h)
        return out

    def free_blocks(self, block_ids: Sequence[int]) -> None:
        """Drop one reference from each block; tail blocks of a sequence are freed first so they
        are evicted before the shared prefix blocks (vLLM frees in reverse order). With
        ``uncached_first`` the freed blocks without a hash go to the head instead, in that order."""
        ref_cnt = self.ref_cnt
        free = self.free
        block_hash = self.block_hash if self.uncached_first else None
        front: list[int] | None = None
        for bid in reversed(block_ids):
            c = ref_cnt[bid] - 1
            ref_cnt[bid] = c
            if c == 0:
                free[bid] = None
                if block_hash is not None and block_hash[bid] is None:
                    if front is None:
                        front = []
                    front.append(bid)
        if front is not None:
            for bid in reversed(front):  # prepend_n: front[0] ends up at the head
                free.move_to_end(bid, last=False)

    def cache_blocks(
        self,
        block_ids: Sequence[int],
        hashes: Sequence[bytes],
        start: int,
        end: int,
        token_ids: Sequence[int],
        block_size: int,
        token_offset_blocks: int = 0,
        first_block_extra_keys: tuple[object, ...] | None = None,
    ) -> None:
        """Register blocks ``start..end-1`` of a request as full and reusable; emits one BlockStored.

        ``token_ids`` holds the request's tokens from block ``token_offset_blocks`` on. Like vLLM's
        ``BlockPool.cache_full_blocks`` every newly full block is registered and reported, also when
        another block already holds the same hash, so the event's hashes and tokens always line up."""
        if not self.enable_caching or end <= start:
            return
        new_hashes = hashes[start:end]
        if not isinstance(new_hashes, list):
            new_hashes = list(new_hashes)
        block_hash = self.block_hash
        cached = self.cached
        for h, bid in zip(new_hashes, block_ids[start:end]):
            block_hash[bid] = h
            holders = cached.get(h)
            if holders is None:
                cached[h] = [bid]
            elif bid not in holders:
                holders.append(bid)
        parent = hashes[start - 1] if start > 0 else None
        tokens = token_ids[(start - token_offset_blocks) * block_size : (end - token_offset_blocks) * block_size]
        extra: list[tuple[object, ...] | None] = [None] * (end - start)
        if start == 0:
            extra[0] = first_block_extra_keys
        # a list's slice is already a copy: copy only other sequences (the simulator caches long prompts)
        self.events.stored.append(StoredBlocks(new_hashes, parent,
                                               tokens if isinstance(tokens, list) else list(tokens), extra))

    def reset_prefix_cache(self) -> bool:
        """Forget every cached hash (vLLM's reset_prefix_cache); only when no block is in use."""
        if len(self.free) != self.num_blocks:
            return False
        self.cached.clear()
        self.block_hash = [None] * self.num_blocks
        self.events.cleared = True
        return True
