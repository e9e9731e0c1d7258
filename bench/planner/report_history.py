"""The "History a planner in service has" table of bench/planner/README.md, from ``results/diagnosis/
history_length.json`` (``history_length.py``); report.py splices it into the README's generated block."""

from __future__ import annotations

import json
from pathlib import Path


def _cell(r: dict) -> str:
    vs = "-" if r["gpu_hours_vs_best"] is None else f"{r['gpu_hours_vs_best']:.2f}x"
    return f"{100 * r['attainment_after_warmup']:.2f} %, {vs}{' (met)' if r['meets_target'] else ''}"


def phases_of(row: dict) -> list[dict]:
    """The recorded replay and its phase-shifted copies (the same history and traffic, the ticks moved)."""
    return [r for n, r in row["replays"].items() if n == "recorded" or n.startswith("phase_")]


def counts(d: dict) -> dict[str, int]:
    """How the longer history moves each window against the recorded replay: attainment and GPU-hours lower /
    higher, both unchanged, the target's verdict gained / lost, attainment from >= 99 % to under; and beside it what the ticks' phase alone does:
    windows whose verdict differs between phases, and history effects on attainment larger than the phases' spread."""
    out = dict.fromkeys(("att_lower", "att_higher", "gpu_lower", "gpu_higher", "unchanged", "gained", "lost",
                         "fell_under_99", "phase_verdict_differs", "beyond_phase_spread"), 0)
    for row in d["rows"]:
        a, b = row["replays"]["recorded"], row["replays"]["service"]
        da = b["attainment_after_warmup"] - a["attainment_after_warmup"]
        dg = b["gpu_hours"] - a["gpu_hours"]
        out["att_lower"] += da < -1e-12
        out["att_higher"] += da > 1e-12
        out["gpu_lower"] += dg < -1e-9
        out["gpu_higher"] += dg > 1e-9
        out["unchanged"] += abs(da) <= 1e-12 and abs(dg) <= 1e-9
        out["gained"] += b["meets_target"] and not a["meets_target"]
        out["lost"] += a["meets_target"] and not b["meets_target"]
        out["fell_under_99"] += a["attainment_after_warmup"] >= 0.99 > b["attainment_after_warmup"]
        ph = phases_of(row)
        out["phase_verdict_differs"] += len({r["meets_target"] for r in ph}) > 1
        att = [r["attainment_after_warmup"] for r in ph]
        out["beyond_phase_spread"] += not (min(att) - 1e-12 <= b["attainment_after_warmup"] <= max(att) + 1e-12)
    return out


def worst_drop(d: dict) -> tuple[str, float, float]:
    """The window whose attainment the longer history lowered most: its name, as recorded, after the history."""
    row = min(d["rows"], key=lambda r: r["replays"]["service"]["attainment_after_warmup"]
              - r["replays"]["recorded"]["attainment_after_warmup"])
    return (row["file"].split("results/", 1)[-1].removesuffix(".json"),
            row["replays"]["recorded"]["attainment_after_warmup"], row["replays"]["service"]["attainment_after_warmup"])


def history_length(results: Path) -> str:
    f = results / "diagnosis" / "history_length.json"
    if not f.exists():
        return ""
    d = json.loads(f.read_text())
    m, rows, c, w = d["meta"], d["rows"], counts(d), worst_drop(d)
    met = d["files_meeting_target"]
    n = d.get("phases", 1)
    same = sum(r["same_scored_requests"] for r in rows)
    spans = [r["replays"]["service"]["history_s"] for r in rows]
    phase_met = {k: v for k, v in met.items() if k.startswith("phase_")}
    out = [f"#### History a planner in service has (`{f.relative_to(results.parent)}`, `history_length.py`; "
           f"commit {m['commit'][:8]}, load {m['loadavg_before']['1m']:.1f})", "",
           f"Each window recorded after some history, replayed by today's planner as recorded and after the history "
           f"a planner in service would have seen: its 240-interval memory, or all the trace before the window where "
           f"shorter ({min(spans):g}-{max(spans):g} s; {len(rows)} windows, the ticks at the recorded replay's "
           f"instants, the same scored requests in every replay on {same}). After the longer history: attainment "
           f"lower on {c['att_lower']} (from >= 99 % to under on {c['fell_under_99']}; the most on {w[0]}, "
           f"{100 * w[1]:.2f} -> {100 * w[2]:.2f} %), higher on {c['att_higher']}; GPU-hours lower on {c['gpu_lower']}, higher on "
           f"{c['gpu_higher']}; both unchanged on {c['unchanged']}. The target is met on {met['service']} (as "
           f"recorded: {met['recorded']}; gained on {c['gained']}, lost on {c['lost']})."
           + (f" The ticks' phase alone (the recorded replay with its ticks moved by each 1/{n} of an interval: "
              f"met on {', '.join(str(v) for v in phase_met.values())}) changes the verdict on "
              f"{c['phase_verdict_differs']}; the longer history's attainment is outside the phases' range on "
              f"{c['beyond_phase_spread']}." if n > 1 else ""), "",
           "| window | history: recorded / service (s) | as recorded: after warm-up, vs best | after the service's "
           f"history | {n} phases: attainment | {n} phases: vs best | phases meeting the target |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        a, b = r["replays"]["recorded"], r["replays"]["service"]
        ph = phases_of(r)
        att = [x["attainment_after_warmup"] for x in ph]
        vs = [x["gpu_hours_vs_best"] for x in ph if x["gpu_hours_vs_best"] is not None]
        name = r["file"].split("results/", 1)[-1].removesuffix(".json")
        out.append(f"| {name} | {a['history_s']:g} / {b['history_s']:g} | {_cell(a)} | {_cell(b)} | "
                   f"{100 * min(att):.2f}-{100 * max(att):.2f} % | "
                   + (f"{min(vs):.2f}-{max(vs):.2f}x" if vs else "-")
                   + f" | {sum(x['meets_target'] for x in ph)} of {len(ph)} |")
    return "\n".join(out + [""])
