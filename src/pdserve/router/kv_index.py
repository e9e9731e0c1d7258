"""Precise prefix index fed by the workers' KV events (pure, no I/O).

Maps each block hash (vLLM's 64-bit external form) to the set of workers holding it,
as a bitmask over worker slots, so matching a prompt is one dict lookup and one AND
per block, walking the prefix chain until no candidate worker has the next block.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BlockStored:
    block_hashes: tuple[Hashable, ...]
    parent_block_hash: Hashable | None = None
    token_ids: tuple[int, ...] = ()
    block_size: int = 16
    lora_id: int | None = None
    medium: str | None = None


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    block_hashes: tuple[Hashable, ...]
    medium: str | None = None


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    pass


KvEvent = BlockStored | BlockRemoved | AllBlocksCleared


def _bits(mask: int) -> Iterable[int]:
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


class KvIndex:
    def __init__(self) -> None:
        self._blocks: dict[Hashable, int] = {}
        self._slot_of: dict[str, int] = {}
        self._worker_at: list[str | None] = []
        self._owned: list[set[Hashable]] = []
        self._all_mask = 0
        self.events_applied = 0
        # The candidate list is usually the same pool call after call: cache its mask.
        self._mask_key: tuple[str, ...] = ()
        self._mask_val = 0

    # ---- updates -------------------------------------------------------------
    def _slot(self, worker_id: str) -> int:
        slot = self._slot_of.get(worker_id)
        if slot is not None:
            return slot
        try:
            slot = self._worker_at.index(None)
            self._worker_at[slot] = worker_id
            self._owned[slot] = set()
        except ValueError:
            slot = len(self._worker_at)
            self._worker_at.append(worker_id)
            self._owned.append(set())
        self._slot_of[worker_id] = slot
        self._all_mask |= 1 << slot
        self._mask_key = ()
        return slot

    def apply(self, worker_id: str, event: KvEvent) -> None:
        self.events_applied += 1
        if isinstance(event, BlockStored):
            self.store(worker_id, event.block_hashes)
        elif isinstance(event, BlockRemoved):
            self.remove(worker_id, event.block_hashes)
        elif isinstance(event, AllBlocksCleared):
            self.clear(worker_id)
        else:
            raise TypeError(f"unknown KV event {event!r}")

    def store(self, worker_id: str, hashes: Iterable[Hashable]) -> None:
        slot = self._slot(worker_id)
        bit = 1 << slot
        owned = self._owned[slot]
        blocks = self._blocks
        for h in hashes:
            blocks[h] = blocks.get(h, 0) | bit
            owned.add(h)

    def remove(self, worker_id: str, hashes: Iterable[Hashable]) -> None:
        slot = self._slot_of.get(worker_id)
        if slot is None:
            return
        keep = ~(1 << slot)
        owned = self._owned[slot]
        blocks = self._blocks
        for h in hashes:
            if h in owned:
                owned.discard(h)
                m = blocks[h] & keep
                if m:
                    blocks[h] = m
                else:
                    del blocks[h]

    def clear(self, worker_id: str) -> None:
        slot = self._slot_of.get(worker_id)
        if slot is not None:
            self.remove(worker_id, list(self._owned[slot]))

    def remove_worker(self, worker_id: str) -> None:
        slot = self._slot_of.get(worker_id)
        if slot is None:
            return
        self.clear(worker_id)
        del self._slot_of[worker_id]
        self._worker_at[slot] = None
        self._all_mask &= ~(1 << slot)
        self._mask_key = ()

    # ---- queries -------------------------------------------------------------
    def overlaps(self, hashes: Sequence[Hashable], worker_ids: Iterable[str] | None = None) -> dict[str, int]:
        """Leading blocks of ``hashes`` each worker holds; workers with none are omitted."""
        if worker_ids is None:
            active = self._all_mask
        else:
            key = tuple(worker_ids)
            if key == self._mask_key:
                active = self._mask_val
            else:
                active = 0
                for w in key:
                    slot = self._slot_of.get(w)
                    if slot is not None:
                        active |= 1 << slot
                self._mask_key, self._mask_val = key, active
        result: dict[str, int] = {}
        blocks = self._blocks
        depth = 0
        for h in hashes:
            if not active:
                break
            m = blocks.get(h, 0) & active
            if m != active:
                if depth:
                    for slot in _bits(active & ~m):
                        result[self._worker_at[slot]] = depth  # type: ignore[index]
                active = m
                if not active:
                    break
            depth += 1
        if depth:
            for slot in _bits(active):
                result[self._worker_at[slot]] = depth  # type: ignore[index]
        return result

    def holders(self, block_hash: Hashable) -> set[str]:
        return {self._worker_at[s] for s in _bits(self._blocks.get(block_hash, 0))}  # type: ignore[misc]

    def blocks_of(self, worker_id: str) -> int:
        slot = self._slot_of.get(worker_id)
        return 0 if slot is None else len(self._owned[slot])

    @property
    def workers(self) -> list[str]:
        return sorted(self._slot_of)

    def __len__(self) -> int:
        return len(self._blocks)
