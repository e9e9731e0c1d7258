"""Prefill/decode handoff between two real workers (NixlConnector-shaped kv_transfer_params)."""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pdserve.worker.testing import WorkerHandle, start_worker

PROMPT = "Disaggregated serving moves the prompt's KV cache from a prefill worker to a decode worker. " * 8


@dataclass
class Cluster:
    prefill: WorkerHandle
    prefill_short_lease: WorkerHandle
    decode_fail: WorkerHandle
    decode_recompute: WorkerHandle


def _kv(role: str, policy: str = "fail") -> list[str]:
    cfg = {"kv_connector": "NixlConnector", "kv_role": role, "kv_load_failure_policy": policy}
    return ["--kv-transfer-config", json.dumps(cfg), "--mock-side-channel-port", "0",
            "--mock-side-channel-host", "127.0.0.1", "--max-model-len", "4096"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with ExitStack() as stack:
        def start(*args: str) -> WorkerHandle:
            return stack.enter_context(start_worker("llama", speedup=20.0, args=list(args)))

        yield Cluster(
            prefill=start(*_kv("kv_producer")),
            prefill_short_lease=start(*_kv("kv_producer"), "--mock-kv-lease-seconds", "0.3"),
            decode_fail=start(*_kv("kv_consumer", "fail")),
            decode_recompute=start(*_kv("kv_consumer", "recompute")),
        )


def prefill(w: WorkerHandle, request_id: str, prompt: str = PROMPT) -> dict:
    r = httpx.post(f"{w.url}/v1/completions", headers={"X-Request-Id": request_id}, json={
        "model": "llama", "prompt": prompt, "max_tokens": 1, "stream": False,
        "kv_transfer_params": {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
                               "remote_block_ids": None, "remote_host": None, "remote_port": None}})
    assert r.status_code == 200, r.text
    params = r.json()["kv_transfer_params"]
    assert params is not None
    return params


def decode(w: WorkerHandle, request_id: str, params: dict, prompt: str = PROMPT) -> httpx.Response:
    return httpx.post(f"{w.url}/v1/completions", headers={"X-Request-Id": request_id}, json={
        "model": "llama", "prompt": prompt, "max_tokens": 8, "ignore_eos": True, "kv_transfer_params": params},
        timeout=30)


def metric(w: WorkerHandle, family: str, sample: str, **labels: str) -> float:
    text = httpx.get(f"{w.url}/metrics").text
    total = 0.0
    for fam in text_string_to_metric_families(text):
        if fam.name != family:
            continue
        for s in fam.samples:
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


def test_prefill_returns_nixl_params_and_holds_blocks(cluster: Cluster) -> None:
    p = prefill(cluster.prefill, "hold-1")
    assert p["do_remote_prefill"] is True and p["do_remote_decode"] is False
    # vLLM 0.33 nixl/pull_scheduler.py request_finished on a P node
    assert set(p) == {"do_remote_prefill", "do_remote_decode", "remote_engine_id", "remote_request_id",
                      "remote_block_ids", "remote_host", "remote_port", "tp_size", "dcp_size", "pp_size",
                      "remote_num_tokens", "remote_blocks_expiry_time", "remote_registration_generation",
                      "transfer_mode"}
    assert p["remote_host"] == "127.0.0.1" and p["remote_port"] == cluster.prefill.side_channel_port
    # the engine's id: the completion's "cmpl-{X-Request-Id}-0" plus 8 random characters (assign_request_id)
    assert p["tp_size"] == 1 and re.fullmatch(r"cmpl-hold-1-0-[0-9a-f]{8}", p["remote_request_id"])
    assert p["transfer_mode"] == "pull" and p["dcp_size"] == 1 and p["pp_size"] == 1
    n_prompt = httpx.post(f"{cluster.prefill.url}/v1/completions", json={"prompt": PROMPT, "max_tokens": 1}).json()[
        "usage"]["prompt_tokens"]
    assert len(p["remote_block_ids"]) == -(-n_prompt // 16)
    assert metric(cluster.prefill, "vllm:kv_cache_usage_perc", "vllm:kv_cache_usage_perc") > 0


def test_handoff_succeeds_without_prompt_recompute(cluster: Cluster) -> None:
    d = cluster.decode_fail
    before_compute = metric(d, "vllm:prompt_tokens_by_source", "vllm:prompt_tokens_by_source_total",
                            source="local_compute")
    params = prefill(cluster.prefill, "ok-1")
    r = decode(d, "ok-1", params)
    assert r.status_code == 200, r.text
    body = r.json()
    n_prompt = body["usage"]["prompt_tokens"]
    assert body["usage"]["completion_tokens"] == 8 and body["kv_transfer_params"] is None
    assert metric(d, "pdserve_worker_kv_transfers", "pdserve_worker_kv_transfers_total") >= 1
    external = metric(d, "vllm:prompt_tokens_by_source", "vllm:prompt_tokens_by_source_total",
                      source="external_kv_transfer")
    assert external >= n_prompt
    after_compute = metric(d, "vllm:prompt_tokens_by_source", "vllm:prompt_tokens_by_source_total",
                           source="local_compute")
    assert after_compute == before_compute  # the prompt was not recomputed on the decode worker
    # no engine step on the decode worker processed more than a handful of tokens
    big_steps = metric(d, "vllm:iteration_tokens_total", "vllm:iteration_tokens_total_count") - metric(
        d, "vllm:iteration_tokens_total", "vllm:iteration_tokens_total_bucket", le="16.0")
    assert big_steps == 0
    # the prefill worker released the blocks after the transfer: pulling again must fail
    again = decode(d, "ok-1b", params)
    assert again.status_code == 500
    assert "not_found" in again.json()["error"]["message"]


def _lease_expired(w: WorkerHandle, timeout: float = 10.0) -> None:
    """Until the worker holds no prefilled KV any more (its 0.3 s lease ran out), polled, not slept on."""
    deadline = time.monotonic() + timeout
    while metric(w, "vllm:kv_cache_usage_perc", "vllm:kv_cache_usage_perc") > 0:
        assert time.monotonic() < deadline, "the lease never expired"
        time.sleep(0.05)


def test_expired_lease_fails_observably(cluster: Cluster) -> None:
    params = prefill(cluster.prefill_short_lease, "lease-1")
    _lease_expired(cluster.prefill_short_lease)
    before = metric(cluster.decode_fail, "pdserve_worker_kv_load_failures", "pdserve_worker_kv_load_failures_total",
                    reason="not_found", policy="fail")
    r = decode(cluster.decode_fail, "lease-1", params)
    assert r.status_code == 500
    err = r.json()["error"]
    assert err["param"] == "kv_transfer_params" and "lease expired" in err["message"]
    after = metric(cluster.decode_fail, "pdserve_worker_kv_load_failures", "pdserve_worker_kv_load_failures_total",
                   reason="not_found", policy="fail")
    assert after == before + 1


def test_wrong_address_fails(cluster: Cluster) -> None:
    params = prefill(cluster.prefill, "addr-1")
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]
    r = decode(cluster.decode_fail, "addr-1", {**params, "remote_port": dead_port})
    assert r.status_code == 500 and "unreachable" in r.json()["error"]["message"]
    wrong_engine = decode(cluster.decode_fail, "addr-2", {**params, "remote_engine_id": "someone-else"})
    assert wrong_engine.status_code == 500 and "engine_mismatch" in wrong_engine.json()["error"]["message"]
    # the blocks are still held: the right address works afterwards
    assert decode(cluster.decode_fail, "addr-3", params).status_code == 200


def test_prompt_mismatch_is_detected(cluster: Cluster) -> None:
    params = prefill(cluster.prefill, "mm-1")
    r = decode(cluster.decode_fail, "mm-1", params, prompt=PROMPT + " and something else entirely")
    assert r.status_code == 500 and "prompt_mismatch" in r.json()["error"]["message"]


def test_recompute_policy_prefills_locally_and_counts_it(cluster: Cluster) -> None:
    d = cluster.decode_recompute
    params = prefill(cluster.prefill_short_lease, "rc-1")
    _lease_expired(cluster.prefill_short_lease)
    before = metric(d, "vllm:prompt_tokens_by_source", "vllm:prompt_tokens_by_source_total", source="local_compute")
    r = decode(d, "rc-1", params)
    assert r.status_code == 200
    n_prompt = r.json()["usage"]["prompt_tokens"]
    after = metric(d, "vllm:prompt_tokens_by_source", "vllm:prompt_tokens_by_source_total", source="local_compute")
    assert after - before == n_prompt
    assert metric(d, "pdserve_worker_kv_load_failures", "pdserve_worker_kv_load_failures_total",
                  policy="recompute") >= 1
