"""Precise prefix index fed by the workers' KV events (pure, no I/O).

Keys are the router's own (``block_hasher``): each ``BlockStored`` event's
``token_ids`` are re-keyed block by block, chained through the parent block, so the
index does not depend on vLLM's hash algorithm or seed. vLLM's block hashes are kept
only per worker, as a map ``(group, medium, vLLM hash) -> router key``, to find a
stored block's parent and to apply ``BlockRemoved`` / ``AllBlocksCleared``.

- A block held in several media (GPU, CPU offload) or KV groups, or cached twice (vLLM's
  block pool does not de-duplicate identical blocks; each copy is stored and removed
  under the same hash), counts once per copy: the worker holds the key until its last
  copy is removed. vLLM 0.33's opt-in ``kv_cache_report_mode="full"`` re-reports
  prefix hits as BlockStored without a matching removal; under it keys can outlive
  their blocks (the default, "incremental", reports each copy once).
- Only full-attention groups are indexed (``kv_cache_spec_kind`` absent or not a
  sliding-window/mamba kind): a sliding-window group cannot serve a long prefix. Its
  blocks are still mapped, so removals apply.
- An event whose ``block_size`` differs from the router's ``--block-size`` cannot be
  keyed compatibly with requests: it is counted in ``skipped_block_size`` and ignored
  (pools must run one block size, which the router is told).
- A block whose parent is unknown (events lost) is mapped but not indexed
  (``orphans``), as are its descendants: routing only gets less precise.
- Partial blocks (fewer than ``block_size`` tokens) are not indexed.

Maps each router key to the set of workers holding it, as a bitmask over worker
slots, so matching a prompt is one dict lookup and one AND per block, walking the
prefix chain until no candidate worker has the next block.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pdserve.router.core.block_hasher import BlockHasher, freeze


@dataclass(frozen=True, slots=True)
class BlockStored:
    block_hashes: tuple[Hashable, ...]
    parent_block_hash: Hashable | None = None
    token_ids: tuple[int, ...] = ()
    block_size: int = 16
    lora_id: int | None = None
    medium: str | None = None
    lora_name: str | None = None
    extra_keys: tuple[Any, ...] | None = None  # one entry (tuple or None) per block (vLLM >= 0.1x)
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    block_hashes: tuple[Hashable, ...]
    medium: str | None = None
    group_idx: int | None = None


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    pass


KvEvent = BlockStored | BlockRemoved | AllBlocksCleared
_NOT_INDEXED_KINDS = ("sliding", "chunked_local", "mamba", "cross_attention", "encoder_only")


def _bits(mask: int) -> Iterable[int]:
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


@dataclass
class _WorkerBlocks:
    """vLLM's hashes of one worker -> router keys, and how many copies hold each key."""

    # (group, medium, vLLM hash) -> [router key or None, copies, indexed]
    entries: dict[tuple[int, str | None, Hashable], list[Any]] = field(default_factory=dict)
    refs: dict[int, int] = field(default_factory=dict)
    media: set[str | None] = field(default_factory=set)
    lora_names: set[str] = field(default_factory=set)


class KvIndex:
    def __init__(self, hasher: BlockHasher | None = None) -> None:
        self.hasher = hasher if hasher is not None else BlockHasher()
        self._blocks: dict[Hashable, int] = {}
        self._slot_of: dict[str, int] = {}
        self._worker_at: list[str | None] = []
        self._owned: list[set[Hashable]] = []
        self._all_mask = 0
        self._vllm: dict[str, _WorkerBlocks] = {}
        self.lora_names: set[str] = set()
        self.events_applied = 0
        self.orphans = 0
        self.skipped_block_size = 0
        # The candidate list is usually the same pool call after call: cache its mask.
        self._mask_key: tuple[str, ...] = ()
        self._mask_val = 0

    @property
    def block_size(self) -> int:
        return self.hasher.block_size

    def request_keys(self, token_ids: Sequence[int], *, cache_salt: str | None = None,
                     model: str | None = None) -> list[int]:
        """Keys of a prompt's full blocks. ``model`` selects LoRA extra keys when a
        worker reported blocks under that adapter name (vLLM's ``lora_name``)."""
        lora = model if model is not None and model in self.lora_names else None
        return self.hasher.request_keys(token_ids, cache_salt=cache_salt, lora_name=lora)

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
            self._stored(worker_id, event)
        elif isinstance(event, BlockRemoved):
            self._removed(worker_id, event)
        elif isinstance(event, AllBlocksCleared):
            self.clear(worker_id)
        else:
            raise TypeError(f"unknown KV event {event!r}")

    def _stored(self, worker_id: str, ev: BlockStored) -> None:
        wb = self._vllm.setdefault(worker_id, _WorkerBlocks())
        bs = self.hasher.block_size
        group, medium = ev.group_idx or 0, ev.medium  # 0.11 names no group: its only one
        wb.media.add(medium)
        if ev.block_size != bs:
            self.skipped_block_size += 1
            return
        kind = (ev.kv_cache_spec_kind or "").lower()
        indexed = not any(k in kind for k in _NOT_INDEXED_KINDS)
        if ev.lora_name:
            wb.lora_names.add(ev.lora_name)
            self.lora_names.add(ev.lora_name)
        parent: int | None = None
        ok = True
        if ev.parent_block_hash is not None:
            found = wb.entries.get((group, medium, ev.parent_block_hash))
            if found is None:  # the parent may be held in another medium
                found = next((wb.entries[k] for m in wb.media
                              if (k := (group, m, ev.parent_block_hash)) in wb.entries), None)
            if found is None:
                self.orphans += 1
            parent = found[0] if found is not None else None
            ok = parent is not None
        tokens = ev.token_ids
        extras = ev.extra_keys
        new_keys: list[int] = []
        for i, vh in enumerate(ev.block_hashes):
            entry = (group, medium, vh)
            known = wb.entries.get(entry)
            if known is not None:
                # vLLM caches identical blocks more than once (no de-duplication in its block
                # pool) and removes each copy by the same hash: count copies.
                known[1] += 1
                key = known[0]
                ok, parent = key is not None, key
            else:
                block = tuple(tokens[i * bs : (i + 1) * bs])
                if ok and len(block) == bs:
                    if extras is not None and i < len(extras):
                        extra = freeze(extras[i])
                    elif ev.lora_id is not None and not ev.lora_name:
                        extra = ("lora_id", ev.lora_id)  # vLLM 0.11 events name no adapter
                    else:
                        extra = None
                    parent = self.hasher.key(parent, block, extra)
                    key = parent
                else:
                    ok, parent, key = False, None, None
                wb.entries[entry] = [key, 1, indexed]
            if indexed and key is not None:
                n = wb.refs.get(key, 0)
                wb.refs[key] = n + 1
                if n == 0:
                    new_keys.append(key)
        if new_keys:
            self.store(worker_id, new_keys)

    def _removed(self, worker_id: str, ev: BlockRemoved) -> None:
        wb = self._vllm.get(worker_id)
        if wb is None:
            return
        gone: list[int] = []
        for vh in ev.block_hashes:
            entry = (ev.group_idx or 0, ev.medium, vh)
            known = wb.entries.get(entry)
            if known is None:
                continue
            key, copies, indexed = known
            if copies > 1:
                known[1] = copies - 1
            else:
                del wb.entries[entry]
            if not indexed or key is None:
                continue
            n = wb.refs.get(key, 0) - 1
            if n > 0:
                wb.refs[key] = n
            else:
                wb.refs.pop(key, None)
                gone.append(key)
        if gone:
            self.remove(worker_id, gone)

    def store(self, worker_id: str, hashes: Iterable[Hashable]) -> None:
        """Mark router keys as held by a worker (events go through ``apply``)."""
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
        self._vllm.pop(worker_id, None)
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
