#!/usr/bin/env python3
"""What a planner restart costs, and what the warm start (``pdserve.planner.core.warm_start``) gives back.

A planner restarts when the operator does (an upgrade, a lost Lease, an evicted pod). Its memory goes with it:
the burst reserve held for the peak window, the rate history the forecast and the learnt release margin read,
the latency correction, the stabilisation window. Each committed ``evaluate.py`` result file's window is replayed
(its own command, the planner built as ``committed.load_planner`` builds it) three ways:

* ``planner``: the planner as shipped, never restarted;
* ``cold``: a fresh planner at every restart time (what every planner before the warm start did);
* ``warm``: a fresh planner at every restart time that first replays the observations the metrics store holds
  for its memory span (``warm_start.history_ticks``: the ticks a running planner decided at), with each pool's
  size as Prometheus gives it back (its ready pods' series count: ``PrometheusSource.history``), not the size
  the running planner was told; the live path's warm start replays exactly that.

Restarts come every ``--restart-every`` seconds of the trace, from the middle of the first such span after the
warm-up (the scored window), each at the first planner tick at or after its time; ``restarts_s`` lists the ones
that happened (a time after the last tick does not). GPU-hours are read against the file's best schedule found; the
file's trace must be the replayed one (its sha256), or the row says so.

    python bench/planner/restart.py --traces /path/to/traces --jobs 2 --restart-every 600 \\
        --files bench/planner/results/8b_1gpu/*.json --out bench/planner/results/diagnosis/restart.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import report  # noqa: E402
from resultmeta import Run, write_result  # noqa: E402
from committed import cell, replay_files  # noqa: E402

from pdserve.planner.core.observation import Observation, PoolState  # noqa: E402
from pdserve.planner.core.policy import PlannerPolicy, PolicyConfig  # noqa: E402
from pdserve.planner.core.profile import CapacityProfile  # noqa: E402
from pdserve.planner.core.sim_hook import PlannerAutoscaler, observation_from_window  # noqa: E402
from pdserve.planner.core.warm_start import history_ticks, warm_start  # noqa: E402

SCHEMA = "pdserve.planner-restart/1"
WAYS = ("planner", "cold", "warm")


def as_stored(o: Observation) -> Observation:
    """An observation as the metrics store gives it back: each pool's size is its ready pods (what Prometheus
    scraped); what the resource asked for beyond them (pods still starting) is not stored anywhere."""
    def pool(p: PoolState) -> PoolState:
        return PoolState(replicas=p.effective_ready, ready=p.effective_ready)

    return dataclasses.replace(o, prefill=pool(o.prefill), decode=pool(o.decode))


class Restarting:
    """The simulator's autoscaler hook around a planner that is replaced by a fresh one at the first tick at or
    after each restart time (seconds from ``start``, the trace's first arrival), warm-started from the stored
    observations or not. ``done``: when each restart happened (seconds from ``start``); a restart time after the
    last tick never happens and is not in it."""

    def __init__(self, config: PolicyConfig, profile: CapacityProfile, restarts: list[float], warm: bool,
                 start: float) -> None:
        self.config, self.profile, self.warm, self.start = config, profile, warm, start
        self.restarts = sorted(restarts)
        self.inner = PlannerAutoscaler(PlannerPolicy(config, profile))
        self.stored: list[Observation] = []
        self.done: list[float] = []
        self.replayed: list[int] = []

    @property
    def interval_s(self) -> float:
        return self.inner.interval_s

    def on_tick(self, now, window, current):  # type: ignore[no-untyped-def]
        cfg = self.config
        if self.restarts and now - self.start >= self.restarts[0]:
            self.restarts = [t for t in self.restarts if t > now - self.start]  # all due by this tick: one restart
            self.done.append(round(now - self.start, 1))
            policy = PlannerPolicy(cfg, self.profile)
            if self.warm:
                span = history_ticks(cfg, now)
                since = span[0] - cfg.interval_s / 2 if span else now
                self.replayed.append(warm_start(policy, [o for o in self.stored if o.timestamp >= since]).intervals)
            self.inner = PlannerAutoscaler(policy)
        self.stored.append(as_stored(observation_from_window(now, window, current, cfg.burst_budget_s,
                                                             cfg.burst_fit_budget_s)))
        return self.inner.on_tick(now, window, current)


def restart_times(warmup_s: float, duration_s: float, every_s: float) -> list[float]:
    """Seconds from the trace's start: the middle of each ``every_s`` span of the scored window."""
    out, t = [], warmup_s + every_s / 2
    while t < duration_s:
        out.append(t)
        t += every_s
    return out


def replay(job: tuple[str, list[str], float]) -> dict:
    path, argv, every = job
    from replays import run_policy
    from committed import load_planner

    args, trace, s, feas, base, prof = load_planner(argv)
    times = restart_times(args.warmup, trace.duration_s, every)
    out, done, replayed = {}, {}, []
    for way in WAYS:
        scaler = (PlannerAutoscaler(PlannerPolicy(base, prof)) if way == "planner"
                  else Restarting(base, prof, list(times), warm=way == "warm", start=trace.requests[0].arrival_s))
        r = run_policy(trace, s, scaler, (1, 1), args.warmup, feas=feas)[0]
        out[way] = {"attainment_after_warmup": r["attainment_after_warmup"], "gpu_hours": r["gpu_hours"],
                    "max_prefill": r["max_prefill"], "max_decode": r["max_decode"],
                    "replicas": r["series"]["replicas"]}
        if isinstance(scaler, Restarting):
            done[way] = scaler.done
            replayed = scaler.replayed if way == "warm" else replayed
    if done["cold"] != done["warm"]:
        raise SystemExit(f"{path}: cold restarted at {done['cold']}, warm at {done['warm']}")
    return {"file": path, "trace_sha256": trace.sha256, "restarts_s": done["cold"], "warm_replayed_intervals": replayed,
            "replays": out}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=Path, nargs="+", required=True, help="evaluate.py result files")
    ap.add_argument("--traces", type=Path, help="trace root, where a file's recorded trace path is not on this machine")
    ap.add_argument("--restart-every", type=float, default=600.0, help="seconds between restarts (default 600)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    if args.restart_every <= 0:
        ap.error("--restart-every must be above 0")
    run = Run(argv if argv is None else [sys.argv[0], *argv])
    rows = []
    for row, _d in replay_files(args.files, args.traces, lambda f, av, _d: (f, av, args.restart_every), replay,
                                args.jobs):
        row["warm_same_as_planner"] = row["replays"]["planner"]["replicas"] == row["replays"]["warm"]["replicas"]
        rows.append(row)
        cells = "  ".join(cell(n, r) for n, r in row["replays"].items())
        print(f"{row['file']}: {len(row['restarts_s'])} restarts  {cells}", flush=True)
    summary = {
        "files": len(rows), "restarts": sum(len(r["restarts_s"]) for r in rows),
        "meeting_target": {w: sum(r["replays"][w]["meets_target"] for r in rows) for w in WAYS},
        "lower_attainment_than_planner": {w: sum(r["replays"][w]["attainment_after_warmup"]
                                                 < r["replays"]["planner"]["attainment_after_warmup"] for r in rows)
                                          for w in ("cold", "warm")},
        "warm_same_as_planner": sum(r["warm_same_as_planner"] for r in rows),
    }
    write_result(args.out, {"schema": SCHEMA, "restart_every_s": args.restart_every, "target": {
        "attainment_after_warmup": report.TARGET_ATTAINMENT, "gpu_hours_vs_best": report.TARGET_VS_BEST},
        "summary": summary, "rows": rows}, run)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
