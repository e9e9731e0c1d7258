#!/usr/bin/env python3
"""Render the planner evaluation's tables from the committed result files into the README.

    python bench/planner/report.py                 # rewrites the block between the markers
    python bench/planner/report.py --check         # exit 1 if the README is stale

Reads ``results/<setup>/<trace>.json`` (schema ``pdserve.planner-eval/2``); every number in
the block comes from those files, so nothing is typed by hand.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]
import claims  # noqa: E402
from claims import pct  # noqa: E402
from report_conditions import settings_service  # noqa: E402
from report_dynamo import cross_engine, dynamo_guided  # noqa: E402
from report_history import history_length  # noqa: E402
from readme_block import replace_block, write_or_check  # noqa: E402
BEGIN, END = "<!-- results:begin (bench/planner/report.py) -->", "<!-- results:end -->"
ORDER = ["lower bound", "best", "static", "causal", "causal_past", "best_cap16", "best_cap32", "static_cap16", "reactive", "planner", "planner_no_level", "planner_irate", "planner_burst",
         "planner_fit", "planner_constant", "dynamo", "dynamo_load"]


REPEAT_DIR = "dynamo_repeat"  # suite.py --dynamo-repeat: Dynamo's replay once more, not a run of its own
SWEEP_DIR = claims.SWEEP_DIR


def runs(results: Path) -> list[tuple[Path, dict]]:
    """The evaluation runs (``results/<setup>/<trace>.json``), without the Dynamo repeats."""
    out = []
    for f in sorted(results.glob("*/*.json")):
        d = json.loads(f.read_text())
        if f.parent.name not in (REPEAT_DIR, SWEEP_DIR) and d.get("schema") == "pdserve.planner-eval/2":
            out.append((f, d))
    return out


def dynamo_repeat_pairs(results: Path) -> list[tuple[str, str, dict, dict]]:
    """(setup, trace, Dynamo's row in the run's file, its row in the repeat) for every ``dynamo_repeat/`` file
    whose run exists and holds Dynamo in both (``suite.py --dynamo-repeat``)."""
    out = []
    for f in sorted((results / REPEAT_DIR).glob("*.json")):
        setup, trace = f.stem.split("__", 1)
        main = results / setup / f"{trace}.json"
        if not main.exists():
            continue
        a, b = (json.loads(g.read_text())["results"].get("dynamo") for g in (main, f))
        if a is not None and b is not None:
            out.append((setup, trace, a, b))
    return out


def dynamo_repeats(results: Path) -> str:
    """Dynamo's offline replay run twice on the same input: the run's file and its repeat, side by side."""
    rows = [f"| {setup}/{trace} | {pct(a['attainment_after_warmup'])} / {pct(b['attainment_after_warmup'])} | "
            f"{a['gpu_hours']:.2f} / {b['gpu_hours']:.2f} | {a['max_prefill']}P{a['max_decode']}D / "
            f"{b['max_prefill']}P{b['max_decode']}D |" for setup, trace, a, b in dynamo_repeat_pairs(results)]
    if not rows:
        return ""
    return "\n".join(["#### Dynamo's planner, replayed twice on the same input (`suite.py --dynamo-repeat`)", "",
                      "| run | after warm-up: run / repeat | GPU-hours: run / repeat | max P, D: run / repeat |",
                      "| --- | ---: | ---: | ---: |", *rows, ""])


def peers_at_planner_gpu_hours(results: Path) -> str:
    """One row per run and peer: the peer as run, and its curve read at the planner's GPU-hours (peer_sweep.py)."""
    rows = []
    for key, d, sw in claims.peer_sweeps(results):
        pl = d["results"]["planner"]
        png = results / SWEEP_DIR / f"{key.replace('/', '__')}.png"
        where = f"[{key}]({png.relative_to(results.parent)})" if png.exists() else key
        for peer, r in sw["peers"].items():
            own, at = r["points"][0], r["at_planner_gpu_hours"]
            alt = at.get("best_at_or_above")
            rows.append(
                f"| {where} | {peer} | {pct(own['attainment_after_warmup'])} at {own['gpu_hours']:.2f} | "
                + (f"{len(r['points']) - 1} | " if r["swept"] else "- | ")
                + f"{pct(at['attainment'])}{'' if at['reached'] else ' (never spent it)'} "
                  f"({' .. '.join(at['between'])}) | "
                + (f"{pct(alt['attainment'])} at {alt['gpu_hours']:.2f} ({alt['label']})" if alt else "-")
                + f" | {pct(pl['attainment_after_warmup'])} at {pl['gpu_hours']:.2f} | "
                  f"{'yes' if r['planner_ahead'] else 'no'} |")
            if r.get("planner_ahead_of_best_at_or_above") not in (None, r["planner_ahead"]):
                rows[-1] = rows[-1][:-2] + " (the other reading disagrees) |"
    if not rows:
        return ""
    return "\n".join([
        "#### The peers at the planner's GPU-hours (`peer_sweep.py`, `results/peer_sweep/`)", "",
        "Where a peer spent fewer GPU-hours than the planner it was replayed at a few settings of its own knobs "
        "(Dynamo: SLA targets x0.5, last-value predictor, endpoint floors; reactive: targets x0.5, 300 s "
        "stabilisation, minReplicas floors; floors at the planner's time-mean replicas rounded down and up), tuned "
        "with hindsight on this trace. Its attainment at the planner's GPU-hours is read off its frontier by linear "
        "interpolation. Attainment after warm-up, over all requests; GPU-hours absolute; each run links its plot.", "",
        "| run | peer | as run | sweep points | peer at the planner's GPU-hours (between) | most at >= the planner's "
        "GPU-hours | planner | planner ahead |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |", *rows, ""])


def _earlier(d: dict) -> str:
    """Commits of the file's earlier runs: rows of policies not re-run come from them."""
    seen: list[str] = []
    for m in d.get("earlier_runs", []):
        c = str(m.get("commit"))[:8]
        if c not in seen and c != str(d["meta"]["commit"])[:8]:
            seen.append(c)
    return f" (earlier runs: {', '.join(seen)}; `earlier_runs`)" if seen else ""


def _feasible_line(f: dict | None) -> str:
    """The trace's requests that could meet the SLO alone on idle replicas (feasibility.py)."""
    if not f:
        return ""
    c = f["counts"]
    why = ", ".join(f"{n} {k}" for k, n in c.items() if k != "feasible" and n)
    return (f" Feasible alone: {pct(f['feasible_fraction'])} of requests, "
            f"{pct(f['feasible_fraction_after_warmup'])} after warm-up" + (f" (infeasible: {why})." if why else "."))


def _label(name: str, r: dict) -> str:
    size = r.get("size", ["?", "?"])
    if name == "best":
        return "best schedule found" + (f" (= {r['search']['chosen']})" if "static" in r["search"].get("chosen", "")
                                        else "")
    if name.startswith("best_cap"):
        return f"best schedule found, <= {name[8:]} per pool"
    if name.startswith("static"):
        return f"static {size[0]}P{size[1]}D" + (f", <= {name[10:]} per pool" if name != "static" else "")
    if name == "causal":
        return f"causal: floor {r['floor'][0]}P{r['floor'][1]}D + onset oracle"
    if name == "causal_past":
        return f"causal: floor {r['floor'][0]}P{r['floor'][1]}D + past-need oracle"
    return name


def achievable(results: Path) -> str:
    """One row per run: what the references say is achievable (all numbers from the result files)."""
    out = ["| run | feasible alone, after warm-up | best found: of feasible, after warm-up | its misses: infeasible / "
           "cap / end-to-end / stalled | static vs best | causal (floor + onset oracle): of feasible, vs best | best found "
           "with a wider cap |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for f, d in runs(results):
        if "best" not in d["results"]:
            continue
        res, best = d["results"], d["results"]["best"]
        causes = best.get("search", {}).get("miss_causes")
        mc = " / ".join(str(causes[k]) for k in ("infeasible", "cap", "end_to_end", "stalled")) if causes else "-"
        st = res.get("static")
        ca = res.get("causal")
        wide = [(int(k[8:]), r) for k, r in res.items() if k.startswith("best_cap")]
        wide_s = ", ".join(f"<= {n}/pool: {pct(r.get('attainment_feasible_after_warmup'))} at {r['gpu_hours']:.2f} GPU-h "
                           f"(max {r['max_prefill']}P{r['max_decode']}D)" for n, r in sorted(wide)) or "-"
        out.append(
            f"| {f.parent.name}/{d['trace']['id']} | {pct(d.get('feasibility', {}).get('feasible_fraction_after_warmup'))} "
            f"| {pct(best.get('attainment_feasible_after_warmup'))} at {best['gpu_hours']:.2f} GPU-h | {mc} | "
            + (f"{st['gpu_hours'] / best['gpu_hours']:.2f}x ({pct(st.get('attainment_feasible_after_warmup'))})"
               if st else "-") + " | "
            + (f"{ca['floor'][0]}P{ca['floor'][1]}D: {pct(ca.get('attainment_feasible_after_warmup'))}, "
               f"{ca['gpu_hours'] / best['gpu_hours']:.2f}x" if ca else "-") + f" | {wide_s} |")
    return "\n".join(out)


HELDOUT_DIR = "heldout"  # windows of the traces that no run above replays (session 16), outside the suite
TARGET_ATTAINMENT, TARGET_VS_BEST = claims.TARGET_ATTAINMENT, claims.TARGET_VS_BEST


def heldout_target_met(attainment_after_warmup: float, vs_best: float) -> bool:
    """The done-when bound read on a held-out window (the peers are in its file, not swept there)."""
    return attainment_after_warmup >= TARGET_ATTAINMENT and vs_best <= TARGET_VS_BEST


# Held-out windows added (suite.HELDOUT) before any planner was replayed on them: session 17's. Session 16's were
# replayed while session 17 chose the planner's burst level ratio, so they are held out from the tuning set but
# were looked at; the table says which is which.
HELDOUT_FRESH = {("70b_tp4", "azure_conv_x2_from600"), ("70b_tp4", "azure_conv_x1_from2400"),
                 ("8b_1gpu", "azure_conv_x2_from600"), ("8b_1gpu", "mooncake_conv_from2900")}


def heldout(results: Path) -> str:
    """``results/heldout/<setup>/<trace>.json``: evaluate.py on windows no suite run replays (a later part of
    the hour, a rate the setup was not run at), one row each, with the done-when target read on each."""
    files = sorted((results / HELDOUT_DIR).glob("*/*.json"))
    if not files:
        return ""
    out = ["#### Held-out windows (`results/heldout/`: parts of the traces no run above replays; *fresh*: added "
           "before any planner replayed them)", "",
           "| run | window (s, after rate scaling) | requests scored | planner: after warm-up, vs best | best found: after "
           "warm-up | reactive: after warm-up, vs best | Dynamo: after warm-up, vs best | >= 99 % at <= 1.15x "
           "| planner without the level ratio (session 16's) | commit, load |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- |"]
    for f in files:
        d = json.loads(f.read_text())
        res, tr, m = d["results"], d["trace"], d["meta"]
        best = res["best"]["gpu_hours"]
        cell = {name: f"{pct(r['attainment_after_warmup'])}, {r['gpu_hours'] / best:.2f}x" for name, r in res.items()}
        p = res["planner"]
        met = heldout_target_met(p["attainment_after_warmup"] or 0.0, p["gpu_hours"] / best)
        hist = tr.get("history") or {}
        after = f", after {hist['seconds']:g} s replayed" if hist else ""
        fresh = " (fresh)" if (f.parent.name, f.stem) in HELDOUT_FRESH else ""
        out.append(f"| [{f.parent.name}/{tr['id']}]({f.relative_to(results.parent)}){fresh} | {tr['window_s'][0]:.0f}-"
                   f"{tr['window_s'][1]:.0f} at {tr['rate_scale']:g}x{after} | {tr['requests'] - hist.get('requests', 0)} "
                   f"| {cell['planner']} | "
                   f"{pct(res['best']['attainment_after_warmup'])} | {cell.get('reactive', '-')} | {cell.get('dynamo', '-')} | "
                   f"{'met' if met else '**missed**'} | {cell.get('planner_no_level', '-')} | "
                   f"{m['commit'][:8]}, {m['loadavg_before']['1m']:.1f} |")
    return "\n".join(out + [""])


def restarts(results: Path) -> str:
    """``results/diagnosis/restart.json`` (``restart.py``): each file's window with the planner restarted every so
    often, cold (a fresh planner) and warm (a fresh planner that first replays the store's history)."""
    f = results / "diagnosis" / "restart.json"
    if not f.exists():
        return ""
    d = json.loads(f.read_text())
    sm, m = d["summary"], d["meta"]
    low = sm["lower_attainment_than_planner"]
    out = [f"#### Planner restarts (`{f.relative_to(results.parent)}`, `restart.py`; commit {m['commit'][:8]}, "
           f"load {m['loadavg_before']['1m']:.1f})", "",
           f"A fresh planner every {d['restart_every_s']:g} s of each scored window ({sm['restarts']} restarts on "
           f"{sm['files']} runs and held-out windows). Started cold, it attains less than the planner never restarted "
           f"on {low['cold']} of them and meets the target on {sm['meeting_target']['cold']} (never restarted: "
           f"{sm['meeting_target']['planner']}); warm-started from the store's history, less on {low['warm']}, "
           f"meets it on {sm['meeting_target']['warm']}, and runs the same replica series as the planner never "
           f"restarted on {sm['warm_same_as_planner']}.", "",
           "| run | restarts | never restarted: after warm-up, vs best | cold | warm |",
           "| --- | ---: | ---: | ---: | ---: |"]
    for r in d["rows"]:
        cell = {w: f"{pct(x['attainment_after_warmup'])}, "
                   f"{'-' if x['gpu_hours_vs_best'] is None else format(x['gpu_hours_vs_best'], '.2f')}x"
                for w, x in r["replays"].items()}
        name = r["file"].split("results/", 1)[-1].removesuffix(".json")
        out.append(f"| {name} | {len(r['restarts_s'])} | {cell['planner']} | {cell['cold']} | {cell['warm']} |")
    return "\n".join(out + [""])


def render(results: Path) -> str:
    out = ["#### What is achievable (references)", "", achievable(results), ""]
    held = heldout(results)
    out += [held] if held else []
    rest = restarts(results)
    out += [rest] if rest else []
    hist = history_length(results)
    out += [hist] if hist else []
    svc = settings_service(results)
    out += [svc] if svc else []
    rep = dynamo_repeats(results)
    out += [rep] if rep else []
    eq = peers_at_planner_gpu_hours(results)
    out += [eq] if eq else []
    cross = cross_engine(results)
    out += [cross] if cross else []
    guided = dynamo_guided(results)
    out += [guided] if guided else []
    found = claims.render({f"{f.parent.name}/{f.stem}": d for f, d in runs(results)}, results)
    out += [found] if found else []
    base = results.parent  # links relative to the README's folder (results/ sits next to it)
    for f, d in runs(results):
        tr, su, m = d["trace"], d["setup"], d["meta"]
        res = d["results"]
        best = res.get("best", {}).get("gpu_hours")
        tag = "tuning set" if tr["tuned_on"] else "held out"
        out += [
            f"#### {tr['id']} — {su['model_profile']} (TP {su['tp']['prefill']}, <= {su['max_replicas']} per pool), {tag}",
            "",
            f"{tr['requests']} requests over {tr['window_s'][1] - tr['window_s'][0]:.0f} s, {tr['mean_rate']:.1f} req/s, "
            f"{tr['prompt_tokens_per_s'] / 1000:.1f}k prompt tokens/s on average; warm-up {su['warmup_s']:.0f} s. "
            f"[`{f.relative_to(base)}`]({f.relative_to(base)}), load {m['loadavg_before']['1m']:.1f}, "
            f"commit {m['commit'][:8]}{_earlier(d)}.{_feasible_line(d.get('feasibility'))}",
            "",
            "| policy | attainment | after warm-up | feasible only, after warm-up | GPU-hours | vs best | max P / D |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
            f"| lower bound | - | - | - | {d['lower_bound']['gpu_hours']:.2f} | "
            f"{d['lower_bound']['gpu_hours'] / best:.2f} | - |" if best else
            f"| lower bound | - | - | - | {d['lower_bound']['gpu_hours']:.2f} | - | - |",
        ]
        for name in ORDER[1:]:
            r = res.get(name)
            if r is None:
                continue
            label = _label(name, r)
            vs = f"{r['gpu_hours'] / best:.2f}" if best else "-"
            out.append(f"| {label} | {pct(r['attainment'])} | {pct(r['attainment_after_warmup'])} | "
                       f"{pct(r.get('attainment_feasible_after_warmup'))} | {r['gpu_hours']:.2f} | {vs} | {r.get('max_prefill', '-')} / {r.get('max_decode', '-')} |")
        out.append("")
        png = f.with_suffix(".png")
        if png.exists():
            out += [f"![{tr['id']} {su['model_profile']}]({png.relative_to(base)})", ""]
    return "\n".join(out)


def splice(readme: str, block: str) -> str:
    return replace_block(readme, BEGIN, END, f"{BEGIN}\n{block}\n{END}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--folder", type=Path, default=HERE / "results", help="result folder")
    ap.add_argument("--readme", type=Path, default=HERE / "README.md")
    ap.add_argument("--out", type=Path, help="write the rendered block here instead of into the README")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    block = render(args.folder)
    if args.out:
        args.out.write_text(block + "\n")
        return 0
    readme = args.readme.read_text()
    new = splice(readme, block)
    return write_or_check(args.readme, readme, new, args.check, "stale: run bench/planner/report.py")


if __name__ == "__main__":
    sys.exit(main())
