#!/usr/bin/env python3
"""A prefill pool of c replicas behind the router, simulated, against the planner's two readings of its profile:
each replica alone (as sized before ``prefill_pool_queueing``) and as a pool (``pdserve.planner.core.pool_queueing``).

Each point is one pool in ``pdserve.sim`` (disaggregated, c prefill replicas, the router's default policy, a free
KV link) under Poisson arrivals whose prompt lengths are drawn from a trace, at a per-replica prompt-token load of
rho x the profile's flat-out rate at the trace's mean prompt; scored are the prefill TTFTs (arrival to KV ready) of
every request after the first 100. Next to the simulated mean and p99 stand what the derived profile (front end
included, as the benchmark's planner reads it) expects at the mean prompt: lone and pooled. A pooled reading at or
above the simulated one is on the safe side; the lone one is what the planner planned for before.

    python bench/planner/pool_queueing.py --trace /path/to/traces/azure_2023/AzureLLMInferenceTrace_conv.csv \\
        --model-profile llama-3.1-70b-tp4-h100 --out bench/planner/results/diagnosis/pool_queueing_70b.json
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from resultmeta import Run, write_result  # noqa: E402

from pdserve.planner.core.pool_queueing import DAMPING  # noqa: E402
from pdserve.planner.core.profile import CapacityProfile  # noqa: E402
from pdserve.planner.core.profile_model import derive_profile  # noqa: E402
from pdserve.sim.config import SimConfig  # noqa: E402
from pdserve.sim.metrics import percentile  # noqa: E402
from pdserve.sim.simulator import run_simulation  # noqa: E402
from pdserve.sim.traces import Trace, TraceRequest, load_trace  # noqa: E402

SCHEMA = "pdserve.planner-pool-queueing/1"


def poisson(isls: list[int], tokens_per_s: float, n: int, seed: int) -> Trace:
    """``n`` requests at ``tokens_per_s`` prompt tokens/s on average, prompts drawn from ``isls``."""
    rng = random.Random(seed)
    rate = tokens_per_s / statistics.mean(isls)
    t, reqs = 0.0, []
    for i in range(n):
        t += rng.expovariate(rate)
        reqs.append(TraceRequest(index=i, arrival_s=t, input_tokens=rng.choice(isls), output_tokens=2))
    return Trace(requests=tuple(reqs), format="synthetic", source=f"poisson, {len(isls)} trace prompts, seed {seed}",
                 sha256="0" * 64)


def expected_p99_ms(prof: CapacityProfile, isl: float, load: float, c: int) -> float:
    """The profile's tail TTFT at a per-replica load, as one of ``c`` (lone for 1): read off prefill_capacity's
    inverse, the SLO whose capacity is this load (bisection; the profile's curves rise with the load)."""
    lo, hi = 1.0, 600_000.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if (prof.prefill_capacity(isl, mid, c) or 0.0) < load else (lo, mid)
    return hi


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, required=True, help="prompt lengths from this trace (its first --prompts)")
    ap.add_argument("--prompts", type=int, default=6000)
    ap.add_argument("--model-profile", required=True)
    ap.add_argument("--pools", type=int, nargs="+", default=[1, 2, 3, 5, 8])
    ap.add_argument("--rho", type=float, nargs="+", default=[0.7, 0.85, 0.92])
    ap.add_argument("--requests-per-replica", type=int, default=1200)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    run = Run()
    isls = [r.input_tokens for r in load_trace(args.trace).requests[: args.prompts]]
    isl = statistics.mean(isls)
    prof = derive_profile(args.model_profile, kv_link_gbps=100.0, include_frontend=True)
    flat_out = prof.prefill_saturated(isl)
    assert flat_out, f"the profile does not cover ISL {isl:.0f}"
    rows = []
    for c in args.pools:
        cfg = SimConfig(topology="disagg", prefill_instances=c, decode_instances=c, profile=args.model_profile,
                        kv_link_gbps=1e6)
        for rho in args.rho:
            ttfts: list[float] = []
            for seed in range(args.seeds):
                res = run_simulation(poisson(isls, c * rho * flat_out, args.requests_per_replica * c, seed), cfg)
                done = sorted((r for r in res.records if r.prefill_done_s >= 0), key=lambda r: r.arrival_s)[100:]
                ttfts += [r.prefill_done_s - r.arrival_s for r in done]
            load = rho * flat_out
            row = {"replicas": c, "rho": rho, "requests": len(ttfts),
                   "sim_mean_ms": round(1000 * statistics.mean(ttfts), 1),
                   "sim_p99_ms": round(1000 * (percentile(sorted(ttfts), 99) or 0.0), 1),
                   "lone_mean_ms": round(prof.expected_ttft_ms(isl, load) or 0.0, 1),
                   "pool_mean_ms": round(prof.expected_ttft_ms(isl, load, c) or 0.0, 1),
                   "lone_p99_ms": round(expected_p99_ms(prof, isl, load, 1), 1),
                   "pool_p99_ms": round(expected_p99_ms(prof, isl, load, c), 1)}
            rows.append(row)
            print(row, flush=True)
    write_result(args.out, {
        "schema": SCHEMA, "model_profile": args.model_profile, "trace": str(args.trace.name), "prompts": len(isls),
        "mean_isl": round(isl, 1), "flat_out_tokens_per_s": round(flat_out, 1), "damping": DAMPING,
        "capacity_within_2s_per_replica": {str(c): round(prof.prefill_capacity(isl, 2000, c) or 0.0, 1)
                                           for c in args.pools},
        "rows": rows}, run)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
