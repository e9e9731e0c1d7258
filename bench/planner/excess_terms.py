#!/usr/bin/env python3
"""Why the planner holds replicas the best schedule found does not: each scored tick's excess attributed to what
set the planner's size at that tick.

``burst_cost.py where`` says *where* the excess is (between bursts or during them); this says *why*, from the
planner's own explanation at each tick. Each committed ``evaluate.py`` result file's window is replayed with the
shipped planner, built as ``committed.load_planner`` builds it (the file's own command, ``evaluate.planner_config``), and
read against the file's best schedule found, as ``settings_sweep.py`` reads it: the replayed trace must be the
file's (its sha256), or no attribution is made from it (exit status 1). A file run at an earlier planner is today's
planner on that window; ``same_as_committed_planner`` says whether its replica series is the file's ``planner``
series. Then, for each scored tick where the planner runs more replicas of a pool than the best schedule found, the
excess (in GPUs, one tick each) goes to:

* ``held_<gate>``: the policy wanted fewer this tick and a gate kept them, the last of ``PlannerPolicy._clamp``'s to
  apply: ``stabilised`` (scale-down stabilisation), ``rising`` (the hold on a rising prompt-token rate), ``queued``
  (requests still waiting in the pool), or ``hold_<key>`` for a whole decision held (stale metrics, ...);
* ``lag``: more replicas than the tick's decision asked for (a release not yet taken);
* the binding sizing term of the tick's decision otherwise (``PlannerPolicy``'s ``binding_prefill`` /
  ``binding_decode``: ``compute``, ``peak``, ``drain``, ``link``, ...), with the prefill ``compute`` term split in
  two: ``compute_forecast`` where the same term at the prompt-token rate arriving now (the router's rate window)
  would have asked for fewer replicas than the forecast did, ``compute`` where it would not (the headroom and the
  profile's SLO-bound capacity).

    python bench/planner/excess_terms.py --traces /path/to/traces --jobs 2 \\
        --files bench/planner/results/heldout/70b_tp4/*.json --out /tmp/excess.json
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import sys
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import report  # noqa: E402
from burst_cost import scored_from  # noqa: E402
from recorded import recorded_argv  # noqa: E402
from resultmeta import Run, write_result  # noqa: E402

SCHEMA = "pdserve.planner-excess-terms/1"
POOLS = ("prefill", "decode")


@dataclass(frozen=True)
class TickWhy:
    """What one planner decision says about its size, per pool (index 0 prefill, 1 decode)."""

    t: float  # seconds from the window's first arrival
    target: tuple[int, int]  # the decision's replicas
    want: tuple[int, int]  # what its sizing asked for before holds
    binding: tuple[str, str]  # the binding sizing term
    # The prefill compute term, and the same term at the prompt-token rate arriving now (None: not read).
    prefill_compute: float | None = None
    prefill_compute_arriving: float | None = None
    # Per pool, the gate that last kept replicas the sizing did not want (``PlannerPolicy._clamp``'s notes, in the
    # order it applies them: stabilised, rising, queued), or the whole decision's hold key; "" where none says.
    held_by: tuple[str, str] = ("", "")

    @staticmethod
    def gates(reason: str, hold_key: str | None) -> tuple[str, str]:
        """Which gate kept each pool's replicas, from a decision's reason and hold key."""
        out = []
        for pool in POOLS:
            gate = ""
            if "scale-down stabilised" in reason:
                gate = "stabilised"
            if f"{pool}: prompt tokens rising" in reason:
                gate = "rising"
            if f"{pool}: requests still queued" in reason:
                gate = "queued"
            out.append(gate or (f"hold_{hold_key}" if hold_key else ""))
        return out[0], out[1]

    @classmethod
    def of(cls, t: float, target: tuple[int, int], explanation: dict, reason: str = "",
           hold_key: str | None = None) -> TickWhy:
        demand = explanation.get("demand", {})
        terms = demand.get("terms", {})
        want = (int(demand.get("prefillReplicas", target[0])), int(demand.get("decodeReplicas", target[1])))
        pc, forecast, arriving = (terms.get("prefill_compute"), demand.get("prefillTokensPerS"),
                                  demand.get("arrivingPromptTokensPerS"))
        at_arriving = pc * arriving / forecast if pc is not None and forecast and arriving is not None else None
        return cls(t, target, want, (str(terms.get("binding_prefill", "none")), str(terms.get("binding_decode", "none"))),
                   pc, at_arriving, cls.gates(reason, hold_key))


def cause(why: TickWhy, pool: int, running: int) -> str:
    """Why ``running`` replicas of ``pool`` ran at this tick."""
    if running > why.target[pool]:
        return "lag"
    if why.held_by[pool].startswith("hold_"):  # the whole decision held before sizing: no want to compare with
        return f"held_{why.held_by[pool]}"
    if why.target[pool] > why.want[pool]:
        return f"held_{why.held_by[pool]}" if why.held_by[pool] else "held"
    term = why.binding[pool]
    if pool == 0 and term == "compute" and why.prefill_compute_arriving is not None:
        if math.ceil(why.prefill_compute_arriving - 1e-9) < why.target[0]:
            return "compute_forecast"
    return term


def at(series: list[tuple[float, int, int]], t: float) -> tuple[int, int]:
    """A replica series (``evaluate.py``'s ``(t, prefill, decode)``: each entry holds until the next; the best
    schedule and static record only their changes) read at ``t``; before its first entry, its first."""
    i = bisect.bisect_right([x[0] for x in series], t + 1e-6) - 1
    _, p, d = series[max(i, 0)]
    return p, d


def attribute(whys: list[TickWhy], planner: list[tuple[float, int, int]], best: list[tuple[float, int, int]],
              scored_from: float, gpus_per_replica: tuple[int, int]) -> dict:
    """The scored ticks' excess over the best schedule, per pool and cause, in GPU-ticks, with the best schedule's
    own GPU-ticks over the same ticks. A tick is a planner decision (``whys``); ``planner`` and ``best`` are
    ``evaluate.py`` replica series, read at each tick."""
    excess: dict[str, Counter] = {p: Counter() for p in POOLS}
    best_ticks = 0
    for why in whys:
        if why.t < scored_from - 1e-6:
            continue
        run, ref = at(planner, why.t), at(best, why.t)
        best_ticks += sum(n * g for n, g in zip(ref, gpus_per_replica))
        for i, pool in enumerate(POOLS):
            extra = run[i] - ref[i]
            if extra > 0:
                excess[pool][cause(why, i, run[i])] += extra * gpus_per_replica[i]
    return {"best_gpu_ticks": best_ticks,
            "excess_gpu_ticks": {p: dict(sorted(c.items())) for p, c in excess.items()},
            "excess_share_of_best": round(sum(sum(c.values()) for c in excess.values()) / best_ticks, 4)
            if best_ticks else None}


def total(rows: list[dict]) -> dict:
    """The attributed rows' excess and best GPU-ticks added up."""
    done = [r for r in rows if "excess_gpu_ticks" in r]
    excess = {p: Counter() for p in POOLS}
    for r in done:
        for p in POOLS:
            excess[p].update(r["excess_gpu_ticks"][p])
    return {"files": len(done), "best_gpu_ticks": sum(r["best_gpu_ticks"] for r in done),
            "excess_gpu_ticks": {p: dict(sorted(c.items())) for p, c in excess.items()}}


def replay(job: tuple[str, list[str]]) -> dict:
    """One file: the shipped planner on its window, its series and each decision's reasons."""
    path, argv = job
    from replays import run_policy
    from committed import load_planner

    from pdserve.planner.core.policy import PlannerPolicy
    from pdserve.planner.core.sim_hook import PlannerAutoscaler

    args, trace, s, feas, cfg, prof = load_planner(argv)
    sc = PlannerAutoscaler(PlannerPolicy(cfg, prof))
    r = run_policy(trace, s, sc, (1, 1), args.warmup, feas=feas)[0]
    t0 = trace.requests[0].arrival_s
    whys = [TickWhy.of(d.timestamp - t0, (d.prefill, d.decode), d.explanation, d.reason, d.hold_key)
            for d in sc.decisions]
    return {"file": path, "trace_sha256": trace.sha256, "series": [tuple(x) for x in r["series"]["replicas"]],
            "gpu_hours": r["gpu_hours"], "attainment_after_warmup": r["attainment_after_warmup"],
            "gpus_per_replica": (round(s.gpus(1, 0)), round(s.gpus(0, 1))), "whys": whys}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=Path, nargs="+", required=True, help="evaluate.py result files with best and planner")
    ap.add_argument("--traces", type=Path, help="trace root, where a file's recorded trace path is not on this machine")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    run = Run(argv if argv is None else [sys.argv[0], *argv])
    docs = {str(f): json.loads(f.read_text()) for f in args.files}
    missing = [f for f, d in docs.items() if not {"best", "planner"} <= set(d["results"])]
    if missing:
        raise SystemExit(f"no best or no planner result in: {', '.join(missing)}")
    jobs = [(f, recorded_argv(d["meta"]["command"], args.traces)) for f, d in docs.items()]
    rows = []
    with ProcessPoolExecutor(max(args.jobs, 1)) as ex:
        for row in ex.map(replay, jobs):
            d = docs[row["file"]]
            res = d["results"]
            committed = [tuple(x) for x in res["planner"]["series"]["replicas"]]
            same_trace = d["trace"].get("sha256") == row["trace_sha256"]
            out = {"file": row["file"], "file_commit": d["meta"]["commit"], "same_trace": same_trace,
                   "same_as_committed_planner": same_trace and committed == row["series"],
                   "attainment_after_warmup": row["attainment_after_warmup"],
                   "gpu_hours_vs_best": round(row["gpu_hours"] / res["best"]["gpu_hours"], 4)}
            # Over 99 % and over the cost bound: where the excess is what stands between the planner and the target.
            out["cost_miss"] = (out["attainment_after_warmup"] >= report.TARGET_ATTAINMENT
                                and out["gpu_hours_vs_best"] > report.TARGET_VS_BEST)
            if same_trace:
                best = [tuple(x) for x in res["best"]["series"]["replicas"]]
                out |= attribute(row["whys"], row["series"], best, scored_from(d), row["gpus_per_replica"])
                cells = "; ".join(f"{p} " + ", ".join(f"{k} {v}" for k, v in out["excess_gpu_ticks"][p].items())
                                  for p in POOLS if out["excess_gpu_ticks"][p])
                print(f"{row['file']}: {out['gpu_hours_vs_best']:.3f}x, excess {out['excess_share_of_best']} of the "
                      f"best's {out['best_gpu_ticks']} GPU-ticks: {cells or 'none'}", flush=True)
            else:
                print(f"{row['file']}: the replayed trace is not the file's; not attributed", flush=True)
            rows.append(out)
    summary = {"all": total(rows), "cost_misses": total([r for r in rows if r["cost_miss"]])}
    write_result(args.out, {"schema": SCHEMA, "summary": summary, "rows": rows}, run)
    print(json.dumps(summary))
    return 0 if all(r["same_trace"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
