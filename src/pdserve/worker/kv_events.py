"""KV cache events over ZMQ, framed like vLLM's ``ZmqEventPublisher``.

Wire format (vLLM >= 0.24, after vllm-project/vllm#42892 switched events to maps):
multipart ``[topic, seq (8-byte big-endian), payload]`` where ``payload`` is msgpack of
the positional batch ``[ts, [event, ...], data_parallel_rank]`` and each event is a map
tagged by ``type``::

    {"type": "BlockStored", "block_hashes": [int, ...], "parent_block_hash": int | None,
     "token_ids": [...], "block_size": 16, "lora_id": None, "medium": "GPU",
     "lora_name": None, "extra_keys": [None, ...], "group_idx": 0,
     "kv_cache_spec_kind": "full_attention"}
    {"type": "BlockRemoved", "block_hashes": [...], "medium": "GPU", "group_idx": 0}
    {"type": "AllBlocksCleared"}

Hashes are vLLM's 64-bit int form. Like vLLM the PUB socket binds when the endpoint
contains ``*``, ``::``, ``ipc://`` or ``inproc://`` and connects otherwise, a ROUTER
socket serves replays of the last ``buffer_steps`` batches (request: the start
sequence as 8 bytes; replies ``[seq, payload]`` then ``[-1, b""]``), and a background
thread does all socket work so the serving loop never blocks on ZMQ.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from typing import Any

import msgpack
import zmq
from pydantic import BaseModel, ConfigDict

from pdserve.common.hashing import to_external
from pdserve.worker.kvcache import KvEvents

END_SEQ = (-1).to_bytes(8, "big", signed=True)


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


def encode_events(events: KvEvents, block_size: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if events.cleared:
        out.append({"type": "AllBlocksCleared"})
    if events.removed:
        out.append({"type": "BlockRemoved", "block_hashes": [to_external(h) for h in events.removed],
                    "medium": "GPU", "group_idx": 0})
    for s in events.stored:
        out.append({
            "type": "BlockStored",
            "block_hashes": [to_external(h) for h in s.block_hashes],
            "parent_block_hash": to_external(s.parent_block_hash) if s.parent_block_hash is not None else None,
            "token_ids": s.token_ids,
            "block_size": block_size,
            "lora_id": None,
            "medium": "GPU",
            "lora_name": None,
            "extra_keys": [None] * len(s.block_hashes),
            "group_idx": 0,
            "kv_cache_spec_kind": "full_attention",
        })
    return out


class ZmqEventPublisher:
    SHUTDOWN_TIMEOUT = 1.0

    def __init__(self, config: KVEventsConfig, data_parallel_rank: int = 0) -> None:
        self.config = config
        self._dp_rank = data_parallel_rank
        self._queue: queue.Queue[tuple[float, list[dict[str, Any]]] | None] = queue.Queue(config.max_queue_size)
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

    def publish(self, events: list[dict[str, Any]], ts: float | None = None) -> None:
        if not events or not self._running:
            return
        try:
            self._queue.put_nowait((time.time() if ts is None else ts, events))
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
            payload = msgpack.packb([ts, events, self._dp_rank], use_bin_type=True)
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
