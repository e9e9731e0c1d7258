"""burst.py's router CPU reading: the scheduler's nanoseconds, checked against /proc's clock ticks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "bench" / "router"))

from burst_measure import cpu_ns, cpu_split  # noqa: E402
from procs import TICK  # noqa: E402

pytestmark = pytest.mark.skipif(not Path("/proc/self/schedstat").exists(), reason="the kernel keeps no schedstat")

# Spins (in ``n`` threads, or the main thread when n is 0), says so with its main thread's and its whole process's
# CPU seconds by the kernel's own clocks (the process clock keeps threads that ended), then waits for stdin.
SPIN = """
import sys, threading, time
def spin():
    # Each spinner until its own thread has 0.3 s of CPU, the main thread (n == 0) until the process has 0.5 s.
    clock, limit = (time.thread_time, 0.3) if {n} else (time.process_time, 0.5)
    while clock() < limit:
        pass
threads = [threading.Thread(target=spin) for _ in range({n})]
for t in threads: t.start()
[t.join() for t in threads] if threads else spin()
# join() returns when a thread's Python code is done, not when the kernel has let its task go: under load an ended
# spinner's task (and its nanoseconds) still showed in /proc (session 22's fresh-clone CI read main + 0.3 s).
import os
deadline = time.monotonic() + 10
while len(os.listdir("/proc/self/task")) > 1 and time.monotonic() < deadline:
    time.sleep(0.01)
print("spun", time.thread_time(), time.process_time(), flush=True)
sys.stdin.read()
"""


def _read(threads: int) -> tuple[tuple[int, frozenset[str]] | None, float, float, float]:
    """(cpu_ns, cpu_split's ticks, the main thread's and the process's CPU seconds as the child read them)."""
    child = subprocess.Popen([sys.executable, "-c", SPIN.format(n=threads)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        word, main, process = child.stdout.readline().split()
        assert word == "spun"
        ns = cpu_ns(child.pid)
        user, kernel = cpu_split(child.pid)
    finally:
        child.communicate("")
    return ns, user + kernel, float(main), float(process)


def test_a_live_spinner_reads_the_same_in_nanoseconds_as_in_ticks() -> None:
    ns, ticks, _, _ = _read(0)
    assert ns is not None
    assert ns[0] / 1e9 >= 0.5
    # The same CPU time in both clocks, to the coarser one's resolution (a tick per reading of user and kernel).
    assert abs(ns[0] / 1e9 - ticks) <= 2.0 / TICK + 0.01
    assert len(ns[1]) == 1


def test_threads_are_summed_and_named_so_that_one_that_ended_is_noticed() -> None:
    ns, ticks, main, process = _read(2)
    assert ns is not None
    # The two spinners ended: their nanoseconds left with them (the ticks keep them), and the
    # set of threads read says so: burst_once then falls back to the ticks for that burst.
    assert ticks >= 0.6 - 2.0 / TICK
    # What is left is the main thread's own time, whatever it took (start-up under load): read against the kernel's
    # own clocks, not the ticks (in a loaded fresh-clone CI the ticks read 0.61 s for a process whose main thread
    # alone had 0.32 s besides the spinners' 0.6 s, and the old bound against the ticks failed). The process clock
    # keeps the spinners, so its excess over the nanoseconds read is their 0.6 s.
    assert main - 0.005 <= ns[0] / 1e9 <= main + 0.05
    assert process - ns[0] / 1e9 >= 0.6 - 0.05
    assert len(ns[1]) == 1
