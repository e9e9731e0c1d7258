"""Starts and stops the demo's processes: the planner (which runs the worker pool) and
the router. Each runs in its own process group and is stopped with it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from pdserve.demo.observe import read_pools


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True, slots=True)
class StackConfig:
    run_dir: Path
    model: str = "facebook/opt-13b"
    mock_profile: str = "opt-13b-a100"
    mock_speedup: float = 1.0
    ttft_slo_ms: float = 600.0
    itl_slo_ms: float = 40.0
    interval_s: float = 5.0
    stabilization_s: float = 15.0
    prefill_max: int = 4
    decode_max: int = 4
    policy: str = "kv_aware"


@dataclass
class Stack:
    config: StackConfig
    router_port: int = 0
    planner_metrics_port: int = 0
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def discovery_file(self) -> Path:
        return self.config.run_dir / "discovery.json"

    @property
    def router_url(self) -> str:
        return f"http://127.0.0.1:{self.router_port}"

    @property
    def planner_metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.planner_metrics_port}"

    def planner_command(self) -> list[str]:
        c = self.config
        kv = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"}, separators=(",", ":"))
        worker_args = [
            "--host=127.0.0.1",
            f"--mock-profile={c.mock_profile}",
            f"--mock-speedup={c.mock_speedup:g}",
            "--mock-side-channel-host=127.0.0.1",
            "--mock-side-channel-port=0",
            f"--kv-transfer-config={kv}",
            "--tokenizer-mode=mock",  # the demo's workload and router speak the hash-word tokenizer
        ]
        return [
            sys.executable, "-m", "pdserve.cli", "planner", "run",
            "--actuator", "process-pool",
            "--service", "demo",
            "--discovery-file", str(self.discovery_file),
            "--log-dir", str(c.run_dir / "workers"),
            "--worker-model", c.model,
            *[f"--worker-arg={a}" for a in worker_args],
            "--model-profile", c.mock_profile,
            "--ttft-ms", f"{c.ttft_slo_ms:g}",
            "--itl-ms", f"{c.itl_slo_ms:g}",
            "--interval", f"{c.interval_s:g}",
            "--stabilization-s", f"{c.stabilization_s:g}",
            "--prefill-max", str(c.prefill_max),
            "--decode-max", str(c.decode_max),
            "--metrics-port", str(self.planner_metrics_port),
            "--decisions-out", str(c.run_dir / "decisions.jsonl"),
        ]  # fmt: skip

    def router_command(self) -> list[str]:
        return [
            sys.executable, "-m", "pdserve.cli", "router",
            "--host", "127.0.0.1",
            "--port", str(self.router_port),
            "--discovery-file", str(self.discovery_file),
            "--policy", self.config.policy,
            "--tokenizer-mode", "mock",  # the demo's mock workers use pdserve's hash-word tokenizer
            # --processes as users get it (one per CPU): /health reads ready only once every process has its
            # workers (router/shell/siblings.py), which _router_ready waits for.
        ]  # fmt: skip

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.config.run_dir / f"{name}.log", "ab")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        log.close()

    def check_alive(self) -> None:
        for name, p in self.procs.items():
            if p.poll() is not None:
                tail = (self.config.run_dir / f"{name}.log").read_text(errors="replace")[-1500:]
                raise RuntimeError(f"the {name} exited with code {p.returncode}:\n{tail}")

    def start(self, timeout_s: float = 90.0) -> None:
        self.config.run_dir.mkdir(parents=True, exist_ok=True)
        (self.config.run_dir / "workers").mkdir(exist_ok=True)
        self.discovery_file.unlink(missing_ok=True)
        self.router_port = free_port()
        self.planner_metrics_port = free_port()
        self._spawn("planner", self.planner_command())
        self._spawn("router", self.router_command())
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.check_alive()
            pools = read_pools(self.discovery_file)
            if pools["prefill"] and pools["decode"] and self._router_ready():
                return
            time.sleep(0.3)
        raise TimeoutError(f"the stack was not ready after {timeout_s:.0f}s (logs in {self.config.run_dir})")

    def _router_ready(self) -> bool:
        try:
            return httpx.get(f"{self.router_url}/health", timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self, grace_s: float = 15.0) -> None:
        # The router first (no new work), then the planner, which stops its workers.
        for name in ("router", "planner"):
            p = self.procs.get(name)
            if p is None or p.poll() is not None:
                continue
            try:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
            except ProcessLookupError:
                pass
        # Anything the planner left behind in its group (it should have stopped its workers).
        for p in self.procs.values():
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def __enter__(self) -> Stack:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
