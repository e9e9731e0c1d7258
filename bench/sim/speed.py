"""Simulator speed: replay a whole trace on 4P4D and report simulated requests per second.

    flock /tmp/pdserve-bench.lock taskset -c 1 .venv/bin/python bench/sim/speed.py \
        --trace /work/shared/data/traces/azure_2023/AzureLLMInferenceTrace_conv.csv
    flock /tmp/pdserve-bench.lock taskset -c 1 .venv/bin/python bench/sim/speed.py \
        --trace /work/shared/data/traces/mooncake/conversation_trace.jsonl

Wall time is the replay only (trace loading is timed separately). The result is
appended to bench/sim/results/speed.json keyed by the trace's file name.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pdserve.sim.config import SimConfig, parse_layout
from pdserve.sim.simulator import run_simulation
from pdserve.sim.traces import load_trace

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, required=True)
    ap.add_argument("--config", default="4p4d", help="layout (default 4p4d)")
    ap.add_argument("--profile", default="llama-3.1-8b-h100")
    ap.add_argument("--policy", default="kv_aware")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "speed.json")
    args = ap.parse_args()
    con = Console()
    t0 = time.perf_counter()
    trace = load_trace(args.trace).head(args.limit)
    load_s = time.perf_counter() - t0
    cfg = SimConfig(**parse_layout(args.config), profile=args.profile, policy=args.policy)
    cpu0 = resource.getrusage(resource.RUSAGE_SELF).ru_utime
    t1 = time.perf_counter()
    with Progress(TextColumn(f"replaying {args.trace.name} on {cfg.label}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=con, transient=True) as prog:
        task = prog.add_task("", total=len(trace.requests))
        res = run_simulation(trace, cfg, progress=lambda i, n: prog.update(task, completed=i))
    wall = time.perf_counter() - t1
    cpu = resource.getrusage(resource.RUSAGE_SELF).ru_utime - cpu0
    s = res.summary
    row = {
        "trace": args.trace.name,
        "trace_sha256": trace.sha256,
        "config": cfg.label,
        "profile": args.profile,
        "policy": args.policy,
        "requests": s.requests,
        "finished": s.finished,
        "output_tokens": sum(r.output_tokens for r in trace.requests),
        "engine_steps": res.steps,
        "load_s": round(load_s, 3),
        "replay_wall_s": round(wall, 3),
        "replay_cpu_s": round(cpu, 3),
        "simulated_requests_per_s_wall": round(s.requests / wall, 1),
        "simulated_requests_per_s_cpu": round(s.requests / cpu, 1),
        "simulated_seconds": round(res.end_time_s, 1),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
        "cpu_affinity": sorted(os.sched_getaffinity(0)),  # [1] under `taskset -c 1`: one core
        "python": platform.python_version(),
        "attainment": s.attainment,
        "ttft_p50_s": s.ttft["p50"],
        "tpot_p50_s": s.tpot["p50"],
        "prefix_hit_ratio": s.prefix_hit_ratio,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    doc = json.loads(args.out.read_text()) if args.out.exists() else {}
    doc[f"{args.trace.name}:{cfg.label}"] = row
    args.out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    con.print(json.dumps(row, indent=2))


if __name__ == "__main__":
    main()
