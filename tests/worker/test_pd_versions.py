"""P/D pairing as each emulated vLLM version's NixlConnector does it (real workers, real HTTP).

0.11 (``nixl_connector.py``): the prefill answer has no request id; the decode worker
reads the blocks by id and notifies the prefill worker with its *own* request id, so the
prefill side frees them only when both workers got the same ``X-Request-Id``; otherwise
it logs an "unrecognized request" and the blocks wait for the lease. 0.33 (NIXL
protocol v2, ``nixl/pull_scheduler.py``): the answer carries ``remote_request_id`` and
the decode side notifies with it; params without it are refused as invalid.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import msgpack
import pytest
from test_pd import decode, metric, prefill

from pdserve.tokenization import mock as mock_tokenizer
from pdserve.worker.testing import WorkerHandle, kv_event_subscriber, start_worker
from pdserve.worker.vllm_hash import block_hashes, to_external


def _kv(role: str, version: str) -> list[str]:
    # no kv_load_failure_policy: vLLM 0.33's default is "fail" (config/kv_transfer.py), and the mock's too
    cfg = {"kv_connector": "NixlConnector", "kv_role": role}
    return ["--kv-transfer-config", json.dumps(cfg), "--mock-side-channel-port", "0",
            "--mock-side-channel-host", "127.0.0.1", "--max-model-len", "4096", "--mock-vllm-version", version]


EVENTS = ["--kv-events-config", json.dumps({"enable_kv_cache_events": True, "publisher": "zmq",
                                           "endpoint": "tcp://127.0.0.1:*"})]


@pytest.fixture(scope="module")
def workers() -> Iterator[dict[str, WorkerHandle]]:
    with ExitStack() as stack:
        out = {}
        for version in ("0.11.0", "0.33.0"):
            for role in ("kv_producer", "kv_consumer"):
                out[f"{version}/{role}"] = stack.enter_context(
                    start_worker("llama", speedup=20.0, args=_kv(role, version) + EVENTS,
                                 env={"PYTHONHASHSEED": "0"}))
        yield out


def usage(w: WorkerHandle) -> float:
    return metric(w, "vllm:kv_cache_usage_perc", "vllm:kv_cache_usage_perc")


def transfers(w: WorkerHandle) -> float:
    return metric(w, "pdserve_worker_kv_transfers", "pdserve_worker_kv_transfers_total")


def wait_for(cond: object, timeout: float = 3.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def test_0_11_pairs_by_the_shared_request_id(workers: dict[str, WorkerHandle]) -> None:
    p, d = workers["0.11.0/kv_producer"], workers["0.11.0/kv_consumer"]
    params = prefill(p, "same-1")
    assert set(params) == {"do_remote_prefill", "do_remote_decode", "remote_block_ids", "remote_engine_id",
                           "remote_host", "remote_port", "tp_size"}  # no remote_request_id in 0.11
    assert usage(p) > 0
    before = transfers(d)
    r = decode(d, "same-1", params)
    assert r.status_code == 200, r.text
    assert transfers(d) == before + 1
    assert wait_for(lambda: usage(p) == 0), "the prefill worker kept blocks its decode had notified"


def test_0_11_other_request_id_reads_the_kv_but_strands_the_blocks(workers: dict[str, WorkerHandle]) -> None:
    p, d = workers["0.11.0/kv_producer"], workers["0.11.0/kv_consumer"]
    assert wait_for(lambda: usage(p) == 0)
    params = prefill(p, "diff-1")
    before = transfers(d)
    r = decode(d, "not-the-same", params)
    assert r.status_code == 200, r.text
    assert transfers(d) == before + 1  # the READ by block ids worked
    # ... but the notification named a request the prefill worker never saw (it says so once handled)
    assert wait_for(lambda: "unrecognized request cmpl-not-the-same-0" in p.logs())
    assert usage(p) > 0


def test_0_33_pairs_by_remote_request_id(workers: dict[str, WorkerHandle]) -> None:
    p, d = workers["0.33.0/kv_producer"], workers["0.33.0/kv_consumer"]
    params = prefill(p, "v2-1")
    assert params["remote_request_id"].startswith("cmpl-v2-1-0-")
    r = decode(d, "a-different-id", params)  # ids need not match: the notification uses remote_request_id
    assert r.status_code == 200, r.text
    assert wait_for(lambda: usage(p) == 0)


def test_0_33_refuses_params_without_remote_request_id(workers: dict[str, WorkerHandle]) -> None:
    p, d = workers["0.33.0/kv_producer"], workers["0.33.0/kv_consumer"]
    params = prefill(p, "v1-style")
    del params["remote_request_id"]
    r = decode(d, "v1-style", params)
    assert r.status_code == 500
    assert "invalid KVTransferParams" in r.json()["error"]["message"]
    assert metric(d, "pdserve_worker_kv_load_failures", "pdserve_worker_kv_load_failures_total",
                  reason="invalid_params", policy="fail") == 1


def test_out_of_vocabulary_ids_are_refused_like_vllm(workers: dict[str, WorkerHandle]) -> None:
    w = workers["0.33.0/kv_consumer"]
    for bad in (2**40, -1):
        r = httpx.post(f"{w.url}/v1/completions", json={"model": "llama", "prompt": [1, 2, bad], "max_tokens": 1})
        assert r.status_code == 400
        assert r.json()["error"] == {"message": f"Token id {bad} is out of vocabulary", "type": "BadRequestError",
                                     "param": None, "code": 400}


@pytest.mark.parametrize("version", ["0.11.0", "0.33.0"])
def test_kv_events_are_encoded_and_hashed_as_the_version_does(workers: dict[str, WorkerHandle], version: str) -> None:
    w = workers[f"{version}/kv_consumer"]
    assert w.kv_events_endpoint
    with kv_event_subscriber(w.kv_events_endpoint) as sub:
        prompt = f"events for vLLM {version}: " + "the model token cache and the river city music " * 6
        r = httpx.post(f"{w.url}/v1/completions", json={"model": "llama", "prompt": prompt, "max_tokens": 1})
        assert r.status_code == 200
        assert sub.poll(5000), "no KV events"
        events = msgpack.unpackb(sub.recv_multipart()[2])[1]
    ids = mock_tokenizer.encode(prompt)
    n = len(ids) // 16
    expected = [to_external(h) for h in block_hashes(ids, 16, "sha256", version, seed_env="0")]
    stored = [e for e in events if (e[0] if isinstance(e, list) else e["type"]) == "BlockStored"]
    assert stored
    if version == "0.11.0":  # ["BlockStored", block_hashes, parent, token_ids, block_size, lora_id, medium]
        assert stored[0] == ["BlockStored", expected, None, ids[: n * 16], 16, None, "GPU"]
    else:
        assert stored[0]["block_hashes"] == expected and stored[0]["group_idx"] == 0
        assert stored[0]["extra_keys"] == [None] * n and stored[0]["token_ids"] == ids[: n * 16]
