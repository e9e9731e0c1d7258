"""KV events through vLLM's own code (``vllm/distributed/kv_events.py``).

Request:
  "publish": [batch, ...] with batch = {"ts": float, "events": [{"type": "BlockStored", field: value, ...}]}
      Each batch is built from vLLM's msgspec structs (fields this version lacks are
      dropped) and published by vLLM's
      ``ZmqEventPublisher`` on an ipc endpoint; a SUB socket here records the exact
      multipart frames it sent.  Hashes given as {"bytes": hex} become bytes.
  "decode": [payload_hex, ...]: msgpack payloads (e.g. the mock's) decoded with
      ``msgspec.msgpack.Decoder(KVEventBatch)``, as vLLM's consumers do.
Answer: "frames": per batch [topic_hex, seq_hex, payload_hex]; "decoded": per payload
the batch as builtins with each event's type tag, or the decoder's error.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Any

import msgspec

from common import error_text, main


def _hash_value(h: Any) -> Any:
    return bytes.fromhex(h["bytes"]) if isinstance(h, dict) else h


def _event(kv: Any, spec: dict[str, Any]) -> Any:
    fields = dict(spec)
    cls = getattr(kv, fields.pop("type"))
    if "block_hashes" in fields:
        fields["block_hashes"] = [_hash_value(h) for h in fields["block_hashes"]]
    if fields.get("parent_block_hash") is not None:
        fields["parent_block_hash"] = _hash_value(fields["parent_block_hash"])
    if fields.get("extra_keys") is not None:
        fields["extra_keys"] = [None if k is None else tuple(k) for k in fields["extra_keys"]]
    # Fields a later version added are dropped here; the answer lists each struct's fields,
    # so the test compares exactly what this version sent.
    return cls(**{k: v for k, v in fields.items() if k in cls.__struct_fields__})


def publish(batches: list[dict[str, Any]]) -> list[list[str]]:
    import zmq

    from vllm.config.kv_events import KVEventsConfig
    from vllm.distributed import kv_events as kv

    ipc_dir = tempfile.mkdtemp(prefix="kvev-")  # the socket's folder, removed below
    endpoint = f"ipc://{ipc_dir}/pub"
    config = KVEventsConfig(enable_kv_cache_events=True, publisher="zmq", endpoint=endpoint, topic="kv")
    publisher = kv.EventPublisherFactory.create(config, data_parallel_rank=0)
    assert isinstance(publisher, kv.ZmqEventPublisher), type(publisher)
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(endpoint)
    time.sleep(0.5)  # ZMQ slow joiner: let the subscription reach the publisher first
    frames: list[list[str]] = []
    try:
        for b in batches:
            batch = kv.KVEventBatch(ts=b["ts"], events=[_event(kv, e) for e in b["events"]])
            publisher.publish(batch)
            if not sub.poll(10_000):
                raise TimeoutError("vLLM's publisher sent nothing within 10 s")
            frames.append([f.hex() for f in sub.recv_multipart()])
    finally:
        publisher.shutdown()
        sub.close(0)
        ctx.term()
        shutil.rmtree(ipc_dir, ignore_errors=True)
    return frames


def _jsonable(v: Any) -> Any:
    if isinstance(v, bytes):
        return {"bytes": v.hex()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v


def decode(payloads: list[str]) -> list[dict[str, Any]]:
    from vllm.distributed import kv_events as kv

    decoder = msgspec.msgpack.Decoder(type=kv.KVEventBatch)
    out: list[dict[str, Any]] = []
    for p in payloads:
        try:
            batch = decoder.decode(bytes.fromhex(p))
        except Exception as e:
            out.append({"error": error_text(e)})
            continue
        events = []
        for ev in batch.events:
            d = {"type": type(ev).__name__}
            d.update({f: _jsonable(getattr(ev, f)) for f in type(ev).__struct_fields__})
            events.append(d)
        out.append({"ts": batch.ts, "data_parallel_rank": batch.data_parallel_rank, "events": events})
    return out


def handle(request: dict[str, Any]) -> dict[str, Any]:
    os.environ.setdefault("VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES", "1")
    from vllm.distributed import kv_events as kv

    fields = {name: list(getattr(kv, name).__struct_fields__) for name in ("BlockStored", "BlockRemoved")}
    return {
        "struct_fields": fields,
        "frames": publish(request.get("publish", [])),
        "decoded": decode(request.get("decode", [])),
    }


if __name__ == "__main__":
    main(handle)
