"""Process helpers the router benchmarks share: start a service and wait for its health
URL (stopped with its process group when the stack closes), a free loopback port, CPU
seconds of a process tree from /proc, a percentile."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from contextlib import ExitStack
from pathlib import Path

from pdserve.common.procs import stop_group

TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def tree(pid: int) -> list[int]:
    """A process and its live descendants, from each of its threads' ``children`` (`pdserve router
    --processes N` is a supervisor and N routers; a Python launcher may run a router as its child)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            pass  # exited meanwhile
    return out


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process and its threads, plus those of its live descendants (``tree``)."""
    total = 0
    for p in tree(pid):
        try:
            f = _stat(p)
        except (FileNotFoundError, ProcessLookupError):
            continue  # exited meanwhile
        total += int(f[11]) + int(f[12])
    return total / TICK


def pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def wait_http(url: str, timeout: float = 30.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} did not come up")


def start_proc(stack: ExitStack, cmd: list[str], health: str, cpus: str | None = None,
               env: dict[str, str] | None = None) -> subprocess.Popen:
    if cpus:
        cmd = ["taskset", "-c", cpus, *cmd]
    log = open(f"/tmp/pdserve-bench-{Path(cmd[-1] if cpus else cmd[0]).name}-{os.getpid()}.log", "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env=env)

    def stop() -> None:
        stop_group(proc)
        log.close()

    stack.callback(stop)
    try:
        wait_http(health)
    except TimeoutError:
        stop()
        raise RuntimeError(f"{' '.join(cmd)} did not start; see {log.name}") from None
    return proc
