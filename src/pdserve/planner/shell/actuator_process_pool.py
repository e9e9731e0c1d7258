"""Actuator: a local pool of ``pdserve worker`` processes per role, plus the router's
discovery file ``{"prefill": [url, ...], "decode": [url, ...]}`` (what `pdserve demo` uses).

Scaling up starts workers on free loopback ports; they enter the discovery file only
once ``/health`` answers, so the router never sees a worker that cannot serve.
Scaling down removes the newest workers from the file first, then stops them (SIGTERM
to the process group, SIGKILL after a grace period).
"""

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
from typing import IO

import httpx

from pdserve.planner.core.decision import ScalingDecision
from pdserve.planner.core.observation import PoolState
from pdserve.planner.shell.source_scrape import Target

ROLES = ("prefill", "decode")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Worker:
    role: str
    port: int
    proc: subprocess.Popen
    started: float
    ready: bool = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass
class ProcessPool:
    model: str = "mock-model"
    worker_args: list[str] = field(default_factory=list)  # shared extra flags (e.g. --mock-speedup 50)
    role_args: dict[str, list[str]] = field(default_factory=dict)  # per-role extra flags
    discovery_file: Path | None = None
    log_dir: Path | None = None
    startup_timeout_s: float = 60.0
    stop_grace_s: float = 5.0
    workers: dict[str, list[Worker]] = field(default_factory=lambda: {r: [] for r in ROLES})

    def command(self, role: str, port: int) -> list[str]:
        return [sys.executable, "-m", "pdserve.cli", "worker", self.model, "--port", str(port),
                *self.worker_args, *self.role_args.get(role, [])]

    # ---- state ------------------------------------------------------------------
    def state(self, role: str) -> PoolState:
        self.poll()
        ws = self.workers[role]
        ready = sum(1 for w in ws if w.ready)
        return PoolState(replicas=len(ws), ready=ready, pending=0)

    def pools(self) -> tuple[PoolState, PoolState]:
        return self.state("prefill"), self.state("decode")

    def targets(self) -> list[Target]:
        """Ready workers, for the scrape source."""
        return [Target(w.url, role) for role in ROLES for w in self.workers[role] if w.ready]

    def poll(self) -> None:
        """Mark workers ready once /health answers; drop those that died."""
        changed = False
        for role in ROLES:
            alive = []
            for w in self.workers[role]:
                if w.proc.poll() is not None:
                    changed = True
                    continue
                if not w.ready:
                    try:
                        w.ready = httpx.get(w.url + "/health", timeout=0.5).status_code == 200
                        changed |= w.ready
                    except httpx.HTTPError:
                        # Wall time, not the planner's clock: real processes start on real time.
                        if time.monotonic() - w.started > self.startup_timeout_s:
                            self._stop(w)
                            changed = True
                            continue
                alive.append(w)
            self.workers[role] = alive
        if changed:
            self.write_discovery()

    # ---- actuation ----------------------------------------------------------------
    def apply(self, decision: ScalingDecision) -> None:
        self.scale("prefill", decision.prefill)
        self.scale("decode", decision.decode)

    def scale(self, role: str, n: int) -> None:
        if n < 0:
            raise ValueError(f"{role} replicas must be >= 0, got {n}")
        ws = self.workers[role]
        while len(ws) < n:
            port = free_port()
            if self.log_dir:
                # The child inherits its own descriptor; ours closes when the block ends.
                with open(self.log_dir / f"{role}-{port}.log", "wb") as log:
                    proc = self._spawn(role, port, log)
            else:
                proc = self._spawn(role, port, subprocess.DEVNULL)
            ws.append(Worker(role, port, proc, time.monotonic()))
        if len(ws) > n:
            victims = ws[n:]
            del ws[n:]
            self.write_discovery()  # out of the router first, then stop
            for w in victims:
                self._stop(w)

    def wait_ready(self, timeout_s: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.poll()
            if all(w.ready for r in ROLES for w in self.workers[r]):
                return True
            time.sleep(0.1)
        return False

    def close(self) -> None:
        """Stop every worker: all are told at once, then waited for. One by one took the sum of their exits,
        which on a loaded machine outlasted the grace `pdserve demo` gives the planner; its SIGKILL then left
        the rest (each in its own session) serving on their ports after the demo had ended."""
        everyone = [w for role in ROLES for w in self.workers[role]]
        self.workers = {role: [] for role in ROLES}
        self.write_discovery()  # out of the router first, then stop
        for w in everyone:
            if w.proc.poll() is None:
                try:
                    os.killpg(w.proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + self.stop_grace_s
        for w in everyone:
            try:
                w.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(w.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                w.proc.wait(timeout=5)

    def write_discovery(self) -> None:
        if self.discovery_file is None:
            return
        data = {role: [w.url for w in self.workers[role] if w.ready] for role in ROLES}
        tmp = self.discovery_file.with_suffix(self.discovery_file.suffix + ".tmp")
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        os.replace(tmp, self.discovery_file)  # atomic: the router never reads half a file

    def _spawn(self, role: str, port: int, stdout: IO[bytes] | int) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self.command(role, port), stdout=stdout, stderr=subprocess.STDOUT,
                                start_new_session=True, env=os.environ.copy())

    def _stop(self, w: Worker) -> None:
        if w.proc.poll() is not None:
            return
        try:
            os.killpg(w.proc.pid, signal.SIGTERM)
            w.proc.wait(timeout=self.stop_grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(w.proc.pid, signal.SIGKILL)
            w.proc.wait(timeout=5)
        except ProcessLookupError:
            pass
