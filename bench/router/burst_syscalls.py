"""``burst.py --syscalls``: every router's system calls over each measured burst, counted by
the kernel's syscall tracepoints (``perf stat -e syscalls:sys_enter_*``, attached to the
router's process tree for that burst only; needs ``perf`` and the right to trace, e.g. root
or ``perf_event_paranoid`` <= 1).

Why: a router's CPU per streamed token is mostly the kernel's (a loopback send that wakes the
reader costs the sender ~15 µs here) plus its own code per request. Counting the calls per
token says whether a router pays more of the first (more reads and writes per token) or of
the second (the same calls, more CPU around them)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

from procs import tree

# The calls a proxy makes per streamed token and per wake-up; "all" is every system call.
EVENTS = {
    "read": "syscalls:sys_enter_read", "readv": "syscalls:sys_enter_readv",
    "recvfrom": "syscalls:sys_enter_recvfrom", "recvmsg": "syscalls:sys_enter_recvmsg",
    "write": "syscalls:sys_enter_write", "writev": "syscalls:sys_enter_writev",
    "sendto": "syscalls:sys_enter_sendto", "sendmsg": "syscalls:sys_enter_sendmsg",
    "epoll_wait": "syscalls:sys_enter_epoll_wait", "epoll_pwait": "syscalls:sys_enter_epoll_pwait",
    "epoll_ctl": "syscalls:sys_enter_epoll_ctl", "futex": "syscalls:sys_enter_futex",
    "all": "raw_syscalls:sys_enter",
}
# Grouped for the report: socket reads, socket writes, waits for readiness.
GROUPS = {"reads": ("read", "readv", "recvfrom", "recvmsg"), "writes": ("write", "writev", "sendto", "sendmsg"),
          "epoll waits": ("epoll_wait", "epoll_pwait"), "futex": ("futex",), "all": ("all",)}


def check_perf() -> None:
    """Refuse early, naming what is missing, rather than after the start-up of every target."""
    exe = shutil.which("perf")
    if exe is None:
        raise SystemExit("--syscalls needs perf (Debian: linux-perf)")
    probe = subprocess.run([exe, "stat", "-x", ",", "-e", EVENTS["all"], "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        raise SystemExit(f"--syscalls: perf cannot count syscall tracepoints here: {probe.stderr.strip()[:300]}")


def syscalls_start(pid: int, out: Path) -> subprocess.Popen:
    proc = subprocess.Popen(["perf", "stat", "-x", ",", "-o", str(out), "-e", ",".join(EVENTS.values()),
                             "-p", ",".join(map(str, tree(pid)))],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.3)  # attached before the burst starts
    return proc


def syscalls_stop(proc: subprocess.Popen, out: Path) -> dict[str, int]:
    """Counts by EVENTS name (perf writes them on SIGINT)."""
    proc.send_signal(signal.SIGINT)
    proc.wait(30)
    return parse_counts(out.read_text())


def parse_counts(text: str) -> dict[str, int]:
    """``perf stat -x ,`` output: ``count,unit,event,...`` per line; "<not counted>" lines left out."""
    names = {v: k for k, v in EVENTS.items()}
    counts: dict[str, int] = {}
    for line in text.splitlines():
        fields = line.split(",")
        if len(fields) >= 3 and fields[2] in names and fields[0].strip().isdigit():
            counts[names[fields[2]]] = int(fields[0])
    return counts


def per_token(counts: dict[str, int], tokens: int) -> dict[str, float]:
    """Calls per streamed token by GROUPS."""
    return {g: round(sum(counts.get(k, 0) for k in keys) / max(tokens, 1), 3) for g, keys in GROUPS.items()}
