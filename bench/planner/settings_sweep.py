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

One replay per window judges a setting at one arbitrary tick phase after 600-900 s of history, and a setting can
gain a window at that phase alone (``history_length.json``). ``--phases N`` replays every setting at each 1/N of
an interval, ``--history service`` after the history a planner in service has (``committed.py``'s conditions);
``over_conditions`` then reads each setting by the files it meets under every condition and the median count.

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
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import report  # noqa: E402
from committed import (Condition, cell, conditions, not_the_window, parse_condition, prepare,  # noqa: E402
                       replay_files, replay_key, same_as_committed, scored_hash, service_history_s)
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


def replay(job: tuple[str, list[str], dict[str, dict[str, object]], list[Condition], float | None]) -> dict:
    """One file: the shipped planner and each setting, replayed on its window under each condition (one condition:
    keyed by the setting's name; more: ``NAME@CONDITION``)."""
    path, argv, settings, conds, service_s = job
    from replays import run_policy

    from pdserve.planner.core.policy import PlannerPolicy
    from pdserve.planner.core.sim_hook import PlannerAutoscaler

    out, scored = {}, {}
    prepared = prepare(argv, conds, service_s)
    for c, (args, trace, s, feas, base, prof) in prepared.runs.items():
        window = scored_hash(trace, args.warmup)  # the condition's, whatever the setting
        for name, change in {"shipped": {}, **settings}.items():
            cfg = dataclasses.replace(base, **change)
            if (bad := cfg.invalid()) is not None:
                raise SystemExit(f"{name}: {bad}")
            t0 = time.perf_counter()
            r = run_policy(trace, s, PlannerAutoscaler(PlannerPolicy(cfg, prof)), (1, 1), args.warmup, feas=feas)[0]
            key = replay_key(name, c, len(conds))
            scored[key] = window
            out[key] = {
                "attainment_after_warmup": r["attainment_after_warmup"], "gpu_hours": r["gpu_hours"],
                "max_prefill": r["max_prefill"], "max_decode": r["max_decode"],
                "sim_wall_s": round(time.perf_counter() - t0, 1)}
    return {"file": path, "trace_sha256": prepared.recorded_sha, "recorded_scored": prepared.recorded_scored,
            "scored_requests": scored, "replays": out}


def rescore(job: tuple[str, list[str], dict, list[Condition], float | None]) -> dict:
    """One row of an earlier output (``--reread``), its replays kept and its scored requests loaded again (traces
    only, nothing replayed), for the reading ``main`` gives a fresh row."""
    path, argv, old, conds, service_s = job
    prepared = prepare(argv, conds, service_s)
    scored = {}
    for c, (args, trace, *_rest) in prepared.runs.items():
        window = scored_hash(trace, args.warmup)
        scored |= {k: window for n in old["settings"] if (k := replay_key(n, c, len(conds))) in old["replays"]}
    fresh = {"attainment_after_warmup", "gpu_hours", "max_prefill", "max_decode", "sim_wall_s"}
    return {"file": path, "trace_sha256": prepared.recorded_sha, "recorded_scored": prepared.recorded_scored,
            "scored_requests": scored,
            "replays": {k: {f: v for f, v in r.items() if f in fresh} for k, r in old["replays"].items()}}


def over_conditions(rows: list[dict], names: list[str], conds: list[Condition]) -> dict:
    """Each setting over the conditions: files meeting the target under each, and per file the median and the
    lowest attainment and the median multiple of best (a setting that gains a window at one phase only has not
    gained it)."""
    out = {}
    for n in names:
        keys = [replay_key(n, c, len(conds)) for c in conds]
        per_file = []
        for r in rows:
            reps = [r["replays"][k] for k in keys if k in r["replays"]]
            if not reps:
                continue
            vs = [x["gpu_hours_vs_best"] for x in reps if x["gpu_hours_vs_best"] is not None]
            att = [x["attainment_after_warmup"] for x in reps]
            per_file.append({"file": r["file"], "met": sum(x["meets_target"] for x in reps), "of": len(reps),
                             "attainment_median": statistics.median(att), "attainment_min": min(att),
                             "gpu_hours_vs_best_median": statistics.median(vs) if vs else None})
        met = {c.name: sum(r["replays"].get(replay_key(n, c, len(conds)), {}).get("meets_target", False) for r in rows)
               for c in conds}
        out[n] = {"files_meeting_target": met, "median_files_meeting_target": statistics.median(met.values()),
                  "files_met_under_every_condition": sum(f["met"] == f["of"] for f in per_file),
                  "files": per_file}
    return out


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
    ap.add_argument("--phases", type=int, default=1, help="replay each setting with the ticks at each 1/N of an "
                                                               "interval (1: the recorded ticks only)")
    ap.add_argument("--history", choices=("recorded", "service", "both"), default="recorded",
                    help="the recorded history, the one a planner in service has (committed.service_history_s; "
                         "files without a longer one are skipped), or both")
    ap.add_argument("--reread", type=Path, help="an earlier output of this script: its replays read against each "
                    "file's best again, the scored requests loaded again (nothing replayed; its files, settings, "
                    "phases and history are kept)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    run = Run(argv if argv is None else [sys.argv[0], *argv])
    earlier = json.loads(args.reread.read_text()) if args.reread else None
    if earlier is not None:  # what the earlier run replayed, under the conditions it named
        args.settings = list(earlier["settings"].items())
        args.files = [HERE.parents[1] / r["file"] for r in earlier["rows"]]
        if "phases" in earlier:  # recorded since session 40; earlier outputs: derived from the condition names
            args.phases, args.history = earlier["phases"], earlier["history"]
        else:
            names = earlier.get("conditions", ["recorded"])
            args.phases = max((parse_condition(n).of for n in names), default=1)
            kinds = {parse_condition(n).service for n in names}
            args.history = "both" if len(kinds) == 2 else "service" if True in kinds else "recorded"
    settings = dict(args.settings)
    files = args.files if args.files else discover(args.results)
    if not files:
        raise SystemExit(f"no evaluate.py result file with a planner under {args.results}")
    conds = conditions(args.phases, args.history)
    skipped: list[str] = []
    old_rows = {r["file"]: r for r in earlier["rows"]} if earlier is not None else {}

    def job(path: str, av: list[str], _d: dict) -> tuple | None:
        service_s = service_history_s(av) if any(c.service for c in conds) else None
        if any(c.service for c in conds) and service_s is None:
            skipped.append(path)  # no longer history a service would have: the condition is the recorded one
            return None
        if earlier is not None:
            rel = str(Path(path).resolve().relative_to(HERE.parents[1]))
            return path, av, old_rows[rel] | {"settings": ["shipped", *settings]}, conds, service_s
        return path, av, settings, conds, service_s

    rows = []
    for row, d in replay_files(files, args.traces, job, rescore if earlier is not None else replay, args.jobs):
        not_the_window(row, row.pop("recorded_scored"))
        for r in row["replays"].values():
            r["same_as_committed_planner"] = same_as_committed(r, d, row["same_trace"])
        committed = d["results"]["planner"]
        row["committed_planner"] = {"attainment_after_warmup": committed["attainment_after_warmup"],
                                    "gpu_hours": committed["gpu_hours"]}
        rows.append(row)
        cells = "  ".join(f"{cell(n, r)}{' =committed' if r['same_as_committed_planner'] else ''}"
                          for n, r in row["replays"].items())
        print(f"{row['file']} ({row['file_commit'][:7]}): {cells}", flush=True)
    names = ["shipped", *settings]
    doc = {"schema": SCHEMA, "settings": settings, "phases": args.phases, "history": args.history, "target": {
        "attainment_after_warmup": report.TARGET_ATTAINMENT, "gpu_hours_vs_best": report.TARGET_VS_BEST}}
    if len(conds) == 1:
        doc["files_meeting_target"] = {n: sum(r["replays"][n]["meets_target"] for r in rows) for n in names}
    else:
        doc |= {"conditions": [c.name for c in conds], "skipped_no_longer_history": skipped,
                "over_conditions": over_conditions(rows, names, conds)}
        doc["files_meeting_target"] = {n: doc["over_conditions"][n]["files_meeting_target"] for n in names}
    if earlier is not None:
        doc["reread_from"] = {"file": str(args.reread), "meta": earlier["meta"]}
    write_result(args.out, doc | {"rows": rows}, run)
    print(json.dumps({"files": len(rows), "files_meeting_target": doc["files_meeting_target"]}))
    return 0

if __name__ == "__main__":
    sys.exit(main())
