"""What the load client costs: load.py's hand-written aiohttp client vs NVIDIA's aiperf, same worker, same load.

    python bench/worker/load_clients.py [--concurrency 64] [--seconds 8] [--speedup 16] [--rounds 2]

Both clients keep ``--concurrency`` streaming /v1/completions requests (``--max-tokens``
each, ignore_eos) in flight for ``--seconds`` against one ``pdserve worker``, in turn,
``--rounds`` times (order alternating). For each it reports what the worker streamed
(tokens/s), the worker's streamed tokens per CPU-second, and the client's own CPU per
1000 streamed tokens, all over the window in which requests were in flight (aiperf's
window comes from its records' wall-clock times; its tens of seconds of start-up are
outside it). CPU is read from /proc every 0.2 s (the whole aiperf process group).
On a 2-core machine shared by client and server, the client's CPU is taken from the
server being measured: this is why bench/worker/load.py, bench/router/overhead.py and
bench/router/burst.py keep light hand-written clients (see bench/worker/README.md).
Writes load_clients_results.{json,md} to --out-dir.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from pdserve.loadgen.aiperf_run import find_aiperf
from pdserve.tokenization.testing import build_bpe_tokenizer
from pdserve.worker.testing import start_worker

sys.path.insert(0, str(Path(__file__).parent))
import load  # noqa: E402  (its client: the one compared)

MODEL = "llama"


def group_cpu_s(pgid: int) -> float:
    """utime + stime of every live process in a process group (aiperf's services)."""
    total = 0.0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            f = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(f[2]) == pgid:
            total += (int(f[11]) + int(f[12])) / load.CLK_TCK
    return total


class Sampler:
    """(wall time, worker CPU, client CPU) every ``period`` seconds in a thread."""

    def __init__(self, worker_pid: int, client_cpu, period: float = 0.2) -> None:  # type: ignore[no-untyped-def]
        self.rows: list[tuple[float, float, float]] = []
        self._stop = threading.Event()
        self._worker, self._client, self._period = worker_pid, client_cpu, period
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.rows.append((time.time(), load.cpu_seconds(self._worker), self._client()))
            self._stop.wait(self._period)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def between(self, t0: float, t1: float, col: int) -> float:
        """CPU seconds of column ``col`` over [t0, t1], linearly interpolated between samples."""
        def at(t: float) -> float:
            rows = self.rows
            for a, b in zip(rows, rows[1:]):
                if a[0] <= t <= b[0]:
                    return a[col] + (b[col] - a[col]) * (t - a[0]) / max(b[0] - a[0], 1e-9)
            return rows[0][col] if t < rows[0][0] else rows[-1][col]
        return at(t1) - at(t0)


def run_aiohttp(url: str, pid: int, args: argparse.Namespace) -> dict[str, float]:
    me = os.getpid()
    with Sampler(pid, lambda: load.cpu_seconds(me)) as s:
        t0 = time.time()
        tokens, requests = asyncio.run(load.drive(url, args.concurrency, args.seconds, args.max_tokens))
        t1 = time.time()
        time.sleep(0.3)
    return _row("aiohttp (load.py)", s, t0, t1, tokens, requests)


def run_aiperf(url: str, pid: int, args: argparse.Namespace, exe: str, tok: str, work: Path) -> dict[str, float]:
    art = work / f"aiperf-{time.monotonic_ns()}"
    cmd = [exe, "profile", "--model", MODEL, "--url", url, "--endpoint-type", "completions", "--streaming",
           "--tokenizer", tok, "--concurrency", str(args.concurrency), "--benchmark-duration", f"{args.seconds:g}",
           "--benchmark-grace-period", "30", "--isl", "200", "--isl-stddev", "0", "--osl", str(args.max_tokens),
           "--osl-stddev", "0", "--extra-inputs", "ignore_eos:true", "--random-seed", "1",
           "--artifact-dir", str(art), "--export-level", "records", "--ui-type", "none",
           "--no-server-metrics", "--no-gpu-telemetry"]
    with open(work / "aiperf_output.txt", "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        with Sampler(pid, lambda: group_cpu_s(proc.pid)) as s:
            rc = proc.wait(args.seconds + 600)
    if rc != 0:
        raise RuntimeError(f"aiperf exited with {rc}: {(work / 'aiperf_output.txt').read_text()[-2000:]}")
    starts, ends, tokens = [], [], 0
    for line in (art / "profile_export.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec.get("error") or rec["metadata"].get("benchmark_phase") != "profiling":
            continue
        starts.append(rec["metadata"]["request_start_ns"] / 1e9)
        ends.append(rec["metadata"]["request_end_ns"] / 1e9)
        m = rec["metrics"]
        tokens += int((m.get("usage_completion_tokens") or m["output_sequence_length"])["value"])
    return _row(f"aiperf {find_version(art)}", s, min(starts), max(ends), tokens, len(starts))


def find_version(art: Path) -> str:
    try:
        return str(json.loads((art / "profile_export_aiperf.json").read_text()).get("aiperf_version", ""))
    except (OSError, ValueError):
        return ""


def _row(client: str, s: Sampler, t0: float, t1: float, tokens: int, requests: int) -> dict[str, float]:
    wall = t1 - t0
    worker_cpu, client_cpu = s.between(t0, t1, 1), s.between(t0, t1, 2)
    return {"client": client, "window_s": wall, "requests": requests, "tokens": tokens,  # type: ignore[dict-item]
            "tokens_per_s": tokens / wall, "worker_tokens_per_cpu_s": tokens / max(worker_cpu, 1e-9),
            "worker_cpu_cores": worker_cpu / wall, "client_cpu_cores": client_cpu / wall,
            "client_cpu_ms_per_1k_tokens": 1e6 * client_cpu / max(tokens, 1), "load_average_1m": os.getloadavg()[0]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--speedup", type=float, default=16.0, help="the worker's simulated-GPU speed-up")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--aiperf", help="the aiperf program (default: beside this Python, PATH, or make load-env's)")
    ap.add_argument("--out-dir", type=Path, default=Path(__file__).parent)
    args = ap.parse_args(argv)
    exe = find_aiperf(args.aiperf)
    if exe is None:
        print("no aiperf program: make load-env (or pip install 'pdserve[load]')", file=sys.stderr)
        return 2
    rows: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        tok = str(build_bpe_tokenizer(Path(tmp) / "tok"))
        for r in range(args.rounds):
            for which in (("aiohttp", "aiperf") if r % 2 == 0 else ("aiperf", "aiohttp")):
                with start_worker(MODEL, speedup=args.speedup, args=["--max-model-len", "4096"]) as w:
                    row = (run_aiohttp(w.url, w.pid, args) if which == "aiohttp"
                           else run_aiperf(w.url, w.pid, args, exe, tok, Path(tmp)))
                row["round"] = r
                rows.append(row)
                print(json.dumps(row), flush=True)
    keys = ("tokens_per_s", "worker_tokens_per_cpu_s", "client_cpu_cores", "client_cpu_ms_per_1k_tokens")
    summary = {}
    for client in dict.fromkeys(str(r["client"]) for r in rows):
        mine = [r for r in rows if r["client"] == client]
        summary[client] = {k: {"median": statistics.median(r[k] for r in mine), "min": min(r[k] for r in mine),
                               "max": max(r[k] for r in mine)} for k in keys}
    args.out_dir.mkdir(parents=True, exist_ok=True)
    doc = {"command": "python bench/worker/load_clients.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "settings": {k: v for k, v in vars(args).items() if k not in ("out_dir", "aiperf")},
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpu_count": os.cpu_count(),
           "loadavg": Path("/proc/loadavg").read_text().split()[:3], "rows": rows, "summary": summary}
    (args.out_dir / "load_clients_results.json").write_text(json.dumps(doc, indent=1) + "\n")
    cols = ["client", "streamed tokens/s", "worker tokens per CPU-s", "client CPU (cores)", "client CPU ms per 1k tokens"]
    md = ["# Load client cost (generated by bench/worker/load_clients.py)", "",
          f"`{doc['command']}` on {doc['date']}, {os.cpu_count()} CPUs, load average {' '.join(doc['loadavg'])}. "
          f"{args.concurrency} streams x {args.max_tokens} tokens against one worker at speed-up {args.speedup:g}, "
          f"{args.seconds:g} s per run, {args.rounds} runs per client: median (min-max).", "",
          "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for client, v in summary.items():
        md.append("| " + " | ".join([client] + [f"{v[k]['median']:.0f} ({v[k]['min']:.0f}-{v[k]['max']:.0f})"
                                                if k != "client_cpu_cores" else
                                                f"{v[k]['median']:.2f} ({v[k]['min']:.2f}-{v[k]['max']:.2f})"
                                                for k in keys]) + " |")
    (args.out_dir / "load_clients_results.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
