"""/metrics (names, types, labels, buckets as vLLM) and KV events over ZMQ (decoded independently)."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import socket
import time
from collections.abc import Iterator

import httpx
import msgpack
import pytest
import zmq
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.parser import text_string_to_metric_families

from pdserve.worker.testing import WorkerHandle, start_worker

TTFT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
        80.0, 160.0, 640.0, 2560.0]
ITL = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0]
LAT = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
       960.0, 1920.0, 7680.0]
TOKENS_2048 = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000]  # build_1_2_5_buckets(max_model_len=2048)

EXPECTED = {
    # family name (as parsed) -> (type, buckets or None)
    "vllm:time_to_first_token_seconds": ("histogram", TTFT),
    "vllm:inter_token_latency_seconds": ("histogram", ITL),
    "vllm:e2e_request_latency_seconds": ("histogram", LAT),
    "vllm:request_queue_time_seconds": ("histogram", LAT),
    "vllm:request_prefill_time_seconds": ("histogram", LAT),
    "vllm:request_decode_time_seconds": ("histogram", LAT),
    "vllm:request_prompt_tokens": ("histogram", TOKENS_2048),
    "vllm:request_generation_tokens": ("histogram", TOKENS_2048),
    "vllm:num_requests_running": ("gauge", None),
    "vllm:num_requests_waiting": ("gauge", None),
    "vllm:kv_cache_usage_perc": ("gauge", None),
    "vllm:prefix_cache_queries": ("counter", None),
    "vllm:prefix_cache_hits": ("counter", None),
    "vllm:prompt_tokens": ("counter", None),
    "vllm:generation_tokens": ("counter", None),
    "vllm:request_success": ("counter", None),
    "vllm:num_preemptions": ("counter", None),
}


@pytest.fixture(scope="module")
def sub_and_worker() -> Iterator[tuple[zmq.Socket[bytes], WorkerHandle]]:
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    port = sub.bind_to_random_port("tcp://127.0.0.1")
    sub.setsockopt(zmq.SUBSCRIBE, b"kv@test")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        replay_port = s.getsockname()[1]
    cfg = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": f"tcp://127.0.0.1:{port}",
           "replay_endpoint": f"tcp://127.0.0.1:{replay_port}", "topic": "kv@test"}
    try:
        with start_worker("llama", speedup=20.0, args=["--max-model-len", "2048", "--kv-events-config",
                                                        json.dumps(cfg)]) as w:
            settle(sub)
            w.replay_endpoint = cfg["replay_endpoint"]  # type: ignore[attr-defined]
            yield sub, w
    finally:
        sub.close(0)
        ctx.term()


def settle(sub: zmq.Socket[bytes]) -> None:
    """The worker's PUB connects to our bound SUB. libzmq sends our subscription to it only while this
    thread calls into the SUB socket, so poll for a moment (a real subscriber polls all the time)."""
    end = time.monotonic() + 0.5
    while time.monotonic() < end:
        sub.poll(20)


def recv_batches(sub: zmq.Socket[bytes], until: float, topic_expected: bytes = b"kv@test") -> list[tuple[int, list]]:
    out = []
    while time.monotonic() < until:
        if sub.poll(100):
            topic, seq, payload = sub.recv_multipart()
            assert topic == topic_expected and len(seq) == 8
            batch = msgpack.unpackb(payload, raw=False)
            # EventBatch: positional [ts, events, data_parallel_rank]
            assert isinstance(batch, list) and len(batch) == 3
            ts, events, dp_rank = batch
            assert isinstance(ts, float) and abs(ts - time.time()) < 60 and dp_rank == 0
            out.append((int.from_bytes(seq, "big"), events))
        elif out:
            break
    return out


def independent_block_hash(parent: bytes | None, tokens: list[int]) -> bytes:
    """vLLM 0.33's default, written out from its source: sha256 over pickle (utils/hashing.py), the chain
    root from PYTHONHASHSEED or the fixed "vllm-none-hash" (v1/core/kv_cache_utils.py)."""
    def sha256_pickle(obj: object) -> bytes:
        return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()
    none_hash = sha256_pickle(os.environ.get("PYTHONHASHSEED", "vllm-none-hash"))
    return sha256_pickle((parent or none_hash, tuple(tokens), None))


def test_kv_events_block_stored_matches_vllm_schema_and_hashes(
        sub_and_worker: tuple[zmq.Socket[bytes], WorkerHandle]) -> None:
    sub, w = sub_and_worker
    prompt = list(range(1000, 1040))  # 2 full blocks + 8 tokens
    r = httpx.post(f"{w.url}/v1/completions", json={"prompt": prompt, "max_tokens": 1})
    assert r.status_code == 200
    batches = recv_batches(sub, time.monotonic() + 5)
    seqs = [s for s, _ in batches]
    assert seqs == sorted(seqs)
    stored = [e for _, evs in batches for e in evs if e["type"] == "BlockStored"]
    assert stored, batches
    ev = stored[0]
    h0 = independent_block_hash(None, prompt[:16])
    h1 = independent_block_hash(h0, prompt[16:32])
    # 0.33's BlockStored map (distributed/kv_events.py, omit_defaults: None-valued optional fields are absent)
    assert ev == {"type": "BlockStored", "block_hashes": [int.from_bytes(h0[-8:], "big"), int.from_bytes(h1[-8:], "big")],
                  "parent_block_hash": None, "token_ids": prompt[:32], "block_size": 16, "lora_id": None,
                  "medium": "GPU", "lora_name": None, "extra_keys": [None, None], "group_idx": 0,
                  "kv_cache_spec_kind": "full_attention"}


def test_metrics_names_types_labels_buckets(sub_and_worker: tuple[zmq.Socket[bytes], WorkerHandle]) -> None:
    _, w = sub_and_worker
    shared = "shared system prompt " * 20
    for i in range(3):
        r = httpx.post(f"{w.url}/v1/completions", json={"prompt": shared + f"q{i}", "max_tokens": 4,
                                                          "ignore_eos": True})
        assert r.status_code == 200
    text = httpx.get(f"{w.url}/metrics").text
    assert "# TYPE vllm:prompt_tokens_total counter" in text and "_created" not in text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    for name, (mtype, buckets) in EXPECTED.items():
        assert name in fams, name
        fam = fams[name]
        assert fam.type == mtype, name
        for s in fam.samples:
            assert s.labels["model_name"] == "llama" and s.labels["engine"] == "0", (name, s)
        if buckets is not None:
            edges = [float(s.labels["le"]) for s in fam.samples if s.name.endswith("_bucket")]
            assert edges == [*map(float, buckets), float("inf")], name
    reasons = {s.labels["finished_reason"] for s in fams["vllm:request_success"].samples}
    assert reasons == {"stop", "length", "abort"}

    def val(fam: str, **labels: str) -> float:
        return sum(s.value for s in fams[fam].samples
                   if s.name == fam + "_total" and all(s.labels.get(k) == v for k, v in labels.items()))

    assert val("vllm:generation_tokens") >= 12
    assert val("vllm:request_success", finished_reason="length") >= 3
    assert val("vllm:prefix_cache_hits") >= 2 * 48  # requests 2 and 3 reuse the shared prefix blocks
    assert val("vllm:prefix_cache_queries") > val("vllm:prefix_cache_hits")
    src = {s.labels["source"]: s.value for s in fams["vllm:prompt_tokens_by_source"].samples}
    assert src["local_cache_hit"] == val("vllm:prefix_cache_hits")
    assert src["local_compute"] + src["local_cache_hit"] + src["external_kv_transfer"] == val("vllm:prompt_tokens")
    ttft_count = next(s.value for s in fams["vllm:time_to_first_token_seconds"].samples if s.name.endswith("_count"))
    assert ttft_count >= 3


def test_kv_events_block_removed_on_eviction() -> None:
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    port = sub.bind_to_random_port("tcp://127.0.0.1")
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    cfg = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": f"tcp://127.0.0.1:{port}"}
    try:
        with start_worker("llama", speedup=20.0, args=["--max-model-len", "128", "--num-gpu-blocks-override", "8",
                                                        "--kv-events-config", json.dumps(cfg)]) as w:
            settle(sub)
            for base in (0, 5000, 9000):
                r = httpx.post(f"{w.url}/v1/completions",
                               json={"prompt": list(range(base, base + 64)), "max_tokens": 1})
                assert r.status_code == 200
            events = [e for _, evs in recv_batches(sub, time.monotonic() + 5, b"") for e in evs]
    finally:
        sub.close(0)
        ctx.term()
    stored = [h for e in events if e["type"] == "BlockStored" for h in e["block_hashes"]]
    removed = [h for e in events if e["type"] == "BlockRemoved" for h in e["block_hashes"]]
    assert len(stored) == 12 and removed and set(removed) <= set(stored)
    assert all(e["medium"] == "GPU" for e in events if e["type"] == "BlockRemoved")


def test_replay_socket_and_all_blocks_cleared(sub_and_worker: tuple[zmq.Socket[bytes], WorkerHandle]) -> None:
    sub, w = sub_and_worker
    r = httpx.post(f"{w.url}/v1/completions", json={"prompt": list(range(7000, 7040)), "max_tokens": 1})
    assert r.status_code == 200
    live = recv_batches(sub, time.monotonic() + 5)
    assert live
    # vLLM's replay protocol: [empty delimiter, first wanted seq as 8 bytes BE] to the ROUTER; it answers with
    # one [delimiter, seq, payload] message per buffered batch from there on, then [delimiter, -1, b""].
    ctx = zmq.Context.instance()
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(w.replay_endpoint)  # type: ignore[attr-defined]
    got = []
    try:
        start = live[0][0]
        dealer.send_multipart([b"", start.to_bytes(8, "big")])
        while True:
            assert dealer.poll(5000), "replay socket did not answer"
            empty, seq, payload = dealer.recv_multipart()
            assert empty == b""
            if int.from_bytes(seq, "big", signed=True) == -1:
                assert payload == b""
                break
            got.append((int.from_bytes(seq, "big"), msgpack.unpackb(payload, raw=False)[1]))
    finally:
        dealer.close(0)
    assert got and got[0][0] == start and got[0][1] == live[0][1]
    # POST /reset_prefix_cache clears everything and says so on the event stream
    assert httpx.post(f"{w.url}/reset_prefix_cache").status_code == 200
    cleared = [e for _, evs in recv_batches(sub, time.monotonic() + 5) for e in evs]
    assert {"type": "AllBlocksCleared"} in cleared


# What Debian's Prometheus 2.42 sends when it scrapes (scrape/scrape.go, acceptHeader).
PROMETHEUS_2_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
                       "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")


def _as_vllm_serves(accept: str) -> tuple[str, str]:
    """(Content-Type, body) of prometheus_client.make_asgi_app — what vLLM mounts at /metrics —
    for one ``vllm:`` counter, so the expectation follows the installed library, not us."""
    import asyncio

    from prometheus_client import make_asgi_app

    reg = CollectorRegistry()
    Counter("vllm:request_success", "done", registry=reg).inc()
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": "/metrics", "query_string": b"", "headers": [(b"accept", accept.encode())]}
    asyncio.run(make_asgi_app(registry=reg, disable_compression=True)(scope, receive, send))
    headers = dict(sent[0]["headers"])
    return headers[b"Content-Type"].decode(), b"".join(m.get("body", b"") for m in sent[1:]).decode()


@pytest.mark.parametrize("accept", [PROMETHEUS_2_ACCEPT, "text/plain;version=0.0.4", ""])
def test_metrics_format_follows_the_scrapers_accept_header_as_vllm(accept: str) -> None:
    """vLLM's /metrics negotiates (make_asgi_app): the mock must answer a Prometheus scrape with
    the same format and the same sample spelling, not always the text format."""
    want_type, want_body = _as_vllm_serves(accept)
    want_name = next(line.split(" ")[0] for line in want_body.splitlines() if line.startswith("vllm") and "_total" in line)
    with start_worker("llama", speedup=20.0) as w:
        assert httpx.post(f"{w.url}/v1/completions", json={"prompt": "hi", "max_tokens": 2}).status_code == 200
        r = httpx.get(f"{w.url}/metrics", headers={"Accept": accept} if accept else {})
    assert r.status_code == 200
    assert r.headers["content-type"] == want_type
    samples = {line.split("{")[0].split(" ")[0] for line in r.text.splitlines() if line and not line.startswith("#")}
    assert want_name in samples, (want_name, sorted(samples)[:10])
    assert r.text.endswith("# EOF\n") == want_body.endswith("# EOF\n")
