"""Simulator speed: CPU per simulated request, side by side with Dynamo's offline replay.

    flock /tmp/pdserve-bench.lock .venv/bin/python bench/sim/speed.py \\
        --trace /work/shared/data/traces/mooncake/conversation_trace.jsonl --minutes 10 --config chunked:8 \\
        --runs 5 --dynamo-python .cache/peers-venv/bin/python --out bench/sim/results/speed_mooncake_chunked8.json

Both replay the same window (Mooncake-format: the same requests, arrival times and
512-token hash ids) on the same topology (``chunked:N``: N aggregated engines;
``XpYd``: X routed prefill + Y decode engines) with the same KV blocks per engine and
token budget, pdserve with ``--policy`` (kv_aware) and Dynamo with its kv_router (or
round_robin for ``--policy round_robin``). CPU time is the replay only (user + system
of this process around ``run_simulation``; of Dynamo's process around
``run_trace_replay``), trace loading and imports excluded. Runs alternate between the
two systems so load drift hits both; each is reported as median and range over
``--runs``, and the ratio is of the medians. ``taskset -c 1`` pins both to one core.

CPU time on a shared machine moves with its load; ``--instructions`` also counts each
system's instructions per replay under valgrind (cachegrind, no cache simulation), which
do not: the count of a process doing two replays minus that of one doing one (the same
trace loading and imports in both), for pdserve and for Dynamo. Instructions are not CPU
time (Python's interpreter runs fewer instructions per cycle than Rust), but they show a
change in pdserve's work whatever the load.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console

from pdserve.sim.config import SimConfig, parse_layout
from pdserve.sim.instance import PD_BATCHED_TOKENS
from pdserve.sim.simulator import Simulation
from pdserve.sim.traces import Trace, from_rows, load_trace

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from resultmeta import Run, spread, write_result  # noqa: E402


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def window(path: Path, start_min: float, minutes: float | None) -> Trace:
    full = load_trace(path)
    if minutes is None:
        return full
    lo, hi = start_min * 60, (start_min + minutes) * 60
    picked = [r for r in full.requests if lo <= r.arrival_s < hi]
    return from_rows([(r.arrival_s, r.input_tokens, r.output_tokens, r.hash_ids) for r in picked],
                     format=full.format, source=full.source, sha256=full.sha256)


def pdserve_run(trace: Trace, cfg: SimConfig) -> dict[str, float]:
    sim = Simulation(trace, cfg)
    c0, t0 = _cpu(), time.perf_counter()
    res = sim.run()
    cpu, wall = _cpu() - c0, time.perf_counter() - t0
    s = res.summary
    return {"cpu_s": cpu, "wall_s": wall, "requests": s.requests, "engine_steps": res.steps,
            "coasted_steps": sim.coasted_steps,
            "prefix_hit_ratio": s.prefix_hit_ratio or 0.0, "ttft_p50_s": s.ttft["p50"]}


def instructions(cmd: list[str]) -> int:
    """Instructions ``cmd`` executes (all its threads), counted by valgrind's cachegrind."""
    r = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null", *cmd],
                       capture_output=True, text=True, timeout=3600, check=False)
    m = re.search(r"I\s+refs:\s+([\d,]+)", r.stderr)
    if r.returncode != 0 or m is None:
        raise SystemExit(f"valgrind {' '.join(cmd[:3])} ... failed:\n{r.stderr[-3000:]}")
    return int(m.group(1).replace(",", ""))


def per_replay_instructions(cmd: list[str], runs_flag: str) -> int:
    """Instructions of one replay: ``cmd`` with two replays minus ``cmd`` with one."""
    return instructions([*cmd, runs_flag, "2"]) - instructions([*cmd, runs_flag, "1"])


def dynamo_cmd(args: argparse.Namespace, cfg: SimConfig, trace_path: Path, num_blocks: int) -> list[str]:
    cmd = [args.dynamo_python, str(HERE.parent / "router" / "dynamo_replay.py"), "--trace", str(trace_path),
           "--block-size", str(cfg.block_size), "--num-gpu-blocks", str(num_blocks),
           "--router-mode", "round_robin" if args.policy == "round_robin" else "kv_router"]
    if cfg.topology == "disagg":
        budget = str(max(PD_BATCHED_TOKENS, cfg.token_budget))  # as pdserve's P/D pools (sim/instance.py)
        return cmd + ["--prefill-workers", str(cfg.prefill_instances), "--workers", str(cfg.decode_instances),
                      "--token-budget", budget, "--prefill-budget", budget]
    return cmd + ["--workers", str(cfg.instances), "--token-budget", str(cfg.token_budget)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, required=True, help="Mooncake-format JSONL (Dynamo reads only that)")
    ap.add_argument("--start-minute", type=float, default=0.0)
    ap.add_argument("--minutes", type=float, default=None, help="window length (default: the whole trace)")
    ap.add_argument("--config", default="chunked:8", help="layout: chunked:N or XpYd (default chunked:8)")
    ap.add_argument("--profile", default="llama-3.1-8b-h100")
    ap.add_argument("--policy", default="kv_aware")
    ap.add_argument("--block-size", type=int, default=512)
    ap.add_argument("--token-budget", type=int, default=2048, help="max_num_batched_tokens (as routing_quality.py)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dynamo-python", default=None, help="a Python with ai-dynamo 1.6.1 (bench/router/README.md)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "speed.json")
    ap.add_argument("--instructions", action="store_true",
                    help="also count instructions per replay of both systems under valgrind (see above)")
    ap.add_argument("--replays-only", action="store_true",
                    help="internal (--instructions): run --runs pdserve replays, write nothing")
    args = ap.parse_args()
    run = Run(runs=args.runs)
    con = Console()
    trace = window(args.trace, args.start_minute, args.minutes)
    cfg = SimConfig(**parse_layout(args.config), profile=args.profile, policy=args.policy, block_size=args.block_size,
                    token_budget=args.token_budget)
    if args.replays_only:
        for _ in range(args.runs):
            Simulation(trace, cfg).run()
        return 0
    probe = Simulation(trace, cfg)
    pool = "prefill" if cfg.topology == "disagg" else "colocated"
    num_blocks = probe.instances[pool][0].engine.pool.num_blocks
    del probe
    mine: list[dict[str, float]] = []
    theirs: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="pdserve-speed-") as tmp:
        mooncake = Path(tmp) / "window.jsonl"
        mooncake.write_text("".join(json.dumps({
            "timestamp": round(1000 * r.arrival_s), "input_length": r.input_tokens, "output_length": r.output_tokens,
            "hash_ids": list(r.hash_ids)}) + "\n" for r in trace.requests))
        for i in range(args.runs):
            mine.append(pdserve_run(trace, cfg))
            con.print(f"run {i + 1}: pdserve {mine[-1]['cpu_s']:.2f} CPU-s")
            if args.dynamo_python:
                r = subprocess.run(dynamo_cmd(args, cfg, mooncake, num_blocks), capture_output=True, text=True,
                                   timeout=1800, check=False)
                if r.returncode != 0:
                    raise SystemExit(f"dynamo replay failed:\n{r.stderr[-3000:]}")
                d = json.loads(r.stdout.strip().splitlines()[-1])["runs"][0]
                theirs.append(d)
                con.print(f"run {i + 1}: dynamo  {d['cpu_s']:.2f} CPU-s")
        counted: dict[str, int] = {}
        if args.instructions:
            own = [sys.executable, str(Path(__file__).resolve()), "--trace", str(args.trace), "--start-minute",
                   str(args.start_minute), "--config", args.config, "--profile", args.profile, "--policy", args.policy,
                   "--block-size", str(args.block_size), "--token-budget", str(args.token_budget), "--replays-only",
                   *(["--minutes", str(args.minutes)] if args.minutes is not None else [])]
            counted["pdserve"] = per_replay_instructions(own, "--runs")
            if args.dynamo_python:
                counted["dynamo"] = per_replay_instructions(dynamo_cmd(args, cfg, mooncake, num_blocks), "--runs")
            con.print(f"instructions per replay: {counted}")
    n = len(trace.requests)
    doc: dict[str, object] = {
        "trace": args.trace.name, "trace_sha256": trace.sha256, "window_minutes": args.minutes,
        "start_minute": args.start_minute, "requests": n, "config": cfg.label, "profile": args.profile,
        "policy": args.policy, "block_size": args.block_size, "kv_blocks_per_worker": num_blocks,
        "pdserve": {
            "cpu_s": spread([m["cpu_s"] for m in mine]), "wall_s": spread([m["wall_s"] for m in mine]),
            "cpu_us_per_request": spread([1e6 * m["cpu_s"] / n for m in mine]),
            "engine_steps": mine[0]["engine_steps"],
            # steps run inside a coast (pdserve.sim.coast) rather than as events of their own
            "coasted_steps": mine[0]["coasted_steps"],
            "prefix_hit_ratio": round(mine[0]["prefix_hit_ratio"], 4),
            "ttft_p50_s": mine[0]["ttft_p50_s"],
        },
    }
    if theirs:
        dyn = {"cpu_s": spread([t["cpu_s"] for t in theirs]), "wall_s": spread([t["wall_s"] for t in theirs]),
               "cpu_us_per_request": spread([1e6 * t["cpu_s"] / n for t in theirs]),
               "prefix_hit_ratio": spread([t["prefix_hit_ratio"] for t in theirs])}
        doc["dynamo"] = dyn
        ratio = doc["pdserve"]["cpu_us_per_request"]["median"] / dyn["cpu_us_per_request"]["median"]  # type: ignore[index]
        doc["cpu_ratio_pdserve_over_dynamo"] = round(ratio, 3)
        doc["target"] = "pdserve CPU per simulated request <= 1.5x Dynamo's replay"
    if counted:
        ins: dict[str, object] = {"method": "valgrind cachegrind I refs: a process with 2 replays minus one with 1"}
        for k, v in counted.items():
            ins[k] = {"per_replay": v, "per_request": round(v / n)}
        if len(counted) == 2:
            ins["ratio_pdserve_over_dynamo"] = round(counted["pdserve"] / counted["dynamo"], 3)
        doc["instructions"] = ins
    write_result(args.out, doc, run)
    con.print(json.dumps({k: v for k, v in doc.items() if k in ("pdserve", "dynamo", "cpu_ratio_pdserve_over_dynamo")},
                         indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
