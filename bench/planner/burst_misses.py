#!/usr/bin/env python3
"""Where a planner variant loses a bursty trace, from the simulator's per-request records.

For each burst of a seeded bursty trace (``bursty.bursts``) and for the background between
them: requests after the warm-up, how many missed the SLO, and for the missed ones the
median wait from arrival to prefill done (the prefill queue) and from prefill done to the
first token (KV link + decode admission): which pool bound. Also, per burst, the replicas
each pool had when it started and when the planner first saw it (ordered then, ready one
start-up later), so "late" (capacity ordered after the burst) and "wrong" (capacity up but
too little, or in the other pool) read apart.

    python bench/planner/burst_misses.py --seeds 0 1 2 --variants planner planner_fit \
        --out bench/planner/results/diagnosis/burst_misses_8b.json

The variants are the ones ``evaluate.py`` runs (same configuration, same 8B 1-GPU setup).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from bursty import BurstySpec, bursts, bursty_trace  # noqa: E402
from evaluate import window_of  # noqa: E402
from references import Setup  # noqa: E402
from replays import Recorder  # noqa: E402
from resultmeta import Run, write_result  # noqa: E402

from pdserve.planner.core.policy import PlannerPolicy, PolicyConfig  # noqa: E402
from pdserve.planner.core.profile_model import derive_profile  # noqa: E402
from pdserve.planner.core.sim_hook import PlannerAutoscaler  # noqa: E402
from pdserve.sim.metrics import Slo  # noqa: E402
from pdserve.sim.simulator import run_simulation  # noqa: E402

# The variants as evaluate.py configured them when this script was written (burst budgets in s), set here over
# today's PolicyConfig defaults: so 'planner' here is evaluate.py's planner_irate, not the shipped planner, and
# planner_fit runs the absorb gate (0.5), which evaluate.py's planner_fit does only with --burst-absorb-fraction.
# Not read from bench/planner/variants.py (which would change what these names run here: a refactor left them).
# The last two are planner_fit's development variants: without the latency correction (does
# it inflate the reserve?), and ticking every 10 s (does reacting sooner catch more bursts?).
VARIANTS: dict[str, dict[str, float | bool | None]] = {
    "planner": {"burst_budget_s": None, "burst_fit_budget_s": None},
    "planner_burst": {"burst_budget_s": 0.0, "burst_fit_budget_s": None},
    "planner_fit": {"burst_budget_s": 2.0, "burst_fit_budget_s": 4.0},
    "planner_fit_no_correction": {"burst_budget_s": 2.0, "burst_fit_budget_s": 4.0, "correction": False},
    "planner_fit_10s": {"burst_budget_s": 2.0, "burst_fit_budget_s": 4.0, "interval_s": 10.0},
}


def _median(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 3) if xs else None


def diagnose(seed: int, variant: str, *, model: str, max_replicas: int, warmup_s: float,
             duration_s: float = 900.0) -> dict:
    trace = window_of(bursty_trace(seed, BurstySpec()), 0.0, duration_s)
    profile = derive_profile(model, kv_link_gbps=100.0)
    slo = Slo(ttft_s=2.0, tpot_s=0.05, target=0.99)
    s = Setup(model, profile, profile.prefill.tensor_parallel_size, profile.decode.tensor_parallel_size,
              max_replicas, max_replicas, slo, 30.0, 60.0, 100.0)
    cfg = PolicyConfig(**({"ttft_slo_ms": 2000.0, "itl_slo_ms": 50.0, "interval_s": 30.0, "prefill_max": max_replicas,
                           "decode_max": max_replicas, "prefill_tp": s.tp_p, "decode_tp": s.tp_d, "startup_s": 60.0}
                          | VARIANTS[variant]))  # type: ignore[arg-type]
    rec = Recorder(PlannerAutoscaler(PlannerPolicy(cfg, profile)))
    res = run_simulation(trace, s.sim_config(1, 1), autoscaler=rec)
    t0 = trace.requests[0].arrival_s
    found = [b for b in bursts(seed) if b["start_s"] < duration_s]

    def which(arrival: float) -> int:
        for i, b in enumerate(found):
            if b["start_s"] <= arrival - t0 <= b["start_s"] + b["duration_s"] + 1e-6:
                return i
        return -1

    def sizes_at(t: float) -> tuple[int, int]:
        cur = (1, 1)
        for at, p, d in rec.series:
            if at - t0 <= t:
                cur = (p, d)
        return cur

    groups: dict[int, list] = {}
    for r in res.records:
        if r.arrival_s >= t0 + warmup_s:
            groups.setdefault(which(r.arrival_s), []).append(r)
    rows = []
    for i in [*range(len(found)), -1]:
        rs = groups.get(i, [])
        if not rs:
            continue
        missed = [r for r in rs if not r.attains(slo)]
        row = {
            "burst": i if i >= 0 else "background", "requests": len(rs), "missed": len(missed),
            "median_wait_prefill_s": _median([r.prefill_done_s - r.arrival_s for r in missed if r.prefill_done_s >= 0]),
            "median_prefill_to_first_token_s": _median([r.first_token_s - r.prefill_done_s for r in missed
                                                        if r.first_token_s >= 0 and r.prefill_done_s >= 0]),
            "missed_on_tpot_only": sum(1 for r in missed if r.ttft <= slo.ttft_s),
        }
        if i >= 0:
            b = found[i]
            seen = next((at - t0 for at, _, _ in rec.series if at - t0 > b["start_s"]), None)
            row |= {"start_s": b["start_s"], "duration_s": b["duration_s"],
                    "replicas_at_start": list(sizes_at(b["start_s"])),
                    "first_tick_after_start_s": round(seen, 1) if seen is not None else None,
                    "replicas_ordered_then": list(sizes_at(seen)) if seen is not None else None}
        rows.append(row)
    warm = [r for r in res.records if r.arrival_s >= t0 + warmup_s]
    return {"seed": seed, "variant": variant, "attainment_after_warmup": sum(r.attains(slo) for r in warm) / len(warm),
            "gpu_hours": res.gpu_seconds / 3600, "groups": rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=["planner", "planner_fit"])
    ap.add_argument("--model-profile", default="llama-3.1-8b-h100")
    ap.add_argument("--max-replicas", type=int, default=16)
    ap.add_argument("--warmup", type=float, default=120.0)
    ap.add_argument("--duration", type=float, default=900.0, help="replay this many seconds of each trace (quick runs)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    run = Run()
    out = [diagnose(seed, v, model=args.model_profile, max_replicas=args.max_replicas, warmup_s=args.warmup,
                    duration_s=args.duration) for seed in args.seeds for v in args.variants]
    for d in out:
        print(f"seed {d['seed']} {d['variant']}: {100 * d['attainment_after_warmup']:.1f} % after warm-up, "
              f"{d['gpu_hours']:.2f} GPU-h")
        for g in d["groups"]:
            print("   ", g)
    write_result(args.out, {"schema": "pdserve.planner-burst-misses/1", "model_profile": args.model_profile,
                            "warmup_s": args.warmup, "runs": out}, run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
