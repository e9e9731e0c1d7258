"""Subscription to the workers' KV events (vLLM's ZMQ publisher) feeding a KvIndex.

Wire format (vLLM ``ZmqEventPublisher``, ``vllm/distributed/kv_events.py``): multipart
``[topic, seq (8-byte big-endian), msgpack(KVEventBatch)]`` with the batch
``[ts, [events], data_parallel_rank]`` (an array in every version). Events come as
vLLM 0.11's msgspec tagged arrays (``["BlockStored", block_hashes, parent_block_hash,
token_ids, block_size, lora_id, medium]``) or 0.33's tagged maps (``{"type":
"BlockStored", ..., "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind", ...}``,
defaults omitted). vLLM's hashes may be ints (``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES``)
or bytes; they only identify blocks for removal (see ``kv_index``), so bytes are
folded to 64 bits. Routing keys come from ``token_ids``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgpack
import zmq
import zmq.asyncio

from pdserve.router.core.kv_index import AllBlocksCleared, BlockRemoved, BlockStored, KvEvent, KvIndex

log = logging.getLogger("pdserve.router.shell.kv_events")
_MASK64 = (1 << 64) - 1


class KvEventFormatError(ValueError):
    pass


def _hash(h: Any) -> int:
    if isinstance(h, bool):
        raise KvEventFormatError(f"block hash must be int or bytes, got {h!r}")
    if isinstance(h, int):
        return h & _MASK64
    if isinstance(h, (bytes, bytearray)):
        return int.from_bytes(h, "big") & _MASK64
    raise KvEventFormatError(f"block hash must be int or bytes, got {type(h).__name__}")


def _hashes(v: Any) -> tuple[int, ...]:
    if not isinstance(v, (list, tuple)):
        raise KvEventFormatError(f"block_hashes must be a list, got {type(v).__name__}")
    return tuple(_hash(h) for h in v)


# Field order of vLLM's msgspec structs: 0.11 encodes events as tagged arrays
# (array_like=True, tag=True): ["BlockStored", *fields]; 0.33 as maps with a "type"
# tag and defaults omitted. Arrays longer than 0.11's carry 0.33's later fields.
_ARRAY_FIELDS = {
    "BlockStored": ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium",
                    "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window",
                    "locality", "ownership", "session_id", "lookahead_token_ids"),
    "BlockRemoved": ("block_hashes", "medium", "group_idx", "locality", "ownership"),
    "AllBlocksCleared": (),
}


def _opt(get: Any, name: str, typ: type) -> Any:
    v = get(name)
    if v is not None and (not isinstance(v, typ) or isinstance(v, bool)):
        raise KvEventFormatError(f"{name} must be {typ.__name__} or null, got {v!r}")
    return v


def parse_event(raw: Any) -> KvEvent:
    if isinstance(raw, Mapping):
        kind = raw.get("type")
        get = raw.get
    elif isinstance(raw, (list, tuple)) and raw and isinstance(raw[0], str):
        kind = raw[0]
        get = dict(zip(_ARRAY_FIELDS.get(kind, ()), raw[1:], strict=False)).get
    else:
        raise KvEventFormatError(f"KV event must be a map or a tagged array, got {raw!r}")
    if kind == "BlockStored":
        parent = get("parent_block_hash")
        tokens = get("token_ids") or ()
        if not isinstance(tokens, (list, tuple)) or not all(isinstance(t, int) for t in tokens):
            raise KvEventFormatError("token_ids must be a list of ints")
        block_size = get("block_size")
        if not isinstance(block_size, int) or isinstance(block_size, bool) or block_size <= 0:
            raise KvEventFormatError(f"block_size must be a positive int, got {block_size!r}")
        extra = get("extra_keys")
        if extra is not None and not isinstance(extra, (list, tuple)):
            raise KvEventFormatError("extra_keys must be a list (one entry per block) or null")
        return BlockStored(
            block_hashes=_hashes(get("block_hashes")),
            parent_block_hash=None if parent is None else _hash(parent),
            token_ids=tuple(tokens),
            block_size=block_size,
            lora_id=_opt(get, "lora_id", int),
            medium=_opt(get, "medium", str),
            lora_name=_opt(get, "lora_name", str),
            extra_keys=None if extra is None else tuple(extra),
            group_idx=_opt(get, "group_idx", int),
            kv_cache_spec_kind=_opt(get, "kv_cache_spec_kind", str),
        )
    if kind == "BlockRemoved":
        return BlockRemoved(block_hashes=_hashes(get("block_hashes")), medium=_opt(get, "medium", str),
                            group_idx=_opt(get, "group_idx", int))
    if kind == "AllBlocksCleared":
        return AllBlocksCleared()
    raise KvEventFormatError(f"unknown KV event type {kind!r}")


def parse_message(frames: Sequence[bytes]) -> tuple[int, list[KvEvent]]:
    """(sequence number, events) from one multipart message."""
    if len(frames) != 3:
        raise KvEventFormatError(f"expected 3 frames [topic, seq, payload], got {len(frames)}")
    _, seq_b, payload = frames
    if len(seq_b) != 8:
        raise KvEventFormatError(f"sequence frame must be 8 bytes, got {len(seq_b)}")
    try:
        batch = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except (ValueError, msgpack.ExtraData) as e:
        raise KvEventFormatError(f"payload is not msgpack: {e}") from e
    if isinstance(batch, Mapping):
        events = batch.get("events")
    elif isinstance(batch, (list, tuple)) and len(batch) >= 2:
        events = batch[1]
    else:
        raise KvEventFormatError(f"batch must be [ts, events, dp_rank], got {batch!r}")
    if not isinstance(events, (list, tuple)):
        raise KvEventFormatError("batch events must be a list")
    return int.from_bytes(seq_b, "big"), [parse_event(e) for e in events]


class KvEventSubscriber:
    """One SUB socket per worker; events land in the shared index under the
    worker's id (its base URL)."""

    def __init__(self, index: KvIndex, on_event: Callable[[str, int], None] | None = None) -> None:
        self.index = index
        self.ctx = zmq.asyncio.Context.instance()
        self._tasks: dict[str, tuple[str, asyncio.Task[None]]] = {}
        self.on_event = on_event  # (worker_id, n_events) for metrics
        self.gaps = 0
        self.errors = 0

    def sync(self, endpoints: Mapping[str, str]) -> None:
        """Subscribe to exactly these {worker_id: tcp address}."""
        for wid in list(self._tasks):
            addr, task = self._tasks[wid]
            if endpoints.get(wid) != addr:
                task.cancel()
                del self._tasks[wid]
                self.index.remove_worker(wid)
        for wid, addr in endpoints.items():
            if wid not in self._tasks:
                self._tasks[wid] = (addr, asyncio.get_running_loop().create_task(self._consume(wid, addr)))

    async def _consume(self, wid: str, addr: str) -> None:
        sock = self.ctx.socket(zmq.SUB)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SUBSCRIBE, b"")
        sock.connect(addr)
        last_seq: int | None = None
        try:
            while True:
                frames = await sock.recv_multipart()
                try:
                    seq, events = parse_message(frames)
                except KvEventFormatError as e:
                    self.errors += 1
                    log.warning("bad KV event message from %s: %s", wid, e)
                    continue
                if last_seq is not None and seq != last_seq + 1:
                    # Missed events: the index may hold stale blocks until they are
                    # re-stored or removed; routing only gets less precise.
                    self.gaps += 1
                last_seq = seq
                for ev in events:
                    self.index.apply(wid, ev)
                if self.on_event:
                    self.on_event(wid, len(events))
        finally:
            sock.close(0)

    async def close(self) -> None:
        for _, task in self._tasks.values():
            task.cancel()
        for _, task in self._tasks.values():
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        self._tasks.clear()
