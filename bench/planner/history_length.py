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
history and traffic; a history effect no larger than that spread is not told from the phase.

    python bench/planner/history_length.py --traces /path/to/traces --jobs 2 \\
        --files bench/planner/results/heldout/*/*.json bench/planner/results/8b_1gpu/bursty_seed*.json \\
        --phases 4 --out bench/planner/results/diagnosis/history_length.json
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import report  # noqa: E402
from recorded import recorded_argv  # noqa: E402
from resultmeta import Run, write_result  # noqa: E402
from settings_sweep import load_planner, read_against_best  # noqa: E402

SCHEMA = "pdserve.planner-history-length/1"


def flag(argv: list[str], name: str) -> str | None:
    """The value of ``name`` in a recorded command (None: not given)."""
    return argv[argv.index(name) + 1] if name in argv else None


def with_history(argv: list[str], seconds: float) -> list[str]:
    """``argv`` with ``--history`` set to ``seconds``."""
    out = list(argv)
    if "--history" in out:
        out[out.index("--history") + 1] = f"{seconds:g}"
    else:
        out += ["--history", f"{seconds:g}"]
    return out


def service_history_s(argv: list[str]) -> float | None:
    """The history a planner in service would have at the window: its memory span, or for a trace window all the
    trace before it where that is shorter. None where that is no longer than the recorded history, or where the
    run was recorded without history (it scores from its start after a warm-up: another window with history)."""
    import evaluate

    from pdserve.planner.core.policy_config import PolicyConfig

    args = evaluate.build_parser().parse_args([*argv, "--out", "/dev/null"])

    if not args.history:
        return None
    memory = PolicyConfig.history_len * args.interval
    longest = memory if args.trace is None else min(memory, args.start)
    return longest if longest > (args.history or 0.0) + 1e-9 else None


def aligned_first_tick(rec_first_arrival: float, rec_scored_from: float, svc_first_arrival: float,
                       svc_scored_from: float, interval: float) -> float:
    """The service replay's first tick such that its ticks fall at the recorded replay's instants (the recorded
    one ticks one interval after its first arrival, then every interval; both replays' scored windows start at the
    same moment of the trace)."""
    base = svc_scored_from - rec_scored_from + rec_first_arrival + interval  # the recorded first tick, in svc time
    off = (base - svc_first_arrival) % interval
    return svc_first_arrival + (off if off > 1e-9 else interval)


def replay(job: tuple[str, list[str], float, int]) -> dict:
    """One file: the shipped planner after its recorded history, after ``seconds`` of it (ticks at the recorded
    instants), and after its recorded history with the ticks' phase shifted by each of ``phases - 1`` fractions of
    an interval."""
    path, argv, seconds, phases = job
    from replays import run_policy

    from pdserve.planner.core.policy import PlannerPolicy
    from pdserve.planner.core.sim_hook import PlannerAutoscaler

    loaded = {"recorded": load_planner(argv), "service": load_planner(with_history(argv, seconds))}
    (_, rtrace, rs, rfeas, _, _), (_, strace, _, sfeas, _, _) = loaded["recorded"], loaded["service"]
    rec_t0, interval = rtrace.requests[0].arrival_s, rs.interval_s
    svc_first = aligned_first_tick(rec_t0, rfeas.scored_from_s, strace.requests[0].arrival_s, sfeas.scored_from_s,
                                   interval)
    plan = [("recorded", "recorded", None), ("service", "service", svc_first)]
    plan += [(f"phase_{j}_of_{phases}", "recorded", rec_t0 + interval * (1 + j / phases)) for j in range(1, phases)]
    out, scored = {}, {}
    for name, which, first in plan:
        args, trace, s, feas, cfg, prof = loaded[which]
        s = dataclasses.replace(s, first_tick_s=first)
        t0 = time.perf_counter()
        r = run_policy(trace, s, PlannerAutoscaler(PlannerPolicy(cfg, prof)), (1, 1), args.warmup, feas=feas)[0]
        # the scored requests (after the warm-up), relative times and lengths: the same window in every replay
        window = [(round(q.arrival_s - args.warmup, 6), q.input_tokens, q.output_tokens)
                  for q in trace.requests if q.arrival_s >= args.warmup]
        scored[name] = hashlib.sha256(repr(window).encode()).hexdigest()[:16]
        out[name] = {"history_s": args.history, "first_tick_s": first,
                     "ticks_from_scored_start_mod_interval": round(
                         ((first if first is not None else trace.requests[0].arrival_s + interval)
                          - feas.scored_from_s) % interval, 3),
                     "attainment_after_warmup": r["attainment_after_warmup"],
                     "gpu_hours": r["gpu_hours"], "max_prefill": r["max_prefill"], "max_decode": r["max_decode"],
                     "sim_wall_s": round(time.perf_counter() - t0, 1)}
    return {"file": path, "trace_sha256": rtrace.sha256, "scored_requests": scored, "replays": out}


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
    jobs, docs, skipped = [], {}, []
    for f in args.files:
        d = json.loads(f.read_text())
        av = recorded_argv(d["meta"]["command"], args.traces)
        seconds = service_history_s(av)
        if seconds is None or "planner" not in d["results"]:
            skipped.append(str(f))
            continue
        jobs.append((str(f), av, seconds, max(args.phases, 1)))
        docs[str(f)] = d
    rows = []
    with ProcessPoolExecutor(max(args.jobs, 1)) as ex:
        for row in ex.map(replay, jobs):
            d = docs[row["file"]]
            committed = d["results"]["planner"]
            read_against_best(row, d)
            row["same_scored_requests"] = len(set(row["scored_requests"].values())) == 1
            if not row["same_scored_requests"]:  # another window: no multiple of this file's best
                for name, h in row["scored_requests"].items():
                    if h != row["scored_requests"]["recorded"]:
                        row["replays"][name] |= {"gpu_hours_vs_best": None, "meets_target": False}
            rec = row["replays"]["recorded"]
            row["recorded_is_committed"] = (row["same_trace"] and rec["attainment_after_warmup"] == committed[
                "attainment_after_warmup"] and abs(rec["gpu_hours"] - committed["gpu_hours"]) < 1e-9)
            rows.append(row)
            cells = "  ".join(f"{n} ({r['history_s']:g} s) {100 * r['attainment_after_warmup']:.2f} % "
                              f"{'-' if r['gpu_hours_vs_best'] is None else format(r['gpu_hours_vs_best'], '.3f')}x"
                              f"{' met' if r['meets_target'] else ''}" for n, r in row["replays"].items())
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
