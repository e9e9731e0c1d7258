"""KV events: vLLM's own structs and publisher against the router's decoder, and the mock
worker's published events against vLLM's decoder, per supported version.

Judge: ``vllm/distributed/kv_events.py`` (``BlockStored``/``BlockRemoved``/``AllBlocksCleared``,
``KVEventBatch``, ``ZmqEventPublisher``); the decoder vLLM's consumers use is
``msgspec.msgpack.Decoder(KVEventBatch)``.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from pdserve.api.vllm_versions import VERSIONS
from pdserve.router.shell import kv_events as router_events
from pdserve.router.core.kv_index import AllBlocksCleared, BlockRemoved, BlockStored
from pdserve.worker.testing import kv_event_subscriber, start_worker
from tests.conformance.conftest import Counts
from tests.conformance.vllm_env import run_probe

_MASK64 = (1 << 64) - 1
TOKENS = list(range(1000, 1064))


def _stored(**over: Any) -> dict[str, Any]:
    ev: dict[str, Any] = {
        "type": "BlockStored", "block_hashes": [0x1234_5678_9ABC_DEF0, (1 << 64) - 3], "parent_block_hash": None,
        "token_ids": TOKENS[:32], "block_size": 16, "lora_id": None, "medium": "GPU",
        # 0.33's later fields; the probe drops those a version's struct lacks.
        "lora_name": None, "extra_keys": [None, None], "group_idx": 0, "kv_cache_spec_kind": "full_attention",
    }
    ev.update(over)
    return ev


BATCHES = [
    {"ts": 1.5, "events": [_stored()]},
    {"ts": 2.0, "events": [
        _stored(block_hashes=[77], parent_block_hash=(1 << 64) - 3, token_ids=TOKENS[32:48], lora_id=3,
                lora_name="adapter-a", extra_keys=[["adapter-a"]], group_idx=1, medium="CPU"),
        {"type": "BlockRemoved", "block_hashes": [77, 5], "medium": "GPU", "group_idx": 1},
    ]},
    # VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0: the raw 32-byte digests.
    {"ts": 3.25, "events": [
        _stored(block_hashes=[{"bytes": "ab" * 32}], parent_block_hash={"bytes": "cd" * 32}, token_ids=TOKENS[:16],
                extra_keys=[None], kv_cache_spec_kind="sliding_window"),
        {"type": "BlockRemoved", "block_hashes": [{"bytes": "ab" * 32}], "medium": None},
        {"type": "AllBlocksCleared"},
    ]},
]


def _fold(h: Any) -> int:
    return int(h["bytes"], 16) & _MASK64 if isinstance(h, dict) else int(h) & _MASK64


def _expected(ev: dict[str, Any], fields: list[str]) -> dict[str, Any]:
    """What the router must read from an event vLLM sent with these fields."""
    # A field the event did not set goes out as the struct's default (None for all of these).
    kept = {k: ev.get(k) for k in fields}
    out: dict[str, Any] = {"type": ev["type"]}
    for k, v in kept.items():
        if k == "block_hashes":
            out[k] = tuple(_fold(h) for h in v)
        elif k == "parent_block_hash":
            out[k] = None if v is None else _fold(v)
        elif k == "token_ids":
            out[k] = tuple(v)
        elif k == "extra_keys":
            out[k] = None if v is None else tuple(None if x is None else list(x) for x in v)
        else:
            out[k] = v
    return out


def _router_view(ev: Any, fields: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"type": type(ev).__name__}
    for k in fields:
        if hasattr(ev, k):
            v = getattr(ev, k)
            if k == "extra_keys" and v is not None:
                v = tuple(None if x is None else list(x) for x in v)
            out[k] = v
    return out


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_router_decodes_events_published_by_vllm(version: str, counts: Counts) -> None:
    answer = run_probe(version, "kv_events.py", {"publish": BATCHES})
    fields = answer["struct_fields"]
    assert len(answer["frames"]) == len(BATCHES)
    n = 0
    for i, (batch, frames) in enumerate(zip(BATCHES, answer["frames"], strict=True)):
        raw = [bytes.fromhex(f) for f in frames]
        assert raw[0] == b"kv"
        seq, events = router_events.parse_message(raw)
        assert seq == i, "vLLM numbers batches from 0"
        assert len(events) == len(batch["events"])
        for sent, got in zip(batch["events"], events, strict=True):
            names = fields.get(sent["type"], [])
            # Compare every field vLLM sent that the router's event type carries.
            carried = [k for k in names if hasattr(got, k)]
            assert _router_view(got, carried) == _expected(sent, carried), f"vLLM {version} batch {i}"
            n += 1
    # The router must carry what routing needs from each version's structs.
    for kind, need in (("BlockStored", ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium")),
                       ("BlockRemoved", ("block_hashes", "medium"))):
        assert set(need) <= set(fields[kind]), f"vLLM {version} {kind} lacks {set(need) - set(fields[kind])}"
    counts.add("KV events from vLLM's structs + ZmqEventPublisher decoded by the router", version, n)
    assert isinstance(events[-1], AllBlocksCleared) and isinstance(events[-2], BlockRemoved) and isinstance(events[0], BlockStored)


EVENTS_ARGS = ["--kv-events-config", json.dumps({"enable_kv_cache_events": True, "publisher": "zmq",
                                                 "endpoint": "tcp://127.0.0.1:*"})]


def _collect_mock_events(version: str) -> list[list[bytes]]:
    """Frames a mock worker emulating ``version`` publishes while it fills and evicts its cache."""
    args = [*EVENTS_ARGS, "--mock-vllm-version", version, "--num-gpu-blocks-override", "24", "--max-model-len", "256"]
    frames: list[list[bytes]] = []
    with start_worker("llama", speedup=50.0, args=args, env={"PYTHONHASHSEED": "0"}) as w:
        assert w.kv_events_endpoint
        with kv_event_subscriber(w.kv_events_endpoint) as sub:
            for i in range(6):  # 6 distinct ~150-token prompts on 24 blocks: stores, then evictions
                prompt = f"request {i} for vLLM {version}: " + f"the model token cache {i} and the river city music " * 12
                r = httpx.post(f"{w.url}/v1/completions", json={"model": "llama", "prompt": prompt, "max_tokens": 4},
                               timeout=30)
                assert r.status_code == 200, r.text
            while sub.poll(500):
                frames.append(sub.recv_multipart())
    return frames


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_vllm_decodes_the_mock_workers_events(version: str, counts: Counts) -> None:
    frames = _collect_mock_events(version)
    assert frames, "the mock published no KV events"
    answer = run_probe(version, "kv_events.py", {"decode": [f[2].hex() for f in frames]})
    kinds: dict[str, int] = {}
    for i, (f, dec) in enumerate(zip(frames, answer["decoded"], strict=True)):
        assert "error" not in dec, f"vLLM {version}'s decoder refused the mock's batch {i}: {dec['error']}"
        _, ours = router_events.parse_message(f)
        assert [e["type"] for e in dec["events"]] == [type(e).__name__ for e in ours]
        for e in dec["events"]:
            kinds[e["type"]] = kinds.get(e["type"], 0) + 1
            if e["type"] == "BlockStored":
                assert len(e["token_ids"]) == e["block_size"] * len(e["block_hashes"])
                assert all(isinstance(h, int) for h in e["block_hashes"]), "VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES defaults to 1"
    assert kinds.get("BlockStored") and kinds.get("BlockRemoved"), f"expected stores and evictions, got {kinds}"
    counts.add("mock worker KV event batches decoded by vLLM's msgspec decoder", version, len(frames))
