#!/usr/bin/env python3
"""Regenerate every planner result at one commit: all runs, all policies, the peer, the summary.

    python bench/planner/suite.py --traces /path/to/traces --jobs 2 --lock none \
        --dynamo-python .cache/peers-venv/bin/python          # everything, ~1 h on 2 cores
    python bench/planner/suite.py --summarise-only

Tuning set (named, the only runs the reactive sweep and the planner settings were
chosen on): ``azure_conv_x1`` and ``bursty_seed0``, both on the 1-GPU setup. Every
other run is held out. The reactive baseline's thresholds are swept on the tuning set
(every grid point recorded in those result files) and the cheapest setting that met
99 % after warm-up on all of them (else the one with the best worst case) is applied
to the held-out runs. Each run is one ``evaluate.py`` process writing a fresh
``results/<setup>/<trace>.json`` (no merge: every policy of a file comes from the same
commit) with every policy the plan names for it (``policies``); ``--dynamo-python`` adds
Dynamo's SLA planner to each, and ``--dynamo-repeat`` replays it once more on the named
runs into ``results/dynamo_repeat/`` (its replay is not deterministic; the summary
reports the spread). Then the held-out windows (``HELDOUT``, ``results/heldout/``: parts of the traces no run
replays, each after the 600 s before it replayed; ``--no-heldout`` skips them). After each run ``peer_sweep.py`` replays every peer that spent fewer GPU-hours
than the planner at a few settings of its own capacity knobs (``results/peer_sweep/``), so that
"ahead of the peer" is read at the planner's GPU-hours, not across two points at different costs; then the burst diagnoses (``results/diagnosis/``, ``burst_misses.py``,
``--no-diagnosis`` skips them). ``--jobs`` runs that many evaluations side by side (tuning runs and
repeats first, then held-out ones, longest first); each holds ``--lock`` (default the
bench lock, ``none`` for no lock) only for its own minutes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from claims import TARGET_ATTAINMENT, TARGET_VS_BEST  # noqa: E402
from resultmeta import Run, write_result  # noqa: E402

sys.path.insert(0, str(HERE))
from peer_sweep import needs_sweep  # noqa: E402
from report import HELDOUT_DIR, REPEAT_DIR, SWEEP_DIR, dynamo_repeat_pairs, heldout_target_met  # noqa: E402

RESULTS = HERE / "results"
SETUPS = {
    "8b_1gpu": ["--model-profile", "llama-3.1-8b-h100", "--max-replicas", "16"],
    "70b_tp4": ["--model-profile", "llama-3.1-70b-tp4-h100", "--max-replicas", "8"],
}
TUNE = [("8b_1gpu", "azure_conv_x1"), ("8b_1gpu", "bursty_seed0")]


def traces(root: Path) -> dict[str, list[str]]:
    azure = str(root / "azure_2023" / "AzureLLMInferenceTrace_conv.csv")
    moon = str(root / "mooncake" / "conversation_trace.jsonl")
    return {
        "azure_conv_x1": ["--trace", azure, "--rate-scale", "1", "--duration", "600"],
        "azure_conv_x2": ["--trace", azure, "--rate-scale", "2", "--duration", "600"],
        "azure_conv_x4": ["--trace", azure, "--rate-scale", "4", "--duration", "600"],
        "mooncake_conv": ["--trace", moon, "--duration", "600"],
        **{f"bursty_seed{k}": ["--bursty", str(k), "--duration", "900"] for k in range(4)},
    }


# Held-out windows (results/heldout/, session 16): parts of the traces no run of PLAN replays, each after the
# 600 s before it replayed unscored (evaluate.py --history: a planner in service), read against the same target.
# Not tuned on; the references and baselines of the plan's runs (reactive at the tuning set's thresholds).
HELDOUT_HISTORY_S = 600
# The windows of session 17 (report.HELDOUT_FRESH) were added before any planner replayed them: session 16's were
# replayed while session 17's burst level ratio was chosen, these were not.
HELDOUT = {
    "70b_tp4": {"azure_conv_x4_from600": ("azure", "4", "600", "300"), "azure_conv_x2_from1200": ("azure", "2", "1200", "600"),
                "azure_conv_x2_from600": ("azure", "2", "600", "600"), "azure_conv_x1_from2400": ("azure", "1", "2400", "600")},
    "8b_1gpu": {"azure_conv_x4_from600": ("azure", "4", "600", "300"), "azure_conv_x2_from1200": ("azure", "2", "1200", "600"),
                "azure_conv_x1_from1800": ("azure", "1", "1800", "600"), "mooncake_conv_from1800": ("mooncake", "1", "1800", "600"),
                "azure_conv_x2_from600": ("azure", "2", "600", "600"), "mooncake_conv_from2900": ("mooncake", "1", "2900", "600")},
}
# planner_no_level: session 16's planner (no burst level ratio), beside the shipped one on every window.
HELDOUT_POLICIES = ["best", "static", "reactive", "planner", "planner_no_level"]


def heldout_args(root: Path, setup: str, trace: str) -> list[str]:
    """evaluate.py's trace flags for a held-out window."""
    src, scale, start, duration = HELDOUT[setup][trace]
    path = root / "azure_2023" / "AzureLLMInferenceTrace_conv.csv" if src == "azure" else \
        root / "mooncake" / "conversation_trace.jsonl"
    return ["--trace", str(path), "--rate-scale", scale, "--start", start, "--duration", duration,
            "--history", str(HELDOUT_HISTORY_S)]


PLAN = {
    "8b_1gpu": ["azure_conv_x1", "bursty_seed0", "azure_conv_x2", "azure_conv_x4", "mooncake_conv",
                "bursty_seed1", "bursty_seed2", "bursty_seed3"],
    "70b_tp4": ["azure_conv_x1", "azure_conv_x4", "bursty_seed0", "bursty_seed1"],
}
# Rough CPU seconds of one run at the last regeneration (load ~5; 8B bursty doubled for --history 900):
# held-out runs go longest first.
COST = {("8b_1gpu", "bursty_seed0"): 2200, ("70b_tp4", "azure_conv_x4"): 1250, ("8b_1gpu", "mooncake_conv"): 500,
        ("8b_1gpu", "azure_conv_x4"): 600, ("8b_1gpu", "bursty_seed3"): 1400, ("8b_1gpu", "bursty_seed1"): 1100,
        ("70b_tp4", "bursty_seed0"): 550, ("70b_tp4", "bursty_seed1"): 300}
# planner_no_level: the shipped planner without session 17's burst level ratio (what that default changed).
BASE = ["best", "static", "reactive", "planner", "planner_constant", "planner_fit", "planner_no_level"]
# Per-burst diagnoses the suite re-runs (burst_misses.py): file stem -> its arguments. None since session 9:
# the ones before (burst_misses_8b, planner_fit_variants_8b_*) explained the irate-peak planner's misses
# without history, which the fitted burst reserve and --history replaced; they are in git history at ee76d4f.
DIAGNOSIS: dict[str, list[str]] = {}


def policies(setup: str, trace: str) -> list[str]:
    """What each file holds: the planner as shipped before session 9 (planner_irate) and (8B) the causal reference on the bursty family;
    on 70B's bursty runs, where 8 replicas per pool cannot meet the SLO, the best schedule at 16 (and 32)."""
    extra: list[str] = []
    if trace.startswith("bursty"):
        extra = ["planner_irate", "causal"] if setup == "8b_1gpu" else \
            ["planner_irate", "best_cap16", *(["best_cap32"] if trace == "bursty_seed0" else [])]
    return BASE + extra


def history_args(setup: str, trace: str) -> list[str]:
    """Every policy and reference first replays 900 s of the same generator (its own seed stream), scored on the
    seed's 900 s only: a planner in service has seen this traffic before (evaluate.py --history). Not on 70B, where
    the 8-per-pool cap binds anyway. Part of the replayed trace, so peer_sweep.py gets it too."""
    return ["--history", "900"] if setup == "8b_1gpu" and trace.startswith("bursty") else []


def sweep_args(tr: dict[str, list[str]], setup: str, trace: str, dyn: list[str]) -> list[str]:
    """peer_sweep.py's flags beyond the setup: exactly the run's replayed trace (its file flags and history)."""
    return tr[trace] + history_args(setup, trace) + dyn


def run_args(setup: str, trace: str, tuned: bool) -> list[str]:
    """Per-run flags beyond the trace and setup: the tuning sweeps, and fewer repair rounds for the
    70B bursty best schedules (each round is an end-to-end replay at up to 32 replicas per pool)."""
    out = ["--policies", *policies(setup, trace)]
    if setup == "70b_tp4" and trace.startswith("bursty"):
        out += ["--repairs", "3"]
    out += history_args(setup, trace)
    if tuned:
        out += ["--tuned-on", "--reactive-sweep", "--planner-sweep", "0", "300", "900", "3600"]
    return out


def run_one(results: Path, setup: str, trace: str, args: list[str], extra: list[str], lock: str,
            out: Path | None = None, sweep: list[str] | None = None) -> None:
    """One evaluate.py run; with ``sweep`` (the trace's flags and --dynamo-python if any), then its peer sweep."""
    out = out or results / setup / f"{trace}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(HERE / "evaluate.py"), *args, *SETUPS[setup], "--trace-id", trace, "--out", str(out),
           *extra]
    print("+", " ".join(cmd), flush=True)
    subprocess.run((["flock", lock] if lock != "none" else []) + cmd, check=True)
    if sweep is not None:
        sw = results / SWEEP_DIR / f"{setup}__{trace}.json"
        sw.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, str(HERE / "peer_sweep.py"), "--run", str(out), *sweep, *SETUPS[setup], "--trace-id",
               trace, "--out", str(sw)]
        print("+", " ".join(cmd), flush=True)
        subprocess.run((["flock", lock] if lock != "none" else []) + cmd, check=True)


def run_diagnosis(results: Path, stem: str, lock: str) -> None:
    cmd = [sys.executable, str(HERE / "burst_misses.py"), *DIAGNOSIS[stem], "--out",
           str(results / "diagnosis" / f"{stem}.json")]
    print("+", " ".join(cmd), flush=True)
    subprocess.run((["flock", lock] if lock != "none" else []) + cmd, check=True)


def pick_reactive(results: Path) -> tuple[float, float]:
    """Cheapest grid point meeting 99 % after warm-up on every tuning run, else best worst case."""
    grids = [json.loads((results / s / f"{t}.json").read_text())["results"]["reactive"]["sweep"] for s, t in TUNE]
    keys = [(g["prefill_target"], g["decode_kv_target"]) for g in grids[0]]
    rows = []
    for k in keys:
        pts = [next(g for g in grid if (g["prefill_target"], g["decode_kv_target"]) == k) for grid in grids]
        worst = min(p["attainment_after_warmup"] or 0 for p in pts)
        rows.append((k, worst, sum(p["gpu_hours"] for p in pts)))
    ok = [r for r in rows if r[1] >= TARGET_ATTAINMENT]
    return min(ok, key=lambda r: r[2])[0] if ok else max(rows, key=lambda r: (r[1], -r[2]))[0]


def summarise(results: Path, run: Run) -> dict:
    rows = []
    for f in sorted(f for setup in SETUPS for f in (results / setup).glob("*.json")):
        d = json.loads(f.read_text())
        if d.get("schema") != "pdserve.planner-eval/2":
            continue
        repo = HERE.parents[1]
        name = str(f.resolve().relative_to(repo)) if f.resolve().is_relative_to(repo) else str(f)
        row = {"file": name, "setup": f.parent.name, "trace": d["trace"]["id"],
               "commit": d["meta"]["commit"], "dirty": d["meta"]["dirty"],
               "earlier_commits": sorted({m["commit"] for m in d.get("earlier_runs", [])} - {d["meta"]["commit"]}),
               "tuned_on": d["trace"]["tuned_on"], "requests": d["trace"]["requests"],
               "warmup_s": d["setup"]["warmup_s"], "lower_bound_gpu_hours": d["lower_bound"]["gpu_hours"],
               "feasible_fraction_after_warmup": d.get("feasibility", {}).get("feasible_fraction_after_warmup"),
               "policies": {}}
        for name, r in d["results"].items():
            row["policies"][name] = {k: r.get(k) for k in ("attainment", "attainment_after_warmup",
                                                           "attainment_feasible_after_warmup", "gpu_hours",
                                                           "gpu_hours_vs_best", "gpu_hours_vs_lower_bound")}
        best, pl = d["results"].get("best"), d["results"].get("planner")
        if best and pl:
            att = pl["attainment_after_warmup"] or 0.0
            row["target"] = {"attainment_ok": att >= TARGET_ATTAINMENT,
                             "gpu_hours_ok": pl["gpu_hours_vs_best"] <= TARGET_VS_BEST}
            row["peers"] = {}
            sweep = peer_sweeps(results, f.parent.name, d)
            for peer in ("reactive", "dynamo"):
                if (o := d["results"].get(peer)) is not None:
                    row["peers"][peer] = vs_peer(pl, o, sweep.get(peer))
                    row["target"][f"ahead_of_{peer}_at_planner_gpu_hours"] = row["peers"][peer]["planner_ahead"]
            row["target_met"] = all(v is True for v in row["target"].values())
            row["reference"] = reference_reach(d["results"])
        rows.append(row)
    # Which commits produced the numbers: one (and clean, no earlier runs merged in) after a full regeneration.
    commits = sorted({r["commit"] for r in rows} | {c for r in rows for c in r["earlier_commits"]})
    held = heldout_rows(results)
    doc = {"schema": "pdserve.planner-eval-summary/1", "tuning_set": [f"{s}/{t}" for s, t in TUNE], "runs": rows,
           "commits": commits, "any_dirty": any(r["dirty"] for r in rows),
           "dynamo_repeats": dynamo_spread(results), "heldout": held,
           "heldout_commits": sorted({r["commit"] for r in held})}
    write_result(results / "summary.json", doc, run)
    return doc


def heldout_rows(results: Path) -> list[dict]:
    """The held-out windows (results/heldout/<setup>/<trace>.json): the planner's numbers and the target read on them
    (>= 99 % after warm-up at <= 1.15x the best schedule found; the peers are in the files, not swept)."""
    rows = []
    for f in sorted((results / HELDOUT_DIR).glob("*/*.json")):
        d = json.loads(f.read_text())
        pl, best = d["results"]["planner"], d["results"]["best"]
        att, vs = pl["attainment_after_warmup"] or 0.0, pl["gpu_hours"] / best["gpu_hours"]
        rows.append({"setup": f.parent.name, "trace": d["trace"]["id"], "commit": d["meta"]["commit"],
                     "dirty": d["meta"]["dirty"], "history_s": (d["trace"].get("history") or {}).get("seconds", 0.0),
                     "planner_attainment_after_warmup": att, "planner_vs_best": vs,
                     "best_attainment_after_warmup": best["attainment_after_warmup"],
                     "target_met": heldout_target_met(att, vs)})
    return rows


def reference_reach(res: dict) -> dict:
    """Whether the references themselves reach the targets on this run: the best schedule found (hindsight, same
    per-pool cap) attains 99 % after warm-up; the causal reference (cheapest floor + onset oracle, where run)
    attains it within 1.15x the best schedule's GPU-hours. A run where they do not is one no schedule the search
    found (or no causal rule with onset knowledge) meets: read the planner there against them, not the bound."""
    best, causal = res["best"], res.get("causal")
    return {"best_attains": (best["attainment_after_warmup"] or 0.0) >= TARGET_ATTAINMENT,
            "causal_within_budget": None if causal is None else bool(
                (causal["attainment_after_warmup"] or 0.0) >= TARGET_ATTAINMENT
                and causal["gpu_hours_vs_best"] <= TARGET_VS_BEST)}


def peer_sweeps(results: Path, setup: str, d: dict) -> dict:
    """The run's ``peer_sweep.py`` result per peer ({} if none); a sweep of another trace or planner result is an error."""
    f = results / SWEEP_DIR / f"{setup}__{d['trace']['id']}.json"
    if not f.exists():
        return {}
    sw = json.loads(f.read_text())
    pl = d["results"]["planner"]
    if sw["run"]["sha256"] != d["trace"]["sha256"] or sw["planner"]["gpu_hours"] != pl["gpu_hours"]:
        raise SystemExit(f"{f} was swept against another run than {setup}/{d['trace']['id']}: rerun peer_sweep.py")
    return dict(sw["peers"])


def vs_peer(pl: dict, o: dict, sweep: dict | None) -> dict:
    """The planner against one peer. ``planner_dominates`` (the old ``ahead_of_<peer>``): at least the peer's
    attainment after warm-up at no more GPU-hours than it used (within 1 %); false whenever the peer spent less,
    however far behind it is. ``planner_ahead``: at least the peer's attainment at the planner's GPU-hours, read
    off the peer's sweep (``peer_sweep.py``: interpolated on its frontier; the best setting at >= the planner's
    GPU-hours is kept beside it); without a sweep only where the peer spent as much (else None)."""
    att, o_att = pl["attainment_after_warmup"] or 0.0, o["attainment_after_warmup"] or 0.0
    out = {"attainment_after_warmup": o_att, "gpu_hours": o["gpu_hours"],
           "planner_dominates": bool(att >= o_att and pl["gpu_hours"] <= o["gpu_hours"] * 1.01)}
    if sweep is not None:
        at = sweep["at_planner_gpu_hours"]
        return out | {"planner_ahead": bool(sweep["planner_ahead"]), "at_planner_gpu_hours": at["attainment"],
                      "reached": at["reached"], "between": at["between"], "sweep_points": len(sweep["points"]),
                      "best_at_or_above": at["best_at_or_above"],
                      "planner_ahead_of_best_at_or_above": sweep.get("planner_ahead_of_best_at_or_above")}
    return out | {"planner_ahead": None if needs_sweep(pl["gpu_hours"], o["gpu_hours"]) else bool(att >= o_att)}


def dynamo_spread(results: Path) -> list[dict]:
    """Dynamo's replay run twice on the same input (the main file and ``dynamo_repeat/``): its spread."""
    out = []
    for setup, trace, *runs in dynamo_repeat_pairs(results):
        att = [r["attainment_after_warmup"] or 0.0 for r in runs]
        gh = [r["gpu_hours"] for r in runs]
        out.append({"setup": setup, "trace": trace, "attainment_after_warmup": att, "gpu_hours": gh,
                    "attainment_spread": max(att) - min(att), "gpu_hours_spread": max(gh) - min(gh)})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", type=Path, default=Path("/work/shared/data/traces"), help="folder with the public traces")
    ap.add_argument("--setups", nargs="+", default=list(PLAN))
    ap.add_argument("--only", nargs="+", help="trace ids to run (default: the plan)")
    ap.add_argument("--runs", nargs="+", metavar="SETUP/TRACE", help="held-out runs in this order (default: the plan)")
    ap.add_argument("--summarise-only", action="store_true")
    ap.add_argument("--dynamo-python", type=Path, help="peer environment's python: Dynamo's SLA planner in every run")
    ap.add_argument("--dynamo-repeat", nargs="*", default=[], metavar="SETUP/TRACE",
                    help="replay Dynamo once more on these runs (results/dynamo_repeat/), for its spread")
    ap.add_argument("--diagnosis", action=argparse.BooleanOptionalAction, default=True,
                    help="also re-run the burst diagnoses (results/diagnosis/, burst_misses.py) after the runs")
    ap.add_argument("--heldout", action=argparse.BooleanOptionalAction, default=True,
                    help="also replay the held-out windows (HELDOUT, results/heldout/) after the runs (not with --only or --runs, "
                         "which regenerate the runs they name)")
    ap.add_argument("--jobs", type=int, default=1, help="evaluations side by side")
    ap.add_argument("--lock", default="/tmp/pdserve-bench.lock", help="flock each evaluation on this file ('none': no lock)")
    ap.add_argument("--folder", dest="results", type=Path, default=RESULTS, help="result folder")
    args = ap.parse_args()
    run = Run()
    if not args.summarise_only:
        tr = traces(args.traces)
        dyn = ["--dynamo-python", str(args.dynamo_python)] if args.dynamo_python else []
        wanted = [(s, t) for s in args.setups for t in PLAN[s] if not args.only or t in args.only]
        first: list[Callable[[], None]] = [
            partial(run_one, args.results, s, t, tr[t], run_args(s, t, True) + dyn, args.lock,
                    sweep=sweep_args(tr, s, t, dyn))
            for s, t in TUNE if (s, t) in wanted and not (args.runs and (args.results / s / f"{t}.json").exists())]
        for r in args.dynamo_repeat if args.dynamo_python else []:
            s, t = r.split("/", 1)
            out = args.results / REPEAT_DIR / f"{s}__{t}.json"
            first.append(partial(run_one, args.results, s, t, tr[t], ["--policies", *dyn], args.lock, out))
        pool(first, args.jobs)
        pt, kt = pick_reactive(args.results)
        print(f"reactive thresholds from the tuning set: prefill target {pt}, KV target {kt}", flush=True)
        order = [tuple(r.split("/", 1)) for r in args.runs] if args.runs else \
            sorted((r for r in wanted if r not in TUNE), key=lambda r: -COST.get(r, 300))
        react = ["--reactive-prefill-target", str(pt), "--reactive-kv-target", str(kt)]
        pool([partial(run_one, args.results, s, t, tr[t], run_args(s, t, False) + react + dyn, args.lock,
                      sweep=sweep_args(tr, s, t, dyn)) for s, t in order if (s, t) not in TUNE]
             + [partial(run_diagnosis, args.results, d, args.lock) for d in DIAGNOSIS if args.diagnosis]
             + [partial(run_one, args.results, s, t, heldout_args(args.traces, s, t),
                        ["--policies", *HELDOUT_POLICIES, *react, *dyn], args.lock,
                        out=args.results / HELDOUT_DIR / s / f"{t}.json")
                for s in args.setups for t in HELDOUT.get(s, {}) if args.heldout and not args.runs and not args.only],
             args.jobs)
    doc = summarise(args.results, run)
    for r in doc["runs"]:
        p = r["policies"].get("planner", {})
        print(r["setup"], r["trace"], "tuned" if r["tuned_on"] else "held-out", p)
    return 0


def pool(jobs: Sequence[Callable[[], None]], n: int) -> None:
    """Run the jobs on n threads (each one a subprocess); the first failure cancels those not started."""
    ex = ThreadPoolExecutor(max_workers=max(1, n))
    try:
        for f in [ex.submit(j) for j in jobs]:
            f.result()
    finally:
        ex.shutdown(wait=True, cancel_futures=True)


if __name__ == "__main__":
    sys.exit(main())
