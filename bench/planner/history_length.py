#!/usr/bin/env python3
"""The shipped planner on each committed window after the history a planner in service would have seen, not the
600-900 s the windows were run with: does the evaluation read the service's planner?

In service the planner remembers ``history_len`` intervals (240: two hours at 30 s, now also across a restart:
``core.warm_start``); the committed held-out windows replay 600 s before their start (20 intervals) and the bursty
runs 900 s, so its forecast, learnt release margin and burst memory start there from less than a running service
has. Each file's own command (``meta.command``) is replayed twice: as recorded (it must give the committed planner
row: the harness check) and with ``--history`` as long as the service's memory or, for a trace window, as all the
trace before the window's start where that is shorter. The scored requests are the same in both (the window's;
checked), so the GPU-hours read against the file's best schedule found, as ``settings_sweep.py`` reads them. On a
trace window the longer history ends in the recorded one's traffic; a bursty seed's is another draw of its history
stream (``bursty.with_history`` generates the whole span), so the traffic just before the window differs too.

The planner ticks every interval from a phase the simulator takes from the replay's first arrival, and a longer
history moves that first arrival: the service replay's ticks are put at the recorded replay's instants
(``SimConfig.first_tick_s``), so the two differ in history only. What the phase alone does is measured beside it
(``--phases N``): the recorded replay again with its ticks shifted by 1/N, 2/N, ... of an interval, the same
history and traffic; a history effect no larger than that spread is not told from the phase. The replays are
``committed.py``'s conditions (``settings_sweep.py`` replays settings under the same ones).

    python bench/planner/history_length.py --traces /path/to/traces --jobs 2 \\
        --files bench/planner/results/heldout/*/*.json bench/planner/results/8b_1gpu/bursty_seed*.json \\
        --phases 4 --out bench/planner/results/diagnosis/history_length.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import report  # noqa: E402
from committed import (Condition, cell, not_the_window, prepare, replay_files, same_as_committed,  # noqa: E402
                       scored_hash, service_history_s, ticks_from_scored_start)
from resultmeta import Run, write_result  # noqa: E402

SCHEMA = "pdserve.planner-history-length/1"


def replay(job: tuple[str, list[str], float, int]) -> dict:
    """One file: the shipped planner after its recorded history, after ``seconds`` of it (ticks at the recorded
    instants), and after its recorded history with the ticks' phase shifted by each of ``phases - 1`` fractions of
    an interval."""
    path, argv, seconds, phases = job
    from replays import run_policy

    from pdserve.planner.core.policy import PlannerPolicy
    from pdserve.planner.core.sim_hook import PlannerAutoscaler

    conds = [Condition(), Condition(service=True), *(Condition(False, j, phases) for j in range(1, phases))]
    out, scored = {}, {}
    prepared = prepare(argv, conds, seconds)
    for c, (args, trace, s, feas, cfg, prof) in prepared.runs.items():
        t0 = time.perf_counter()
        r = run_policy(trace, s, PlannerAutoscaler(PlannerPolicy(cfg, prof)), (1, 1), args.warmup, feas=feas)[0]
        scored[c.name] = scored_hash(trace, args.warmup)
        out[c.name] = {"history_s": args.history, "first_tick_s": s.first_tick_s,
                       "ticks_from_scored_start_mod_interval": ticks_from_scored_start(trace, s, feas),
                       "attainment_after_warmup": r["attainment_after_warmup"],
                       "gpu_hours": r["gpu_hours"], "max_prefill": r["max_prefill"], "max_decode": r["max_decode"],
                       "sim_wall_s": round(time.perf_counter() - t0, 1)}
    return {"file": path, "trace_sha256": prepared.recorded_sha, "recorded_scored": prepared.recorded_scored,
            "scored_requests": scored, "replays": out}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=Path, nargs="+", required=True, help="evaluate.py result files with a planner")
    ap.add_argument("--traces", type=Path, help="trace root, where a file's recorded trace path is not on this machine")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--phases", type=int, default=1, help="also replay as recorded with the ticks shifted by each "
                                                               "1/N of an interval (1: none)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    run = Run(argv if argv is None else [sys.argv[0], *argv])
    skipped: list[str] = []

    def job(path: str, av: list[str], d: dict) -> tuple | None:
        seconds = service_history_s(av)
        if seconds is None or "planner" not in d["results"]:
            skipped.append(path)
            return None
        return path, av, seconds, max(args.phases, 1)

    rows = []
    for row, d in replay_files(args.files, args.traces, job, replay, args.jobs):
        not_the_window(row, row.pop("recorded_scored"))  # another window: no multiple of this file's best
        row["recorded_is_committed"] = same_as_committed(row["replays"]["recorded"], d, row["same_trace"])
        rows.append(row)
        cells = "  ".join(cell(f"{n} ({r['history_s']:g} s)", r) for n, r in row["replays"].items())
        print(f"{row['file']}: {cells}{'' if row['recorded_is_committed'] else '  (recorded != committed)'}",
              flush=True)
    met = {n: sum(r["replays"][n]["meets_target"] for r in rows) for n in rows[0]["replays"]} if rows else {}
    write_result(args.out, {"schema": SCHEMA, "target": {
        "attainment_after_warmup": report.TARGET_ATTAINMENT, "gpu_hours_vs_best": report.TARGET_VS_BEST},
        "phases": max(args.phases, 1), "files_meeting_target": met, "skipped_no_longer_history": skipped,
        "rows": rows}, run)
    print(json.dumps({"files": len(rows), "files_meeting_target": met, "skipped": len(skipped)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
