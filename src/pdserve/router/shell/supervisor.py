"""``pdserve router --processes N``: N router processes sharing one port (SO_REUSEPORT).

One Python process relays on one core; vllm-router and sglang-router are
multi-threaded. Here the kernel spreads incoming connections over N independent
router processes, each with its own event loop, discovery, worker scrapes, KV-event
subscriptions and policy state (so a worker's load as seen by one process omits the
requests the others sent it, and prefix_approx's index is per process; kv_aware's
index is fed by the workers' own events, so each process has the whole picture).
Metrics are shared through prometheus_client's multiprocess mode: a scrape of any
process reports counters and histograms summed over all of them. ``/health`` is ok only
once every process has a decode worker (``siblings.py``): any of them may take the next
connection.

The supervisor holds the port (bound, not listening) so ``--port 0`` resolves to one
port for all, forwards SIGTERM/SIGINT, and stops everything if any process dies, so a
pod restart replaces the whole set rather than serving at reduced capacity unseen.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType

from pdserve.router.shell.siblings import ENV as SIBLINGS_ENV, Siblings

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def child_argv(argv: list[str], port: int) -> list[str]:
    """The command line of one router process: the user's, on the resolved port, as one
    process that binds with SO_REUSEPORT (argparse keeps the last value of a repeated flag)."""
    return [sys.executable, "-m", "pdserve.cli", "router", *argv, "--port", str(port), "--processes", "1",
            "--reuse-port"]


def hold_port(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        s.bind((host, port))
    except OSError as e:
        s.close()
        raise OSError(f"cannot bind {host}:{port} for the router processes: {e}") from e
    return s


def supervise(argv: list[str], host: str, port: int, processes: int, grace_s: float = 15.0) -> int:
    holder = hold_port(host, port)
    port = holder.getsockname()[1]
    metrics_dir = tempfile.mkdtemp(prefix="pdserve-router-metrics-")
    # Each process marks its discovery's decode workers there; /health reads the set's (siblings.py).
    ready_dir = Path(metrics_dir) / "ready"
    env = {**os.environ, MULTIPROC_ENV: metrics_dir, SIBLINGS_ENV: Siblings.env_value(ready_dir, processes)}
    children: list[subprocess.Popen[bytes]] = []
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    old = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    code = 0
    try:
        for _ in range(processes):
            children.append(subprocess.Popen(child_argv(argv, port), env=env))
        print(f"pdserve router: {processes} processes on {host}:{port} (pids "
              f"{' '.join(str(c.pid) for c in children)})", file=sys.stderr, flush=True)
        while not stopping:
            dead = [c for c in children if c.poll() is not None]
            if dead:
                c = dead[0]
                print(f"pdserve router: process {c.pid} exited with {c.returncode}; stopping the others",
                      file=sys.stderr, flush=True)
                code = c.returncode or 1
                break
            time.sleep(0.2)
    finally:
        for c in children:
            if c.poll() is None:
                c.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s  # each drains within its own --shutdown-timeout, shorter
        for c in children:
            try:
                c.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                c.kill()
                c.wait()
        holder.close()
        shutil.rmtree(metrics_dir, ignore_errors=True)
        for sig, handler in old.items():
            signal.signal(sig, handler)
    return code
