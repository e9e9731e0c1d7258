"""KV cache events over ZMQ, encoded as the emulated vLLM version encodes them.

The structs below copy ``vllm/distributed/kv_events.py`` of each version field for
field (same msgspec options, so the bytes are vLLM's):

- 0.11.0: every event is ``array_like=True, tag=True``, i.e. a msgpack array whose first
  item is the class name: ``["BlockStored", block_hashes, parent_block_hash, token_ids,
  block_size, lora_id, medium]``, ``["BlockRemoved", block_hashes, medium]``,
  ``["AllBlocksCleared"]``.
- 0.33.0: events are tagged *maps* (``{"type": "BlockStored", ...}``) with
  ``omit_defaults=True``: ``lora_id``, ``medium`` and ``lora_name`` are always present,
  ``extra_keys`` (one entry per block), ``group_idx`` and ``kv_cache_spec_kind``
  whenever set (``BlockPool._build_block_stored_event`` sets the first two, and
  ``KVCacheManager.take_events`` the kind, "full_attention" for a plain decoder);
  ``BlockRemoved`` carries ``group_idx`` (``_emit_block_removed_events``).

Both wrap a step's events in ``EventBatch`` = ``[ts, events, data_parallel_rank]`` and
send multipart ``[topic, seq (8-byte big-endian), payload]`` (``ZmqEventPublisher``).
One evicted block is one ``BlockRemoved`` (``BlockPool._maybe_evict_cached_block``).
Hashes are vLLM's 64-bit int form. Like vLLM the PUB socket binds when the endpoint
contains ``*``, ``::``, ``ipc://`` or ``inproc://`` and connects otherwise, a ROUTER
socket serves replays of the last ``buffer_steps`` batches (request: the start
sequence as 8 bytes; replies ``[seq, payload]`` then ``[-1, b""]``), and a background
thread does all socket work so the serving loop never blocks on ZMQ.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections import deque
from typing import Any

import msgspec
import zmq
from pydantic import BaseModel, ConfigDict

from pdserve.worker.kvcache import KvEvents
from pdserve.worker.vllm_emulation import EventEncoding
from pdserve.worker.vllm_hash import event_extra_keys, to_external as _to_int

END_SEQ = (-1).to_bytes(8, "big", signed=True)
MEDIUM_GPU = "GPU"
KV_CACHE_SPEC_KIND = "full_attention"  # vllm/v1/kv_cache_interface.py KVCacheSpecKind.FULL_ATTENTION


class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):  # type: ignore[call-arg]
    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


# --- vLLM 0.11.0 ---------------------------------------------------------------
class _EventV011(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):  # type: ignore[call-arg]
    pass


class BlockStoredV011(_EventV011, tag="BlockStored"):  # type: ignore[call-arg]
    block_hashes: list[int | bytes]
    parent_block_hash: int | bytes | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None


class BlockRemovedV011(_EventV011, tag="BlockRemoved"):  # type: ignore[call-arg]
    block_hashes: list[int | bytes]
    medium: str | None


class AllBlocksClearedV011(_EventV011, tag="AllBlocksCleared"):  # type: ignore[call-arg]
    pass


# --- vLLM 0.33.0 ---------------------------------------------------------------
class _EventV033(msgspec.Struct, omit_defaults=True, gc=False, tag=True):  # type: ignore[call-arg]
    pass


class BlockStoredV033(_EventV033, tag="BlockStored"):  # type: ignore[call-arg]
    block_hashes: list[int | bytes]
    parent_block_hash: int | bytes | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[tuple[Any, ...] | None] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None
    locality: str | None = None
    ownership: str | None = None
    session_id: str | None = None
    lookahead_token_ids: list[list[int]] | None = None


class BlockRemovedV033(_EventV033, tag="BlockRemoved"):  # type: ignore[call-arg]
    block_hashes: list[int | bytes]
    medium: str | None
    group_idx: int | None = None
    locality: str | None = None
    ownership: str | None = None


class AllBlocksClearedV033(_EventV033, tag="AllBlocksCleared"):  # type: ignore[call-arg]
    pass


def use_int_block_hashes() -> bool:
    """vLLM's ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`` (envs.py, default 1 in 0.11 and 0.33): 0 publishes
    the raw digests (``maybe_convert_block_hash`` returns the bytes)."""
    return bool(int(os.environ.get("VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES", "1")))


def encode_events(events: KvEvents, block_size: int, encoding: EventEncoding = "map_tagged",
                  int_hashes: bool = True) -> list[Any]:
    """One engine step's events as the emulated version's structs, in vLLM's order."""
    to_external = _to_int if int_hashes else _to_bytes
    out: list[Any] = []
    v11 = encoding == "array_tagged"
    if events.cleared:
        out.append(AllBlocksClearedV011() if v11 else AllBlocksClearedV033())
    for h in events.removed:
        ext = [to_external(h)]
        out.append(BlockRemovedV011(ext, MEDIUM_GPU) if v11 else BlockRemovedV033(ext, MEDIUM_GPU, group_idx=0))
    for s in events.stored:
        hashes = [to_external(h) for h in s.block_hashes]
        parent = to_external(s.parent_block_hash) if s.parent_block_hash is not None else None
        if v11:
            out.append(BlockStoredV011(hashes, parent, s.token_ids, block_size, None, MEDIUM_GPU))
        else:
            out.append(BlockStoredV033(hashes, parent, s.token_ids, block_size, None, MEDIUM_GPU, None,
                                       extra_keys=[event_extra_keys(k) for k in s.extra_keys],
                                       group_idx=0, kv_cache_spec_kind=KV_CACHE_SPEC_KIND))
    return out


def encode_batch(ts: float, events: list[Any], data_parallel_rank: int | None = 0) -> bytes:
    """The ZMQ payload: msgspec's msgpack encoding of vLLM's ``KVEventBatch``."""
    return _ENCODER.encode(EventBatch(ts, events, data_parallel_rank))


_ENCODER = msgspec.msgpack.Encoder()


def _to_bytes(h: bytes) -> bytes:
    return h


class KVEventsConfig(BaseModel):
    """vLLM's ``--kv-events-config`` JSON."""

    model_config = ConfigDict(extra="forbid")
    enable_kv_cache_events: bool = False
    publisher: str | None = None
    endpoint: str = "tcp://*:5557"
    replay_endpoint: str | None = None
    buffer_steps: int = 10_000
    hwm: int = 100_000
    max_queue_size: int = 100_000
    topic: str = ""


class ZmqEventPublisher:
    SHUTDOWN_TIMEOUT = 1.0

    def __init__(self, config: KVEventsConfig, data_parallel_rank: int = 0,
                 encoding: EventEncoding = "map_tagged") -> None:
        self.config = config
        self.encoding: EventEncoding = encoding
        self.int_hashes = use_int_block_hashes()
        self._dp_rank = data_parallel_rank
        self._queue: queue.Queue[tuple[float, list[Any]] | None] = queue.Queue(config.max_queue_size)
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=config.buffer_steps)
        self._ctx = zmq.Context()
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.set_hwm(config.hwm)
        ep = config.endpoint
        if "*" in ep or "::" in ep or ep.startswith(("ipc://", "inproc://")):
            self._pub.bind(ep)
        else:
            self._pub.connect(ep)
        self.endpoint = self._pub.getsockopt_string(zmq.LAST_ENDPOINT)
        self._replay: zmq.Socket[bytes] | None = None
        if config.replay_endpoint:
            self._replay = self._ctx.socket(zmq.ROUTER)
            self._replay.bind(config.replay_endpoint)
        self._topic = config.topic.encode()
        self._seq = 0
        self._running = True
        self.published = 0
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name="kv-events", daemon=True)
        self._thread.start()

    def publish(self, events: list[Any], ts: float) -> None:
        """Queue one batch stamped ``ts`` (epoch seconds from the caller's clock; vLLM stamps batches with wall time)."""
        if not events or not self._running:
            return
        try:
            self._queue.put_nowait((ts, events))
        except queue.Full:
            self.dropped += 1

    def _run(self) -> None:
        while True:
            if self._replay is not None and self._replay.poll(0):
                self._serve_replay()
            try:
                item = self._queue.get(timeout=0.05)
            except queue.Empty:
                if not self._running:
                    break
                continue
            if item is None:
                break
            ts, events = item
            payload = encode_batch(ts, events, self._dp_rank)
            seq = self._seq
            self._seq += 1
            self._pub.send_multipart((self._topic, seq.to_bytes(8, "big"), payload))
            self._buffer.append((seq, payload))
            self.published += 1

    def _serve_replay(self) -> None:
        assert self._replay is not None
        frame = self._replay.recv_multipart()
        if len(frame) != 3:
            return
        client, _, start = frame
        start_seq = int.from_bytes(start, "big")
        for seq, buf in list(self._buffer):
            if seq >= start_seq:
                self._replay.send_multipart((client, b"", seq.to_bytes(8, "big"), buf))
        self._replay.send_multipart((client, b"", END_SEQ, b""))

    def shutdown(self) -> None:
        """Flush queued batches (bounded wait), then close the sockets."""
        if not self._running:
            return
        self._running = False
        deadline = time.monotonic() + self.SHUTDOWN_TIMEOUT
        while not self._queue.empty() and time.monotonic() < deadline:
            time.sleep(0.01)
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            pass
        self._thread.join(self.SHUTDOWN_TIMEOUT)
        self._pub.close(linger=200)
        if self._replay is not None:
            self._replay.close(linger=0)
        self._ctx.term()
