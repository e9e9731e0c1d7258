"""The "History a planner in service has" table of bench/planner/README.md, from ``results/diagnosis/
history_length.json`` (``history_length.py``); report.py splices it into the README's generated block."""

from __future__ import annotations

import json
from pathlib import Path


def _cell(r: dict) -> str:
    vs = "-" if r["gpu_hours_vs_best"] is None else f"{r['gpu_hours_vs_best']:.2f}x"
    return f"{100 * r['attainment_after_warmup']:.2f} %, {vs}{' (met)' if r['meets_target'] else ''}"


def counts(d: dict) -> dict[str, int]:
    """How the longer history moves each window: attainment and GPU-hours lower / higher, both unchanged, and the
    target's verdict gained / lost."""
    out = dict.fromkeys(("att_lower", "att_higher", "gpu_lower", "gpu_higher", "unchanged", "gained", "lost"), 0)
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
    return out


def history_length(results: Path) -> str:
    f = results / "diagnosis" / "history_length.json"
    if not f.exists():
        return ""
    d = json.loads(f.read_text())
    m, rows, c = d["meta"], d["rows"], counts(d)
    met = d["files_meeting_target"]
    same = sum(r["same_scored_requests"] for r in rows)
    spans = [r["replays"]["service"]["history_s"] for r in rows]
    out = [f"#### History a planner in service has (`{f.relative_to(results.parent)}`, `history_length.py`; "
           f"commit {m['commit'][:8]}, load {m['loadavg_before']['1m']:.1f})", "",
           f"Each window recorded after some history, replayed by today's planner as recorded and after the history "
           f"a planner in service would have seen: its 240-interval memory, or all the trace before the window where "
           f"shorter ({min(spans):g}-{max(spans):g} s; {len(rows)} windows, the same scored requests in both replays "
           f"on {same}). After the longer history: attainment lower on {c['att_lower']}, higher on "
           f"{c['att_higher']}; GPU-hours lower on {c['gpu_lower']}, higher on {c['gpu_higher']}; both unchanged on "
           f"{c['unchanged']}. The target is met on {met['service']} (as recorded: {met['recorded']}; gained on "
           f"{c['gained']}, lost on {c['lost']}).", "",
           "| window | history: recorded / service (s) | as recorded: after warm-up, vs best | after the service's history |",
           "| --- | ---: | ---: | ---: |"]
    for r in rows:
        a, b = r["replays"]["recorded"], r["replays"]["service"]
        name = r["file"].split("results/", 1)[-1].removesuffix(".json")
        out.append(f"| {name} | {a['history_s']:g} / {b['history_s']:g} | {_cell(a)} | {_cell(b)} |")
    return "\n".join(out + [""])
