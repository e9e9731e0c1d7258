#!/usr/bin/env python3
"""Where the planner spends GPU-hours that the best schedule does not, and a planner variant beside it.

``where`` (no simulation, read from committed ``evaluate.py`` result files): per run, the scored
window's replica-intervals (one replica held for one 30 s tick) of the planner, the best schedule
found, static and the causal reference, per pool; the planner's excess over the best split into
ticks where the best schedule sits at its floor of 1P1D (capacity standing between bursts: no
burst that needs it arrives for a start-up) and the other ticks (during bursts); and the
planner's prefill replica-intervals before the scored window (the history replay, where the
bursts that found it cold were), which the scored GPU-hours do not show.

``variants`` (simulation): ``evaluate.py --policies <variants>`` on each run with exactly the
suite's flags (``suite.traces``, ``suite.SETUPS``, ``suite.history_args``), GPU-hours as a multiple
of the best schedule's in the committed file (only where the replayed trace's sha256 matches it;
``--reference`` adds a file for a run the committed folder lacks: its best's GPU-hours, its
command and commit are copied in), plus the same history-window prefill replica-intervals.
A held-out window is named ``heldout/SETUP/TRACE`` (``suite.HELDOUT``'s flags and history).

    python bench/planner/burst_cost.py --traces /work/shared/data/traces \\
        --reference 8b_1gpu/bursty_seed2=/tmp/s2_ref.json \\
        --out bench/planner/results/diagnosis/burst_cost_8b.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from resultmeta import Run, write_result  # noqa: E402
from suite import SETUPS, heldout_args, history_args, traces  # noqa: E402
from variants import NAMES  # noqa: E402

SCHEMA = "pdserve.planner-burst-cost/1"
RUNS = ["8b_1gpu/bursty_seed0", "8b_1gpu/bursty_seed1", "8b_1gpu/bursty_seed2", "8b_1gpu/bursty_seed3",
        "8b_1gpu/azure_conv_x1", "8b_1gpu/azure_conv_x4", "70b_tp4/azure_conv_x4"]
TUNED = {"8b_1gpu/bursty_seed0", "8b_1gpu/azure_conv_x1"}
COMMITTED = HERE / "results"  # the suite's complete set (session 9's partial folder until session 10)


def scored_from(doc: dict) -> float:
    return float(doc["trace"].get("history", {}).get("scored_from_s", 0.0))


def intervals(series: list, lo: float, hi: float = float("inf")) -> tuple[int, int]:
    """Prefill and decode replica-intervals of the ticks in (lo, hi] (each tick's size holds one interval)."""
    pts = [(p, d) for t, p, d in series if lo < t <= hi]
    return sum(p for p, _ in pts), sum(d for _, d in pts)


def where(doc: dict) -> dict:
    """The planner's excess over the best schedule, scored window, by pool and by what the best does then."""
    r, h = doc["results"], scored_from(doc)
    best = {t: (p, d) for t, p, d in r["best"]["series"]["replicas"]}
    floor = {"prefill": 0, "decode": 0, "ticks": 0}
    burst = {"prefill": 0, "decode": 0, "ticks": 0}
    for t, p, d in r["planner"]["series"]["replicas"]:
        if t <= h or t not in best:
            continue
        bp, bd = best[t]
        part = floor if (bp, bd) == (1, 1) else burst
        part["prefill"] += p - bp
        part["decode"] += d - bd
        part["ticks"] += 1
    ticks = sum(1 for t, _, _ in r["planner"]["series"]["replicas"] if t > h)

    def held(name: str) -> tuple[int, int]:
        if name == "static":  # a fixed size: its series holds only the window's two ends
            p, d = r[name]["size"]
            return p * ticks, d * ticks
        return intervals(r[name]["series"]["replicas"], h)

    sizes = {name: dict(zip(("prefill", "decode"), held(name)))
             | {"gpu_hours": round(r[name]["gpu_hours"], 4), "gpu_hours_vs_best": round(r[name]["gpu_hours_vs_best"], 3),
                "attainment_after_warmup": r[name]["attainment_after_warmup"]}
             for name in ("planner", "best", "static", "causal") if name in r}
    if "static" in r:
        sizes["static"]["size"] = r["static"].get("size")
    return {"replica_intervals": sizes, "planner_excess_while_best_at_1p1d": floor,
            "planner_excess_while_best_scaled": burst,
            "planner_prefill_intervals_before_scored_window": intervals(r["planner"]["series"]["replicas"], 0.0, h)[0]
            if h else None}


def evaluate(key: str, policies: list[str], trace_root: Path, workdir: Path, *, duration: float | None = None,
             history: float | None = None) -> dict:
    """One evaluate.py run with the suite's flags (``duration`` / ``history``: shorter, for the smoke test)."""
    setup, trace = key.removeprefix("heldout/").split("/")
    out = workdir / f"{setup}__{trace}.json"
    if key.startswith("heldout/"):  # a held-out window: its own trace flags and history (suite.HELDOUT)
        window = heldout_args(trace_root, setup, trace)
    else:
        hist = history_args(setup, trace) if history is None else (["--history", f"{history:g}"] if history > 0 else [])
        window = [*traces(trace_root)[trace], *hist]
    cmd = [sys.executable, str(HERE / "evaluate.py"), *window, *SETUPS[setup],
           *(["--duration", f"{duration:g}"] if duration else []),
           "--trace-id", trace, "--policies", *policies, "--out", str(out)]
    subprocess.run(cmd, check=True)
    return json.loads(out.read_text())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", type=Path, default=Path("/work/shared/data/traces"), help="suite.py's trace root")
    ap.add_argument("--committed", type=Path, default=COMMITTED, help="the committed result folder to compare with")
    ap.add_argument("--reference", nargs="*", default=[], metavar="SETUP/TRACE=FILE",
                    help="an evaluate.py file with 'best' for a run the committed folder lacks")
    ap.add_argument("--runs", nargs="*", default=RUNS)
    ap.add_argument("--variants", nargs="*", choices=NAMES, default=["planner", "planner_next"],
                    help="evaluate.py's planner variants (bench/planner/variants.py)")
    ap.add_argument("--duration", type=float, help="replay this many seconds instead of the suite's (smoke runs)")
    ap.add_argument("--history", type=float, help="seconds of history instead of the suite's (0: none; smoke runs)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    run = Run()
    refs = {k: Path(v) for k, v in (x.split("=", 1) for x in args.reference)}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for key in args.runs:
            src = refs.get(key, args.committed / f"{key}.json")  # SETUP/TRACE or heldout/SETUP/TRACE
            ref = json.loads(src.read_text()) if src.exists() else None
            row: dict = {"run": key, "tuned_on": key in TUNED,
                         "reference": None if ref is None else {
                             "file": str(src.relative_to(HERE.parents[1])) if src.is_relative_to(HERE.parents[1]) else str(src),
                             "command": ref["meta"]["command"], "commit": ref["meta"]["commit"],
                             "dirty": ref["meta"].get("dirty"), "sha256": ref["trace"]["sha256"],
                             "best_gpu_hours": ref["results"]["best"]["gpu_hours"],
                             "best_attainment_after_warmup": ref["results"]["best"]["attainment_after_warmup"]}}
            if ref is not None and "planner" in ref["results"] and key.split("/")[-1].startswith("bursty"):
                row["where"] = where(ref)
            doc = evaluate(key, args.variants, args.traces, Path(tmp), duration=args.duration, history=args.history)
            same = ref is not None and ref["trace"]["sha256"] == doc["trace"]["sha256"]
            h = scored_from(doc)
            row["variants"] = {
                name: {"attainment_after_warmup": r["attainment_after_warmup"], "attainment": r["attainment"],
                       "gpu_hours": round(r["gpu_hours"], 4), "max_prefill": r["max_prefill"], "max_decode": r["max_decode"],
                       "gpu_hours_vs_best": round(r["gpu_hours"] / ref["results"]["best"]["gpu_hours"], 3) if same else None,
                       "prefill_intervals_before_scored_window": intervals(r["series"]["replicas"], 0.0, h)[0] if h else None,
                       "sim_wall_s": r["sim_wall_s"]}
                for name, r in doc["results"].items()}
            row["sha256_matches_reference"] = same
            rows.append(row)
            print(json.dumps({k: row[k] for k in ("run", "variants")}), flush=True)
    write_result(args.out, {"schema": SCHEMA, "committed": str(args.committed.relative_to(HERE.parents[1]))
                            if args.committed.is_relative_to(HERE.parents[1]) else str(args.committed),
                            "variants_run": args.variants, "runs": rows}, run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
