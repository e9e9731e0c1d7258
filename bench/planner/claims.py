"""The README's findings, computed from the result files (report.py splices them into the results block).

The prose in bench/planner/README.md explains *why*; every number it relies on is rendered here
from ``results/<setup>/<trace>.json`` and ``results/diagnosis/*.json``, so a regeneration of the
results cannot leave a stale number in a sentence. Attainment is after warm-up, of the feasible
requests (``attainment_feasible_after_warmup``) unless a line says otherwise; GPU-hours as a
multiple of the best schedule found's.
"""

from __future__ import annotations

import json
from pathlib import Path

Runs = dict[str, dict]  # "setup/trace" -> result document
SWEEP_DIR = "peer_sweep"  # peer_sweep.py: the peers at the planner's GPU-hours, one file per run
# The done-when bound (issue 12): attainment after warm-up, GPU-hours against the best schedule found's.
TARGET_ATTAINMENT, TARGET_VS_BEST = 0.99, 1.15


def peer_sweeps(results: Path) -> list[tuple[str, dict, dict]]:
    """("setup/trace", the run's document, its ``peer_sweep.py`` result) for every run that has a sweep file."""
    out = []
    for f in sorted((results / SWEEP_DIR).glob("*.json")):
        setup, trace = f.stem.split("__", 1)
        run = results / setup / f"{trace}.json"
        if run.exists():
            out.append((f"{setup}/{trace}", json.loads(run.read_text()), json.loads(f.read_text())))
    return out


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def _span(xs: list[float], fmt: str = ".2f", unit: str = "x") -> str:
    if not xs:
        return "-"
    lo, hi = f"{min(xs):{fmt}}", f"{max(xs):{fmt}}"
    return f"{lo}{unit}" if lo == hi else f"{lo}..{hi}{unit}"


def _att(r: dict) -> float:
    return r.get("attainment_feasible_after_warmup") or r.get("attainment_after_warmup") or 0.0


def _vs(r: dict, best: dict) -> float:
    return float(r["gpu_hours"] / best["gpu_hours"])


def _size(r: dict) -> str:
    return f"{r['max_prefill']}P{r['max_decode']}D"


def _pol(d: dict, name: str) -> str:
    r, best = d["results"].get(name), d["results"]["best"]
    return "-" if r is None else f"{pct(_att(r))} at {_vs(r, best):.2f}x"


def bursty_references(runs: Runs) -> str:
    rows = {k: d for k, d in runs.items() if k.startswith("8b_1gpu/bursty") and "causal" in d["results"]}
    if not rows:
        return ""
    parts, same, st_vs, ca_vs, static_more = [], [], [], [], []
    for k, d in sorted(rows.items()):
        res = d["results"]
        best, st, ca = res["best"], res["static"], res["causal"]
        st_vs.append(_vs(st, best))
        ca_vs.append(_vs(ca, best))
        if list(ca["floor"]) == list(st["size"]):
            same.append(k.split("/")[1])
        if _att(st) > _att(best):
            static_more.append(f"{k.split('/')[1]} ({pct(_att(st))} vs {pct(_att(best))} at {_vs(st, best):.2f}x)")
        parts.append(f"{k.split('/')[1]}: best {pct(_att(best))} at {best['gpu_hours']:.2f} GPU-h, static "
                     f"{st['size'][0]}P{st['size'][1]}D {pct(_att(st))} at {_vs(st, best):.2f}x, causal floor "
                     f"{ca['floor'][0]}P{ca['floor'][1]}D {pct(_att(ca))} at {_vs(ca, best):.2f}x")
    return (f"* **Causal reference vs hindsight, 8B bursty** ({len(rows)} seeds): the causal reference costs "
            f"{_span(ca_vs)} the best schedule found, static {_span(st_vs)}; the causal floor is the static size on "
            f"{', '.join(same) or 'no seed'}. Static attains more than the best schedule found on "
            f"{', '.join(static_more) or 'no seed'}. Per seed: {'; '.join(parts)}.")


def bursty_policies(runs: Runs) -> str:
    rows = {k: d for k, d in runs.items() if k.startswith("8b_1gpu/bursty")}
    if not rows:
        return ""
    names = ["planner", "planner_irate", "planner_constant", "planner_fit", "reactive", "dynamo"]
    per = [f"{k.split('/')[1]}{' (tuning)' if d['trace']['tuned_on'] else ''}: "
           + ", ".join(f"{n} {_pol(d, n)}" for n in names if n in d["results"]) for k, d in sorted(rows.items())]
    causal = ("planner", "planner_irate", "planner_fit")
    best_causal = max((_att(d["results"][n]) for d in rows.values() for n in causal if n in d["results"]), default=0.0)
    gain = [100 * (_att(d["results"]["planner"]) - _att(d["results"]["planner_irate"]))
            for d in rows.values() if {"planner", "planner_irate"} <= set(d["results"])]
    vs_static = [d["results"]["planner"]["gpu_hours"] / d["results"]["static"]["gpu_hours"]
                 for d in rows.values() if {"planner", "static"} <= set(d["results"])]
    return (f"* **Planner variants, 8B bursty**: the highest attainment any planner variant reaches on any seed is "
            f"{pct(best_causal)}; the shipped planner (fitted burst reserve with the absorb gate) attains "
            f"{_span(gain, '.1f', ' points')} more than planner_irate (the planner as shipped before) at "
            f"{_span(vs_static, '.2f', 'x')} static's GPU-hours. Per seed: {'; '.join(per)}.")


def steady(runs: Runs) -> str:
    rows = {k: d for k, d in runs.items() if "azure" in k or "mooncake" in k}
    if not rows:
        return ""
    names = ["planner", "planner_constant", "planner_fit", "static", "reactive", "dynamo"]
    per = []
    for k, d in sorted(rows.items()):
        best = d["results"]["best"]
        per.append(f"{k}: best {pct(_att(best))} ({best['search'].get('chosen', 'search')}, {_size(best)}), "
                   + ", ".join(f"{n} {_pol(d, n)}" for n in names if n in d["results"]))
    return "* **Steady traces** (Azure conversation, Mooncake): " + "; ".join(per) + "."


def wide_cap(runs: Runs) -> str:
    rows = {k: d for k, d in runs.items() if any(n.startswith("best_cap") for n in d["results"])}
    if not rows:
        return ""
    per = []
    for k, d in sorted(rows.items()):
        res = d["results"]
        best = res["best"]
        causes = best.get("search", {}).get("miss_causes", {})
        wide = ", ".join(f"<= {n[8:]}: {pct(_att(r))} at {r['gpu_hours']:.2f} GPU-h (max {_size(r)})"
                         for n, r in sorted(res.items(), key=lambda x: x[0]) if n.startswith("best_cap"))
        per.append(f"{k}: <= {best.get('search', {}).get('max_replicas', d['setup']['max_replicas'])} per pool "
                   f"{pct(_att(best))} at {best['gpu_hours']:.2f} GPU-h ({causes.get('cap', 0)} misses in intervals at "
                   f"the cap), {wide}; planner {_pol(d, 'planner')}, planner_irate {_pol(d, 'planner_irate')}, "
                   f"planner_fit {_pol(d, 'planner_fit')}")
    return "* **The per-pool cap, 70B bursty** (best schedule found at 8 per pool and wider): " + "; ".join(per) + "."


def mooncake(runs: Runs) -> str:
    d = runs.get("8b_1gpu/mooncake_conv")
    if d is None:
        return ""
    f, res = d["feasibility"], d["results"]
    best, pl, re = res["best"], res["planner"], res["reactive"]
    miss = best.get("misses", {})
    return (f"* **Mooncake, 8B**: {f['counts']['ttft']} of {f['requests']} requests miss the TTFT even alone on an idle "
            f"replica ({pct(1 - f['feasible_fraction_after_warmup'])} after warm-up), "
            f"{f.get('feasible_only_with_prefix_hit', '-')} are feasible only with a prefix hit; the best schedule found "
            f"is {best['search'].get('chosen', 'a search round')} at {pct(_att(best))} of the feasible "
            f"({miss.get('prefix_miss', '-')} of its feasible misses are prefix misses); reactive "
            f"{pct(_att(re))} at {re['gpu_hours']:.2f} GPU-h vs planner {pct(_att(pl))} at {pl['gpu_hours']:.2f}.")


def dynamo(runs: Runs) -> str:
    rows = {k: d["results"]["dynamo"] for k, d in runs.items() if "dynamo" in d["results"]}
    if not rows:
        return ""
    bursty = [r for k, r in rows.items() if "bursty" in k]
    most = (f"at most {max(r['max_prefill'] for r in bursty)} prefill and {max(r['max_decode'] for r in bursty)} "
            f"decode replicas on the {len(bursty)} bursty runs; ") if bursty else ""
    return (f"* **Dynamo's SLA planner**: {most}"
            + "; ".join(f"{k} {pct(r.get('attainment_after_warmup'))} at {r['gpu_hours']:.2f} GPU-h (max {_size(r)})"
                        for k, r in sorted(rows.items())) + " (attainment over all requests after warm-up).")


def reactive_sweep(runs: Runs) -> str:
    out = []
    for k, d in sorted(runs.items()):
        sw = d["results"].get("reactive", {}).get("sweep")
        if not sw:
            continue
        outcomes = {(round(g["attainment_after_warmup"] or 0, 6), round(g["gpu_hours"], 6)) for g in sw}
        out.append(f"{k}: {len(sw)} grid points, {len(outcomes)} distinct outcomes")
    chosen = next((d["results"]["reactive"]["params"] for k, d in sorted(runs.items())
                   if not d["trace"]["tuned_on"] and "reactive" in d["results"]), None)
    if not out:
        return ""
    return (f"* **Reactive sweep** (tuning set): {'; '.join(out)}; applied to the held-out runs: "
            f"prefill target {chosen['prefill_target'] if chosen else '-'}, KV target "
            f"{chosen['decode_kv_target'] if chosen else '-'}.")


def burst_misses(results: Path) -> str:
    f = results / "diagnosis" / "burst_misses_8b.json"
    if not f.exists():
        return ""
    d = json.loads(f.read_text())
    per, tpot_only, waits, links = [], 0, [], []
    for r in d["runs"]:
        bursts = [g for g in r["groups"] if g["burst"] != "background"]
        first = bursts[0] if bursts else None
        tpot_only += sum(g["missed_on_tpot_only"] for g in r["groups"])
        waits += [g["median_wait_prefill_s"] for g in r["groups"] if g["median_wait_prefill_s"] is not None]
        links += [g["median_prefill_to_first_token_s"] for g in r["groups"]
                  if g["median_prefill_to_first_token_s"] is not None]
        per.append(f"seed {r['seed']} {r['variant']} {pct(r['attainment_after_warmup'])}"
                   + (f" (first burst after warm-up: {first['missed']} of {first['requests']} missed)" if first else ""))
    out = (f"* **Where the bursty runs lose** (`results/diagnosis/burst_misses_8b.json`, all requests after warm-up): "
           f"{tpot_only} missed on TPOT alone; per burst, the missed requests' median wait for prefill "
           f"{_span(waits, '.2f', ' s')}, from prefill done to first token {_span(links, '.2f', ' s')}. "
           + "; ".join(per) + ".")
    var = []
    for g in sorted((results / "diagnosis").glob("planner_fit_variants_8b_*.json")):
        for r in json.loads(g.read_text())["runs"]:
            var.append(f"seed {r['seed']} {r['variant']} {pct(r['attainment_after_warmup'])} at {r['gpu_hours']:.2f} GPU-h")
    if var:
        out += " planner_fit's development variants: " + "; ".join(var) + "."
    return out


def equal_gpu_hours(results: Path) -> str:
    """How often the planner is ahead of each peer at its own GPU-hours, and how often only the old rule said so."""
    per: dict[str, list[str]] = {}
    counts: dict[str, list[int]] = {}
    for key, d, sw in peer_sweeps(results):
        pl = d["results"]["planner"]
        for peer, r in sw["peers"].items():
            c = counts.setdefault(peer, [0, 0, 0])
            own = r["points"][0]
            c[0] += bool(r["planner_ahead"])
            c[1] += 1
            c[2] += bool((pl["attainment_after_warmup"] or 0.0) >= (own["attainment_after_warmup"] or 0.0)
                         and pl["gpu_hours"] <= own["gpu_hours"] * 1.01)
            if r["swept"]:
                at = r["at_planner_gpu_hours"]
                per.setdefault(peer, []).append(
                    f"{key} {pct(at['attainment'])}{'' if at['reached'] else ' (never spent it)'} vs planner "
                    f"{pct(pl['attainment_after_warmup'])}")
    if not counts:
        return ""
    parts = [f"{peer}: ahead on {c[0]} of {c[1]} runs (the plain rule, at no more GPU-hours than the peer used: "
             f"{c[2]}); swept where it spent less: {'; '.join(per.get(peer, [])) or 'none'}"
             for peer, c in sorted(counts.items())]
    return ("* **At the planner's GPU-hours** (`peer_sweep.py`: each peer tuned with hindsight on the trace where it "
            "spent less, read off its curve; attainment over all requests after warm-up): " + ". ".join(parts) + ".")


def same_floor(results: Path) -> str:
    """Where Dynamo's replay and pdserve's simulator ran at the same replica floor (peer_sweep.py's floors are the
    planner's time-mean sizes, the same for both peers): the reactive baseline holds at least that floor in pdserve's
    simulator (and scales above it), Dynamo's planner at least that floor in Dynamo's mocker. Where Dynamo attains
    more with no more replicas, the two simulators differ on that trace, and "ahead of Dynamo" there compares
    simulators as much as planners."""
    out = []
    for key, _d, sw in peer_sweeps(results):
        peers = sw["peers"]
        if not {"reactive", "dynamo"} <= set(peers):
            continue
        ours = {p["label"]: p for p in peers["reactive"]["points"] if p["label"].startswith("floor")}
        for p in peers["dynamo"]["points"]:
            o = ours.get(p["label"])
            if o is None or (p["attainment_after_warmup"] or 0.0) <= (o["attainment_after_warmup"] or 0.0):
                continue
            out.append(f"{key} {p['label']}: Dynamo's replay {pct(p['attainment_after_warmup'])} at "
                       f"{p['gpu_hours']:.2f} GPU-h (max {_size(p)}), pdserve's simulator (reactive on that floor) "
                       f"{pct(o['attainment_after_warmup'])} at {o['gpu_hours']:.2f} GPU-h (max {_size(o)})")
    if not out:
        return ""
    return ("* **Same floor, two simulators** (`peer_sweep.py` floors; Dynamo in its own mocker, reactive in pdserve's "
            "simulator, which can only add replicas above the floor): Dynamo attains more where " + "; ".join(out)
            + ". On these runs the engines' models differ (`results.dynamo.calibration`), not only the planners.")


def variants(results: Path) -> str:
    """The planner variants measured against the planner shipped at each file's commit (``burst_cost.py`` diagnosis files,
    planner-only replays of the suite's runs, GPU-hours against the committed best schedule)."""
    out = []
    for f in sorted((results / "diagnosis").glob("*.json")):
        d = json.loads(f.read_text())
        if d.get("schema") != "pdserve.planner-burst-cost/1":
            continue
        per = []
        for r in d["runs"]:
            v = r["variants"]
            per.append(f"{r['run']}{' (tuning)' if r['tuned_on'] else ''}: " + ", ".join(
                f"{n} {100 * x['attainment_after_warmup']:.2f} % at {x['gpu_hours_vs_best']:.2f}x" for n, x in v.items()))
        out.append(f"`diagnosis/{f.name}` ({', '.join(d['variants_run'])}): " + "; ".join(per))
    if not out:
        return ""
    return ("* **Planner variants against the planner shipped when each file was run** (attainment after warm-up, "
            "GPU-hours vs the best schedule; every file here predates session 15, whose default is planner_next2's "
            "parts, so their `planner` is the one before): " + ". ".join(out) + ".")


CAUSAL_DIR = "diagnosis/causal26"  # rerun.py: the causal references and the planner on the steady windows


def _meets(r: dict | None, best: dict) -> bool:
    return r is not None and _att(r) >= TARGET_ATTAINMENT and _vs(r, best) <= TARGET_VS_BEST


def steady_causal(results: Path) -> str:
    """The steady windows (every Azure run, held-out and validation window looked at), each replayed at one commit
    with the planner shipped, the onset oracle and the past-need oracle (``rerun.py``): where the target is within
    reach of a causal rule, and of which."""
    root = results / CAUSAL_DIR
    docs = [(f.relative_to(root), json.loads(f.read_text())) for f in sorted(root.rglob("*.json"))]
    docs = [(f, d) for f, d in docs if {"best", "planner", "causal", "causal_past"} <= set(d["results"])]
    if not docs:
        return ""
    names = ("planner", "causal_past", "causal")
    meets = {n: [f for f, d in docs if _meets(d["results"][n], d["results"]["best"])] for n in names}
    def label(f: Path) -> str:  # its path below results/, without diagnosis/
        return "/".join(f.with_suffix("").parts).removeprefix("diagnosis/")
    past_not_planner = [label(f) for f in meets["causal_past"] if f not in meets["planner"]]
    planner_not_past = [label(f) for f in meets["planner"] if f not in meets["causal_past"]]
    neither = [label(f) for f, _ in docs if f not in meets["planner"] and f not in meets["causal_past"]]
    per = []
    for f, d in docs:
        res = d["results"]
        best = res["best"]
        c, cp = res["causal"], res["causal_past"]
        per.append(f"{label(f)}: best {pct(_att(best))} at {best['gpu_hours']:.2f} GPU-h, planner {_pol(d, 'planner')}, "
                   f"past-need floor {cp['floor'][0]}P{cp['floor'][1]}D {_pol(d, 'causal_past')}, onset floor "
                   f"{c['floor'][0]}P{c['floor'][1]}D {_pol(d, 'causal')}")
    return (f"* **Causal references on the steady windows** (`results/{CAUSAL_DIR}/`, {len(docs)} Azure runs and "
            f"windows, each replayed at one commit by `rerun.py`): >= 99 % at <= 1.15x the best schedule found: "
            f"planner on {len(meets['planner'])}, the past-need oracle (no foresight, each interval's need read exactly "
            f"once it is over) on {len(meets['causal_past'])}, the onset oracle (each interval's need at its start) on "
            f"{len(meets['causal'])}. The past-need oracle meets it where the planner does not on "
            f"{', '.join(past_not_planner) or 'none'}; the planner where it does not on "
            f"{', '.join(planner_not_past) or 'none'}; neither on {', '.join(neither) or 'none'}. "
            f"Per file: {'; '.join(per)}.")


def render(runs: Runs, results: Path) -> str:
    lines = [x for x in (bursty_references(runs), bursty_policies(runs), steady(runs), wide_cap(runs), mooncake(runs),
                         dynamo(runs), equal_gpu_hours(results), same_floor(results), variants(results),
                         reactive_sweep(runs), burst_misses(results), steady_causal(results)) if x]
    if not lines:
        return ""
    return "\n".join(["#### What the result files say (generated by `claims.py`; the prose above explains them)", "",
                      *lines, ""])
