"""Start real ``pdserve worker`` processes for tests and benchmarks (no pytest needed).

    with start_worker("llama", speedup=20) as w:
        httpx.post(f"{w.url}/v1/completions", json={...})

The worker runs in its own process group on a free loopback port; leaving the
``with`` block sends SIGTERM (graceful drain), then SIGKILLs the group if needed.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from pathlib import Path

import httpx

from pdserve.worker.cli import READY_MARKER

_READY_RE = re.compile(re.escape(READY_MARKER) + r" http://(?P<host>[^:\s]+):(?P<port>\d+) .*?"
                       r"side_channel=(?P<side>\S+) kv_events=(?P<kv>\S+)")


@dataclass
class WorkerHandle:
    url: str
    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path
    side_channel_port: int | None  # set when --kv-transfer-config names a connector
    kv_events_endpoint: str | None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def terminate(self, timeout: float = 10.0) -> int | None:
        """SIGTERM (the worker drains in-flight requests), then SIGKILL the group after ``timeout``."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            return self.proc.wait(5)
        except subprocess.TimeoutExpired:
            return None


@contextmanager
def start_worker(
    model: str = "mock-llama",
    *,
    args: Sequence[str] = (),
    speedup: float = 1.0,
    profile: str = "llama-3.1-8b-h100",
    env: Mapping[str, str] | None = None,
    startup_timeout: float = 30.0,
    host: str = "127.0.0.1",
    port: int = 0,
    tokenizer: str | None = None,
    tokenizer_mode: str | None = None,
) -> Iterator[WorkerHandle]:
    """Run ``pdserve worker MODEL`` with extra vllm-style ``args``; yields once /health answers 200.

    ``tokenizer``: vLLM's ``--tokenizer`` (a directory, e.g. one from
    ``pdserve.tokenization.testing.build_bpe_tokenizer``), loaded in ``tokenizer_mode``
    (default ``auto``). Without one the worker is told ``--tokenizer-mode mock`` (the
    hash-word tokenizer), since test model names are not loadable tokenizers."""
    fd, log_name = tempfile.mkstemp(prefix="pdserve-worker-", suffix=".log")
    log_path = Path(log_name)
    cmd = [sys.executable, "-m", "pdserve.cli", "worker", model, "--host", host, "--port", str(port),
           "--mock-profile", profile, "--mock-speedup", str(speedup)]
    if tokenizer is not None:
        cmd += ["--tokenizer", tokenizer, "--tokenizer-mode", tokenizer_mode or "auto"]
    else:
        cmd += ["--tokenizer-mode", tokenizer_mode or "mock"]
    cmd += list(args)
    proc_env = dict(os.environ)
    proc_env.update(env or {})
    with os.fdopen(fd, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=proc_env, start_new_session=True)
    handle: WorkerHandle | None = None
    try:
        handle = _wait_ready(proc, log_path, startup_timeout)
        yield handle
    finally:
        if handle is None:
            handle = WorkerHandle("", 0, proc, log_path, None, None)
        handle.terminate()
        log_path.unlink(missing_ok=True)


def _wait_ready(proc: subprocess.Popen[bytes], log_path: Path, timeout: float) -> WorkerHandle:
    deadline = time.monotonic() + timeout
    match = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"pdserve worker exited with {proc.returncode}:\n{log_path.read_text(errors='replace')}")
        match = _READY_RE.search(log_path.read_text(errors="replace"))
        if match:
            break
        time.sleep(0.05)
    if match is None:
        raise TimeoutError(f"pdserve worker not ready after {timeout}s:\n{log_path.read_text(errors='replace')}")
    host = match["host"] if match["host"] not in ("0.0.0.0", "::") else "127.0.0.1"
    url = f"http://{host}:{match['port']}"
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                side = match["side"]
                kv = match["kv"]
                return WorkerHandle(url, int(match["port"]), proc, log_path,
                                    int(side) if side != "-" else None, kv if kv != "-" else None)
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"pdserve worker {url} never answered /health:\n{log_path.read_text(errors='replace')}")


@contextmanager
def kv_event_subscriber(endpoint: str, settle_s: float = 0.2, connect_timeout_s: float = 60.0) -> Iterator[Any]:
    """A ZMQ SUB socket on a worker's KV-event endpoint, subscribed to everything.

    ZMQ drops what a publisher sends before it has seen the subscriber. The subscription goes out right
    after the connection's handshake, so the socket is handed over once the handshake has succeeded (waited
    for: on a loaded machine the connect alone can take longer than any fixed pause) and the subscription
    has had ``settle_s`` to cross loopback."""
    import zmq
    from zmq.utils.monitor import recv_monitor_message

    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    monitor = sub.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
    try:
        sub.connect(endpoint)
        deadline = time.monotonic() + connect_timeout_s
        while True:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0 or not monitor.poll(left_ms):
                raise TimeoutError(f"no ZMQ handshake with the KV-event publisher {endpoint} in {connect_timeout_s} s")
            if recv_monitor_message(monitor)["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                break
        sub.disable_monitor()
        end = time.monotonic() + settle_s
        while time.monotonic() < end:
            sub.poll(20)
        yield sub
    finally:
        monitor.close(0)
        sub.close(0)
        ctx.term()
