"""One burst of ``burst.py``: N streams opened at one instant by the load processes
(``burst_client.py``), and what it measured: TTFT, TPOT, the longest wait between reads,
errors, and the router's CPU (its whole process tree: the total from the scheduler's
nanoseconds per thread, the user / kernel split from /proc's clock ticks) and context
switches over the burst."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from procs import TICK, _stat, pct, tree  # noqa: E402

HERE = Path(__file__).resolve().parent
MODEL = "mock-llama"
_numbered = [0]  # prompts numbered so far, over every burst of this run


def cpu_split(pid: int) -> tuple[float, float]:
    """(user, kernel) CPU seconds of a process tree, as overhead.cpu_seconds sums them: the
    process, its threads (the Rust routers' tokio workers) and its live descendants
    (``--processes N``)."""
    user = kernel = 0
    for p in tree(pid):
        try:
            f = _stat(p)
        except (FileNotFoundError, ProcessLookupError):
            continue  # exited meanwhile
        user += int(f[11])
        kernel += int(f[12])
    return user / TICK, kernel / TICK


def cpu_ns(pid: int) -> tuple[int, frozenset[str]] | None:
    """Nanoseconds on a CPU of every live thread of a process tree (the scheduler's own
    account, ``/proc/PID/task/TID/schedstat``) and which threads those were, or None where the
    kernel does not keep it. ``cpu_split``'s clock ticks are 10 ms: over a 256-stream burst
    (~0.2-0.3 s of router CPU) each reading is +/- one tick, +/- 4-5 % of the round's CPU per
    token. A thread that ends takes its nanoseconds with it (the ticks keep them), so a burst
    is read in nanoseconds only when the same threads were there before and after it."""
    if not Path("/proc/self/schedstat").exists():
        return None
    total = 0
    seen: set[str] = set()
    for p in tree(pid):
        try:
            tasks = list(Path(f"/proc/{p}/task").iterdir())
        except (FileNotFoundError, ProcessLookupError):
            continue  # exited meanwhile
        for task in tasks:
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (FileNotFoundError, ProcessLookupError):
                continue  # a thread that ended meanwhile
            seen.add(f"{p}/{task.name}")
    return total, frozenset(seen)


def switches(pid: int) -> int:
    """Context switches (voluntary + involuntary) of every thread of a process tree: how
    often the router went to sleep in epoll or was preempted, over the burst. A loop that
    wakes for fewer ready sockets per wake-up pays its fixed costs over fewer tokens."""
    total = 0
    for p in tree(pid):
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                for line in (task / "status").read_text().splitlines():
                    if "ctxt_switches:" in line:
                        total += int(line.split()[1])
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total


def burst_once(url: str, streams: int, procs: int, args: argparse.Namespace, pid: int | None,
               load_cpus: str | None) -> dict:
    """One burst of ``streams`` simultaneous streams against ``url``; per-burst numbers.
    Every burst's prompts are new (numbered on from the previous burst's): no router may
    answer a round from what it cached of an earlier round (prefix trees, memos, the
    piece cache), as a burst of new conversations would not let it."""
    first = _numbered[0]
    _numbered[0] += streams
    start_at = time.time() + args.lead_s
    cmd = [sys.executable, str(HERE / "burst_client.py"), "--url", url, "--start-at", f"{start_at:.6f}",
           "--max-tokens", str(args.max_tokens), "--prompt-words", str(args.prompt_words), "--model", MODEL,
           "--timeout", str(args.timeout)]
    if load_cpus:
        cmd = ["taskset", "-c", load_cpus, *cmd]
    sizes = [streams // procs + (1 if i < streams % procs else 0) for i in range(procs)]
    clients = [subprocess.Popen([*cmd, "--streams", str(n), "--offset", str(first + sum(sizes[:i]))],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i, n in enumerate(sizes)]
    # The router's CPU over the burst only: read it just before the clients open their streams.
    time.sleep(max(0.0, start_at - time.time() - 0.02))
    u0, k0 = cpu_split(pid) if pid else (0.0, 0.0)
    n0 = cpu_ns(pid) if pid else None
    s0 = switches(pid) if pid else 0
    outs = [c.communicate(timeout=args.timeout + 60) for c in clients]
    n1 = cpu_ns(pid) if pid else None
    u1, k1 = cpu_split(pid) if pid else (0.0, 0.0)
    s1 = switches(pid) if pid else 0
    ticks = (u1 - u0) + (k1 - k0)
    # The total from the scheduler's nanoseconds where there are any; the ticks only split it
    # into user and kernel time (a ratio of two tick counts: the share, not the total).
    exact = n0 is not None and n1 is not None and n0[1] == n1[1]
    cpu = (n1[0] - n0[0]) / 1e9 if exact and n0 is not None and n1 is not None else ticks
    late = time.time() - start_at
    ttft: list[float] = []
    e2e: list[float] = []
    gaps: list[float] = []  # per stream: its longest wait between reads after the first token
    tpot: list[float] = []  # per stream: (end - first token) / (tokens - 1)
    tokens, errors = 0, []
    for c, (out, err) in zip(clients, outs):
        if c.returncode != 0:
            raise RuntimeError(f"load client failed ({c.returncode}): {err.decode()[-500:]}")
        r = json.loads(out)
        ttft += [x for x in r["ttft_s"] if x is not None]
        e2e += [x for x in r["e2e_s"] if x is not None]
        gaps += [x for x in r.get("gap_max_s", []) if x is not None]
        tpot += [(e - t) / (n - 1) for t, e, n in zip(r["ttft_s"], r["e2e_s"], r["tokens"])
                 if t is not None and e is not None and n > 1]
        tokens += sum(r["tokens"])
        errors += r["errors"]
    ms = lambda v: None if v is None else round(v * 1000, 2)  # noqa: E731
    out = {"streams": streams, "ok": len(e2e), "errors": len(errors), "error_examples": sorted(set(errors))[:3],
           "ttft_p50_ms": ms(pct(ttft, 0.5)), "ttft_p99_ms": ms(pct(ttft, 0.99)), "ttft_max_ms": ms(max(ttft, default=None)),
           "e2e_p99_ms": ms(pct(e2e, 0.99)), "tpot_p50_ms": ms(pct(tpot, 0.5)), "tpot_p99_ms": ms(pct(tpot, 0.99)),
           "itl_max_p99_ms": ms(pct(gaps, 0.99)), "tokens": tokens, "wall_s": round(late, 3),
           "load_average_1m": round(os.getloadavg()[0], 2)}
    if pid:
        out["router_cpu_s"] = round(cpu, 3)
        out["router_cpu_us_per_token"] = round(cpu * 1e6 / max(tokens, 1), 2)
        out["router_cpu_clock"] = "schedstat_ns" if exact else "ticks"
        out["router_cpu_ticks_s"] = round(ticks, 3)  # the same CPU in clock ticks, for comparison
        out["router_kernel_share"] = round((k1 - k0) / ticks, 3) if ticks > 0 else None
        out["router_switches_per_token"] = round((s1 - s0) / max(tokens, 1), 4)
    return out
