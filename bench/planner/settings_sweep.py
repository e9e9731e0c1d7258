#!/usr/bin/env python3
"""The shipped planner alone, replayed with ``PolicyConfig`` settings changed, on the exact windows of committed
``evaluate.py`` result files: what a setting would do to every run and held-out window, in minutes rather than a
suite's hour (no reference search, no peer, no other policy).

Each file's own command (``meta.command``) is parsed with ``evaluate.py``'s parser, so the replay is that run's
trace, history, setup and flags; the planner is built as ``evaluate.py`` builds its ``planner`` variant
(``evaluate.planner_config``) and then changed by each ``--set``. GPU-hours are read against the file's best
schedule found. The unchanged planner (``shipped``, always replayed) checks the harness: where the file was run at
this code's planner it must give the file's ``planner`` numbers (``same_as_committed_planner``; a setting that
restores the planner a file was run with must too).

    python bench/planner/settings_sweep.py --traces /path/to/traces --jobs 2 \\
        --set 'prefill=prefill_utilization:0.95' --set 'both=prefill_utilization:0.95,hold_prefill_on_rise:true' \\
        --out /tmp/settings.json

A ``--set`` is ``NAME=FIELD:VALUE[,FIELD:VALUE...]`` with VALUE a JSON literal (``none`` for None; a list for a
tuple field, e.g. ``correction_bounds:[0.67,4.0]``); fields are
``PolicyConfig``'s. Files default to every run and held-out window under ``--results``.
"""

from __future__ import annotations

import argparse
import dataclasses
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

from pdserve.planner.core.policy import PolicyConfig  # noqa: E402

SCHEMA = "pdserve.planner-settings-sweep/1"
FIELDS = {f.name for f in dataclasses.fields(PolicyConfig)}


def parse_set(text: str) -> tuple[str, dict[str, object]]:
    """``NAME=FIELD:VALUE,...`` -> (NAME, {FIELD: VALUE}); a field PolicyConfig lacks is refused by name."""
    name, sep, body = text.partition("=")
    if not sep or not name or not body:
        raise argparse.ArgumentTypeError(f"--set {text!r}: expected NAME=FIELD:VALUE[,FIELD:VALUE...]")
    change: dict[str, object] = {}
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(body):  # commas inside a JSON list or object belong to its value
        depth += (ch in "[{") - (ch in "]}")
        if ch == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    for part in [*parts, body[start:]]:
        field, sep, value = part.partition(":")
        if not sep or field not in FIELDS:
            raise argparse.ArgumentTypeError(f"--set {text!r}: {field!r} is not a PolicyConfig field")
        v = None if value.strip().lower() == "none" else json.loads(value)
        change[field] = tuple(v) if isinstance(v, list) and isinstance(getattr(PolicyConfig, field), tuple) else v
    return name, change


def load_planner(argv: list[str]) -> tuple:
    """A result file's recorded command -> its parsed args, trace, setup, feasibility, and the shipped planner's
    config and profile as ``evaluate.py`` builds its ``planner`` variant (also excess_terms.py's replay)."""
    import evaluate
    from variants import Flags, Knobs

    args = evaluate.build_parser().parse_args([*argv, "--out", "/dev/null"])
    trace, _tid, s, feas, _n, _h = evaluate.load_run(args)
    base, prof = evaluate.planner_config(args, s, Knobs(), Flags.of(args, s))
    return args, trace, s, feas, base, prof


def replay(job: tuple[str, list[str], dict[str, dict[str, object]]]) -> dict:
    """One file: the shipped planner and each setting, replayed on its window."""
    path, argv, settings = job
    from replays import run_policy

    from pdserve.planner.core.policy import PlannerPolicy
    from pdserve.planner.core.sim_hook import PlannerAutoscaler

    args, trace, s, feas, base, prof = load_planner(argv)
    out = {}
    for name, change in {"shipped": {}, **settings}.items():
        cfg = dataclasses.replace(base, **change)
        if (bad := cfg.invalid()) is not None:
            raise SystemExit(f"{name}: {bad}")
        t0 = time.perf_counter()
        r = run_policy(trace, s, PlannerAutoscaler(PlannerPolicy(cfg, prof)), (1, 1), args.warmup, feas=feas)[0]
        out[name] = {"attainment_after_warmup": r["attainment_after_warmup"], "gpu_hours": r["gpu_hours"],
                     "max_prefill": r["max_prefill"], "max_decode": r["max_decode"],
                     "sim_wall_s": round(time.perf_counter() - t0, 1)}
    return {"file": path, "trace_sha256": trace.sha256, "replays": out}


def read_against_best(row: dict, d: dict) -> bool:
    """A replayed row (``replays``: name -> attainment and GPU-hours) read against its committed result file ``d``:
    each replay's GPU-hours as a multiple of the file's best schedule found and whether it meets the target, and the
    row's file (repository-relative), the file's commit and whether the replayed trace is the file's. Returns that
    last (no multiple is read from another trace). Also restart.py's."""
    best = d["results"].get("best", {}).get("gpu_hours")
    same_trace = d["trace"].get("sha256") == row["trace_sha256"]
    for r in row["replays"].values():
        r["gpu_hours_vs_best"] = round(r["gpu_hours"] / best, 4) if best and same_trace else None
        r["meets_target"] = (r["gpu_hours_vs_best"] is not None and r["attainment_after_warmup"] is not None
                             and report.heldout_target_met(r["attainment_after_warmup"], r["gpu_hours_vs_best"]))
    f = Path(row["file"]).resolve()
    row |= {"file": str(f.relative_to(HERE.parents[1])) if f.is_relative_to(HERE.parents[1]) else row["file"],
            "file_commit": d["meta"]["commit"], "same_trace": same_trace}
    return same_trace


def discover(results: Path) -> list[Path]:
    """Every run (``report.runs``) and held-out window file with a ``planner`` result."""
    held = [(f, json.loads(f.read_text())) for f in sorted((results / report.HELDOUT_DIR).glob("*/*.json"))]
    return [f for f, d in [*report.runs(results), *held] if "planner" in d["results"]]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, default=HERE / "results", help="folder of evaluate.py result files")
    ap.add_argument("--files", type=Path, nargs="*", help="these result files instead of every one under --results")
    ap.add_argument("--traces", type=Path, help="trace root, where a file's recorded trace path is not on this machine")
    ap.add_argument("--set", dest="settings", type=parse_set, action="append", default=[], metavar="NAME=FIELD:VALUE")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    run = Run(argv if argv is None else [sys.argv[0], *argv])
    settings = dict(args.settings)
    files = args.files if args.files else discover(args.results)
    if not files:
        raise SystemExit(f"no evaluate.py result file with a planner under {args.results}")
    jobs = []
    docs = {}
    for f in files:
        d = json.loads(f.read_text())
        jobs.append((str(f), recorded_argv(d["meta"]["command"], args.traces), settings))
        docs[str(f)] = d
    rows = []
    with ProcessPoolExecutor(max(args.jobs, 1)) as ex:
        for row in ex.map(replay, jobs):
            d = docs[row["file"]]
            committed = d["results"]["planner"]
            same_trace = read_against_best(row, d)
            for r in row["replays"].values():
                r["same_as_committed_planner"] = (same_trace and r["attainment_after_warmup"] == committed[
                    "attainment_after_warmup"] and abs(r["gpu_hours"] - committed["gpu_hours"]) < 1e-9)
            row["committed_planner"] = {"attainment_after_warmup": committed["attainment_after_warmup"],
                                        "gpu_hours": committed["gpu_hours"]}
            rows.append(row)
            cells = "  ".join(f"{n} {100 * r['attainment_after_warmup']:.2f} % "
                              f"{'-' if r['gpu_hours_vs_best'] is None else format(r['gpu_hours_vs_best'], '.3f')}x"
                              f"{' met' if r['meets_target'] else ''}{' =committed' if r['same_as_committed_planner'] else ''}"
                              for n, r in row["replays"].items())
            print(f"{row['file']} ({row['file_commit'][:7]}): {cells}", flush=True)
    met = {n: sum(r["replays"][n]["meets_target"] for r in rows) for n in ["shipped", *settings]}
    write_result(args.out, {"schema": SCHEMA, "settings": settings, "target": {
        "attainment_after_warmup": report.TARGET_ATTAINMENT, "gpu_hours_vs_best": report.TARGET_VS_BEST},
        "files_meeting_target": met, "rows": rows}, run)
    print(json.dumps({"files": len(rows), "files_meeting_target": met}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
