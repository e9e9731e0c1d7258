#!/usr/bin/env python3
"""How well the planner's rate forecaster predicts what it is asked to: the highest arrival rate over the next
start-up + interval (the horizon a replica requested now must cover), per run of the suite.

Each run replays the shipped planner (``evaluate.py``'s flags from ``suite.py``) and keeps the request-rate history its
predictor was given at the last tick (the arrival rate the router counted, one value per 30 s tick: a property of the
trace, not of the policy, up to the mean ISL of completions that turns tokens into requests). Then, offline, at every
tick t of that history each forecaster predicts from ticks 0..t, floored at the tick's own value as the policy floors
it (``floor_on_observed``), against the highest value of ticks t+1..t+H. Over-forecast (replicas held for load that
does not come) and under-forecast (load that comes unplanned) are reported apart, as a fraction of the run's mean rate.

Forecasters: the last value, and Holt-Winters (damped additive trend, the planner's default) with its fitted level
smoothing unbounded (statsmodels: 0..1) and bounded below at each ``--bounds`` value
(``HoltWintersPredictor.min_level_smoothing``; evaluate.py's planner_next2 takes one of them).

    python bench/planner/forecast_error.py --traces /work/shared/data/traces \\
        --out bench/planner/results/diagnosis/forecast_error.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import evaluate  # noqa: E402
from replays import run_policy  # noqa: E402
from resultmeta import Run, write_result  # noqa: E402
from suite import SETUPS, TUNE, history_args, traces  # noqa: E402

from pdserve.planner.core.policy import PlannerPolicy, PolicyConfig  # noqa: E402
from pdserve.planner.core.predictors import ConstantPredictor, Forecast, HoltWintersPredictor, History  # noqa: E402
from pdserve.planner.core.sim_hook import PlannerAutoscaler  # noqa: E402

SCHEMA = "pdserve.planner-forecast-error/1"
RUNS = ["8b_1gpu/azure_conv_x1", "8b_1gpu/bursty_seed0", "8b_1gpu/azure_conv_x2", "8b_1gpu/azure_conv_x4",
        "70b_tp4/azure_conv_x1", "70b_tp4/azure_conv_x4", "8b_1gpu/bursty_seed1", "8b_1gpu/bursty_seed3",
        "8b_1gpu/mooncake_conv"]


class Recording:
    """The policy's predictor, keeping the history it was last given."""

    def __init__(self, inner: HoltWintersPredictor) -> None:
        self.inner, self.name, self.history = inner, inner.name, []

    def predict(self, history: History, steps: int = 1) -> Forecast:
        self.history = [float(x) for x in history]
        return self.inner.predict(history, steps)


def arrivals(key: str, trace_root: Path, duration: float | None, history: float | None) -> tuple[list[float], int]:
    """The shipped planner's request-rate history on one run, and its forecast horizon in ticks."""
    setup, trace = key.split("/")
    hist = history_args(setup, trace) if history is None else (["--history", f"{history:g}"] if history > 0 else [])
    argv = [*traces(trace_root)[trace], *SETUPS[setup], *hist, *(["--duration", f"{duration:g}"] if duration else []),
            "--trace-id", trace, "--out", "/dev/null"]
    args = evaluate.build_parser().parse_args(argv)
    tr, _, s, feas, _, _ = evaluate.load_run(args)
    cfg = PolicyConfig(ttft_slo_ms=args.ttft_ms, itl_slo_ms=args.itl_ms, interval_s=args.interval,
                       prefill_max=args.max_replicas, decode_max=args.max_replicas, prefill_tp=s.tp_p, decode_tp=s.tp_d,
                       startup_s=args.startup)
    rec = Recording(HoltWintersPredictor())
    policy = PlannerPolicy(cfg, s.profile)
    policy.predictor = rec
    run_policy(tr, s, PlannerAutoscaler(policy), (1, 1), args.warmup, feas=feas)
    return rec.history, cfg.horizon_ticks


def errors(series: list[float], horizon: int, predict) -> dict:
    """Mean over- and under-forecast against the next ``horizon`` ticks' highest value, / the series' mean."""
    scale = max(statistics.fmean(series), 1e-9) if series else 1.0
    over = under = 0.0
    n = 0
    for t in range(1, len(series) - horizon):
        fc = max(predict(series[: t + 1], horizon).value, series[t])
        err = (fc - max(series[t + 1 : t + 1 + horizon])) / scale
        over, under, n = over + max(err, 0.0), under + max(-err, 0.0), n + 1
    return {"over": round(over / n, 4) if n else None, "under": round(under / n, 4) if n else None, "ticks": n}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", type=Path, default=Path("/work/shared/data/traces"), help="suite.py's trace root")
    ap.add_argument("--runs", nargs="*", default=RUNS)
    ap.add_argument("--bounds", nargs="*", type=float, default=[0.2, 0.3, 0.5, 0.7])
    ap.add_argument("--duration", type=float, help="replay this many seconds instead of the suite's (smoke runs)")
    ap.add_argument("--history", type=float, help="seconds of history instead of the suite's (0: none; smoke runs)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    run = Run()
    forecasters = {"last value": ConstantPredictor().predict, "holt-winters": HoltWintersPredictor().predict,
                   **{f"holt-winters, level smoothing >= {b:g}": HoltWintersPredictor(min_level_smoothing=b).predict
                      for b in args.bounds}}
    tuned = {f"{setup}/{trace}" for setup, trace in TUNE}
    rows = []
    for key in args.runs:
        series, horizon = arrivals(key, args.traces, args.duration, args.history)
        row = {"run": key, "tuned_on": key in tuned, "horizon_ticks": horizon, "arrival_rate": [round(x, 4) for x in series],
               "errors": {name: errors(series, horizon, f) for name, f in forecasters.items()}}
        rows.append(row)
        print(key, {k: (v["over"], v["under"]) for k, v in row["errors"].items()}, flush=True)

    def mean(name: str, part: str, keys: set[str] | None = None) -> float | None:
        vals = [r["errors"][name][part] for r in rows if r["errors"][name][part] is not None
                and (keys is None or r["run"] in keys)]
        return round(statistics.fmean(vals), 4) if vals else None

    summary = {name: {"over": mean(name, "over"), "under": mean(name, "under"),
                      "tuning_set_over": mean(name, "over", tuned), "tuning_set_under": mean(name, "under", tuned)}
               for name in forecasters}
    write_result(args.out, {"schema": SCHEMA, "runs": rows, "mean_over_runs": summary}, run)
    for name, v in summary.items():
        print(f"{name:40s} over {v['over']} under {v['under']} (tuning set: {v['tuning_set_over']} / {v['tuning_set_under']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
