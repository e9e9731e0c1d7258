"""A prefill and a decode mock worker emulating one vLLM version (real processes, loopback)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from pdserve.worker.testing import WorkerHandle, start_worker

MODEL = "mock-llama"


def worker_args(version: str) -> list[str]:
    kv = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
    events = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://127.0.0.1:*"}
    return ["--kv-transfer-config", json.dumps(kv), "--kv-events-config", json.dumps(events),
            "--mock-side-channel-port", "0", "--mock-side-channel-host", "127.0.0.1",
            "--mock-vllm-version", version, "--max-model-len", "4096"]


@contextmanager
def pd_pair(version: str) -> Iterator[tuple[WorkerHandle, WorkerHandle]]:
    with ExitStack() as stack:
        p, d = (stack.enter_context(start_worker(MODEL, args=worker_args(version), speedup=50.0,
                                                 env={"PYTHONHASHSEED": "0"})) for _ in range(2))
        yield p, d
