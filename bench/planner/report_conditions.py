"""The "Settings after the service's history, over tick phases" tables of bench/planner/README.md, one per
``results/diagnosis/settings_service*.json`` (``settings_sweep.py --history service --phases N``: a sweep too long
for one session is run as several files, e.g. the bursty windows and the 70B ones); report.py splices them into the
README's generated block."""

from __future__ import annotations

import json
from pathlib import Path

FILE = Path("diagnosis") / "settings_service.json"


def _name(f: str) -> str:
    return f.split("results/", 1)[-1].removesuffix(".json")


def _cell(f: dict) -> str:
    """One setting on one window over the conditions: conditions meeting the target, attainment lowest-median,
    median multiple of best."""
    vs = "-" if f["gpu_hours_vs_best_median"] is None else f"{f['gpu_hours_vs_best_median']:.2f}x"
    return (f"{f['met']} of {f['of']}; {100 * f['attainment_min']:.2f}-{100 * f['attainment_median']:.2f} %; {vs}")


def lower_than_shipped(d: dict, name: str) -> tuple[int, int]:
    """Windows where the setting's lowest attainment over the conditions is below / above the shipped planner's."""
    ship = {f["file"]: f for f in d["over_conditions"]["shipped"]["files"]}
    below = above = 0
    for f in d["over_conditions"][name]["files"]:
        s = ship[f["file"]]
        below += f["attainment_min"] < s["attainment_min"] - 1e-12
        above += f["attainment_min"] > s["attainment_min"] + 1e-12
    return below, above


def settings_service(results: Path) -> str:
    """Every ``settings_service*.json`` sweep's table, in file-name order ("" where there is none); a file read
    under one condition only (no ``over_conditions``) has no such table and is left to its own reader."""
    found = sorted((results / FILE.parent).glob(f"{FILE.stem}*.json"))
    docs = [(f, json.loads(f.read_text())) for f in found]
    return "\n".join(_table(results, f, d) for f, d in docs if "over_conditions" in d)


def _table(results: Path, f: Path, d: dict) -> str:
    m, oc, conds = d["meta"], d["over_conditions"], d["conditions"]
    names = list(oc)
    files = [x["file"] for x in oc["shipped"]["files"]]
    changes = "; ".join(f"`{n}`: {', '.join(f'{k} {v}' for k, v in d['settings'][n].items())}" for n in names[1:])
    summary = []
    for n in names:
        below, above = lower_than_shipped(d, n) if n != "shipped" else (0, 0)
        summary.append(f"`{n}` meets the target under every condition on {oc[n]['files_met_under_every_condition']}"
                       f" (median over the conditions {oc[n]['median_files_meeting_target']:g})"
                       + (f", its lowest attainment below the shipped planner's on {below} and above on {above}"
                          if n != "shipped" else ""))
    out = [f"#### Settings after the service's history, over tick phases (`{f.relative_to(results.parent)}`, "
           f"`settings_sweep.py --history service --phases {len(conds)}`; commit {m['commit'][:8]}, "
           f"load {m['loadavg_before']['1m']:.1f})", "",
           f"Each window after the history a planner in service has (`committed.py`), its ticks at the recorded "
           f"replay's instants and moved by each 1/{len(conds)} of an interval ({len(files)} windows; {changes}). "
           f"Each cell: conditions meeting the target; attainment lowest-median; median GPU-hours vs best. "
           + "; ".join(summary) + ".", "",
           "| window | " + " | ".join(names) + " |", "| --- |" + " ---: |" * len(names)]
    cells = {n: {x["file"]: x for x in oc[n]["files"]} for n in names}
    for file in files:
        out.append(f"| {_name(file)} | " + " | ".join(_cell(cells[n][file]) for n in names) + " |")
    return "\n".join(out + [""])
