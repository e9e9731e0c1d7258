"""The peer's tables in the planner README's generated block: the runs replayed in Dynamo's engine
(``cross_engine.py``, ``results/cross_engine.json``) and Dynamo's planner as its guide advises for bursty traffic
(``rerun.py --policies dynamo_load``, ``results/diagnosis/dynamo_load30/``). Split from report.py (past 500 lines);
report.render calls these, readme_table.py reads the counts."""

from __future__ import annotations

import json
from pathlib import Path

from claims import TARGET_VS_BEST, pct


CROSS_ENGINE = "cross_engine.json"  # cross_engine.py: runs replayed in Dynamo's engine


def _pair(a: dict, b: dict) -> dict[str, bool]:
    """Two policies on one window: which attains more after warm-up (half a point in a thousand counts as equal),
    whether both meet 99 %, and where they do which spends fewer GPU-hours (within half a percent counts as equal)."""
    aa, ba = a["attainment_after_warmup"] or 0.0, b["attainment_after_warmup"] or 0.0
    both = aa >= 0.99 and ba >= 0.99
    return {"a_more": aa > ba + 5e-4, "b_more": ba > aa + 5e-4, "both_met": both,
            "a_cheaper": both and a["gpu_hours"] < 0.995 * b["gpu_hours"],
            "b_cheaper": both and b["gpu_hours"] < 0.995 * a["gpu_hours"]}


def cross_engine_counts(d: dict) -> dict[str, int]:
    """cross_engine.py's file read as counts: where each planner meets 99 %, which attains more, which is cheaper
    where both meet it (GPU-hours within half a percent count as equal)."""
    def get(row: dict, name: str) -> dict | None:
        return (row["policies"].get(name) or {}).get("dynamo_engine")

    out = dict.fromkeys(("runs", "planner_met", "dynamo_met", "best_met", "planner_more", "dynamo_more", "both_met",
                         "planner_cheaper", "dynamo_cheaper", "planner_target", "dynamo_target"), 0)
    for row in d["rows"]:
        p, y, b = get(row, "planner"), get(row, "dynamo"), get(row, "best")
        pa, ya = (None if r is None else r["attainment_after_warmup"] or 0.0 for r in (p, y))
        out["runs"] += 1
        out["planner_met"] += pa is not None and pa >= 0.99
        out["dynamo_met"] += ya is not None and ya >= 0.99
        # the done-when bound in this engine (cross_engine.py: against the best schedule replayed here)
        out["planner_target"] += bool(p and p.get("meets_target"))
        out["dynamo_target"] += bool(y and y.get("meets_target"))
        out["best_met"] += b is not None and (b["attainment_after_warmup"] or 0.0) >= 0.99
        if p is None or y is None:
            continue
        c = _pair(p, y)
        for k, v in (("planner_more", "a_more"), ("dynamo_more", "b_more"), ("both_met", "both_met"),
                     ("planner_cheaper", "a_cheaper"), ("dynamo_cheaper", "b_cheaper")):
            out[k] += c[v]
    return out


def cross_engine(results: Path) -> str:
    """The runs replayed in Dynamo's offline replay engine (``cross_engine.py``): pdserve's planner closed loop, Dynamo's
    planner, the run's schedules open loop, beside the planner's numbers in pdserve's simulator."""
    f = results / CROSS_ENGINE
    if not f.exists():
        return ""
    d = json.loads(f.read_text())

    def cell(row: dict, name: str, key: str = "dynamo_engine") -> str:
        r = (row["policies"].get(name) or {}).get(key)
        return f"{pct(r['attainment_after_warmup'])} at {r['gpu_hours']:.2f}" if r else "-"

    settings = d.get("settings", {})
    rows = []
    for row in d["rows"]:
        cal = row["calibration"]
        run = Path(row["file"]).with_suffix("")
        name = "/".join(run.parts[run.parts.index("results") + 1:]) if "results" in run.parts else run.name
        dec = cal.get("decode_b128_ctx2048_ratio_mocker_to_pdserve")
        isl = cal.get("prefill_isl")
        alone = cal.get(f"prefill_isl{isl}_alone_ratio_mocker_to_pdserve")
        match = (f"{isl} {cal.get('prefill_match', 'alone')}" if isl is not None else "-") \
            + ("" if alone is None else f" (alone {alone:.2f})")
        rows.append(f"| {name} | {match}; {'-' if dec is None else f'{dec:.2f}'} | "
                    f"{cell(row, 'planner')} | {cell(row, 'dynamo')} | {cell(row, 'best')} | {cell(row, 'static')} | "
                    f"{cell(row, 'planner_schedule')} | {cell(row, 'planner', 'pdserve_sim')} |"
                    + "".join(f" {cell(row, f'planner@{k}')} |" for k in settings))
    c = cross_engine_counts(d)
    m = d["meta"]
    return "\n".join([
        "#### The runs in another engine model: Dynamo's offline replay (`cross_engine.py`, `results/cross_engine.json`)", "",
        f"Commit {m['commit'][:8]}, load {m['loadavg_before']['1m']:.1f}. Each run's window in Dynamo 1.6.1's mocker, "
        "calibrated to pdserve's engine numbers (prefill matched at the window's mean prompt, flat out with its batch "
        "full or one request alone, the mocker's time for one request alone over pdserve's in brackets where matched "
        "flat out; the mocker's decode step at batch 128 and context 2,048 over pdserve's is the second number); "
        "Dynamo's router at its replay default "
        "(round robin). pdserve's planner runs closed loop on what Dynamo's replay shows it (no tail latencies, no "
        "prefill-engine TTFT: its prefill latency correction stays at 1); the best schedule found, the static size "
        "and the planner's decisions are the run's, from pdserve's simulator, replayed open loop. Attainment after "
        f"warm-up at GPU-hours. Of {c['runs']} runs and windows, the planner attains at least 99 % on {c['planner_met']} "
        f"and Dynamo's planner on {c['dynamo_met']}; the planner attains more on {c['planner_more']}, Dynamo's planner "
        f"on {c['dynamo_more']}; where both attain at least 99 % ({c['both_met']}), the planner spends fewer GPU-hours "
        f"on {c['planner_cheaper']} and Dynamo's planner on {c['dynamo_cheaper']}. The best schedule found on pdserve's "
        f"simulator holds 99 % in this engine on {c['best_met']}. The done-when bound read in this engine (at least "
        f"99 % at no more than {TARGET_VS_BEST:g}x the GPU-hours of the best schedule replayed here): the planner on "
        f"{c['planner_target']}, Dynamo's planner on {c['dynamo_target']}.", "",
        "| run | prefill matched at (tokens, how); decode step vs ours | planner (closed loop) | Dynamo's planner | "
        "best schedule (open loop) | static (open loop) | planner's decisions (open loop) | planner in pdserve's "
        "simulator |" + "".join(f" planner with {', '.join(f'{f} {v}' for f, v in ch.items())} (closed loop) |"
                                for ch in settings.values()),
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |" + " ---: |" * len(settings), *rows, ""])


DYNAMO_LOAD_DIR = "diagnosis/dynamo_load30"  # rerun.py --policies dynamo_load: copies of the runs with Dynamo as guided


GUIDED_SWEEP = "peer_sweep"  # below DYNAMO_LOAD_DIR: peer_sweep.py --peers dynamo_load on its copies


def guided_sweeps(results: Path) -> dict[str, dict]:
    """Each guided sweep (``peer_sweep.py --peers dynamo_load``) by run (the file's stem is the run's path below
    results/ with '/' as '__'): its ``peers.dynamo_load`` entry."""
    out = {}
    for f in sorted((results / DYNAMO_LOAD_DIR / GUIDED_SWEEP).glob("*.json")):
        sw = json.loads(f.read_text())["peers"].get("dynamo_load")
        if sw:
            out[f.stem.replace("__", "/")] = sw
    return out


def dynamo_guided_rows(results: Path) -> list[tuple[str, dict]]:
    """(run, its results) for every copy under ``DYNAMO_LOAD_DIR`` holding both Dynamo rows and the planner."""
    base = results / DYNAMO_LOAD_DIR
    out = []
    for f in sorted(base.rglob("*.json")):
        if f.parent.name == GUIDED_SWEEP:
            continue
        r = json.loads(f.read_text())["results"]
        if {"dynamo", "dynamo_load", "planner"} <= set(r):
            out.append((str(f.relative_to(base).with_suffix("")), r))
    return out


def dynamo_guided_counts(rows: list[tuple[str, dict]], cross: dict[str, dict | None] | None = None,
                         sweeps: dict[str, dict] | None = None) -> dict[str, int]:
    """Where each meets 99 % after warm-up, which attains more (half a point in a thousand counts as equal), which is
    cheaper where both meet it (GPU-hours within half a percent count as equal); ``cross_*``: the same for pdserve's
    planner on Dynamo's engine (``cross``: run -> its cross_engine.py row) against the guided Dynamo; ``swept_*``:
    where the guided Dynamo was swept (``sweeps``), which attains more at the planner's GPU-hours."""
    def att(r: dict) -> float:
        return r["attainment_after_warmup"] or 0.0

    out = dict.fromkeys(("runs", "shipped_met", "load_met", "planner_met", "load_over_shipped", "shipped_over_load"), 0)

    def versus(prefix: str, p: dict, ld: dict) -> None:
        for k in ("runs", "planner_met", "planner_more", "load_more", "both_met", "planner_cheaper", "load_cheaper"):
            out.setdefault(prefix + k, 0)
        out[prefix + "runs"] += prefix != ""  # the plain pair is every run, counted once above
        out[prefix + "planner_met"] += att(p) >= 0.99
        c = _pair(p, ld)
        for k, v in (("planner_more", "a_more"), ("load_more", "b_more"), ("both_met", "both_met"),
                     ("planner_cheaper", "a_cheaper"), ("load_cheaper", "b_cheaper")):
            out[prefix + k] += c[v]

    for name, r in rows:
        p, y, ld = r["planner"], r["dynamo"], r["dynamo_load"]
        out["runs"] += 1
        out["shipped_met"] += att(y) >= 0.99
        out["load_met"] += att(ld) >= 0.99
        out["load_over_shipped"] += att(ld) > att(y) + 5e-4
        out["shipped_over_load"] += att(y) > att(ld) + 5e-4
        versus("", p, ld)
        if cross and cross.get(name):
            versus("cross_", cross[name], ld)  # type: ignore[arg-type]
        sw = (sweeps or {}).get(name)
        if sw and sw["swept"]:
            at = sw["at_planner_gpu_hours"]["attainment"]
            for k in ("swept_runs", "swept_planner_more", "swept_load_more"):
                out.setdefault(k, 0)
            out["swept_runs"] += 1
            out["swept_planner_more"] += att(p) > at + 5e-4
            out["swept_load_more"] += at > att(p) + 5e-4
    return out


CROSS_ENGINE_KV = "diagnosis/cross_engine_kv30.json"  # cross_engine.py --router-mode kv_router, ours only


def cross_engine_planner(results: Path, name: str = CROSS_ENGINE) -> dict[str, dict | None]:
    """pdserve's planner closed loop on Dynamo's engine (``cross_engine.json``, or ``name``), by run (its path below
    results/): set beside Dynamo's planner, which runs on that engine, the two on one engine model."""
    out: dict[str, dict | None] = {}
    if (results / name).exists():
        for row in json.loads((results / name).read_text())["rows"]:
            run = Path(row["file"]).with_suffix("")
            if "results" in run.parts:
                out["/".join(run.parts[run.parts.index("results") + 1:])] = (
                    (row["policies"].get("planner") or {}).get("dynamo_engine"))
    return out


def dynamo_guided(results: Path) -> str:
    """Dynamo's planner as its guide advises for bursty traffic (``dynamo_load``) beside it as shipped and the planner."""
    rows = dynamo_guided_rows(results)
    if not rows:
        return ""

    def cell(r: dict | None) -> str:
        if r is None:
            return "-"
        top = f" (max {r['max_prefill']}P{r['max_decode']}D)" if r.get("max_prefill") is not None else ""
        return f"{pct(r['attainment_after_warmup'])} at {r['gpu_hours']:.2f}{top}"

    sweeps = guided_sweeps(results)

    def swept(name: str) -> str:
        """The guided Dynamo read at the planner's GPU-hours off its sweep (peer_sweep.py), '-' where none was run."""
        sw = sweeps.get(name)
        if sw is None:
            return "-"
        if not sw["swept"]:
            return "not swept (spent as much)"
        at = sw["at_planner_gpu_hours"]
        return f"{pct(at['attainment'])} ({' .. '.join(at['between'])})" + ("" if at.get("reached", True) else
                                                                                 ", never spent as much")

    cross = cross_engine_planner(results)
    c = dynamo_guided_counts(rows, cross, sweeps)
    # The same replays on Dynamo's KV router (the guided Dynamo's), where run: does the router move ours?
    kv = {k: v for k, v in cross_engine_planner(results, CROSS_ENGINE_KV).items() if v and cross.get(k)}
    same = sum(abs(v["gpu_hours"] - cross[k]["gpu_hours"]) <= 0.005 * cross[k]["gpu_hours"]  # type: ignore[index]
               and abs((v["attainment_after_warmup"] or 0) - (cross[k]["attainment_after_warmup"] or 0)) <= 5e-4  # type: ignore[index]
               for k, v in kv.items())
    kv_line = (f" Replayed on Dynamo's KV router instead (`cross_engine.py --router-mode kv_router`, "
               f"`results/{CROSS_ENGINE_KV}`, {len(kv)} of them), ours spends the GPU-hours and attains what it does on "
               f"round robin (within half a percent and half a point in a thousand) on {same}.") if kv else ""
    return "\n".join([
        f"#### Dynamo's planner as its guide advises for bursty traffic (`rerun.py --policies dynamo_load`, "
        f"`results/{DYNAMO_LOAD_DIR}/`)", "",
        "Its guide calls throughput-based scaling (the default, the Dynamo rows elsewhere) best for stable workloads and "
        "load-based scaling (per-worker forward-pass metrics, a 5 s loop, one replica per step) best for bursty "
        "traffic, needing the KV router, and both together the best of both. Here both are on, on the replay's KV "
        "router; each run's copy keeps its file's other rows. Dynamo's planner runs on its own engine (the mocker, "
        "calibrated as above), pdserve's planner on pdserve's simulator, and on Dynamo's engine where `cross_engine.py` "
        "replayed the run. Attainment after warm-up at GPU-hours. Where the guided Dynamo spent fewer GPU-hours than "
        "the planner it is swept at the points of \"The peers at the planner's GPU-hours\" (its SLA targets x0.5, "
        "last-value predictor, endpoint floors at the planner's time-mean replicas; `peer_sweep.py --peers "
        f"dynamo_load`, `results/{DYNAMO_LOAD_DIR}/{GUIDED_SWEEP}/`), tuned with hindsight, and read at the planner's "
        "GPU-hours by linear interpolation on its frontier (the settings it lies between in brackets). "
        f"Of {c['runs']} runs and windows: Dynamo's planner as shipped meets 99 % on {c['shipped_met']}, as guided on "
        f"{c['load_met']}, pdserve's planner on {c['planner_met']}; guided attains more than shipped on "
        f"{c['load_over_shipped']} and less on {c['shipped_over_load']}; pdserve's planner attains more than the guided "
        f"one on {c['planner_more']}, less on {c['load_more']}; where both meet 99 % ({c['both_met']}) pdserve's planner "
        f"spends fewer GPU-hours on {c['planner_cheaper']}, the guided one on {c['load_cheaper']}. On one engine "
        f"(Dynamo's; {c.get('cross_runs', 0)} of them replayed there): pdserve's planner meets 99 % on "
        f"{c.get('cross_planner_met', 0)}, attains more than the guided Dynamo on {c.get('cross_planner_more', 0)}, "
        f"less on {c.get('cross_load_more', 0)}; where both meet 99 % ({c.get('cross_both_met', 0)}) it spends fewer "
        f"GPU-hours on {c.get('cross_planner_cheaper', 0)}, the guided one on {c.get('cross_load_cheaper', 0)}. Swept "
        f"({c.get('swept_runs', 0)}), at the planner's GPU-hours the guided Dynamo attains more than pdserve's planner "
        f"on {c.get('swept_load_more', 0)}, less on {c.get('swept_planner_more', 0)}.{kv_line}", "",
        "| run | Dynamo as shipped | Dynamo as guided (load-based scaling, KV router) | guided, swept: at the planner's "
        "GPU-hours | planner | planner on Dynamo's engine (`cross_engine.json`) | best schedule found |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        *(f"| {name} | {cell(r['dynamo'])} | {cell(r['dynamo_load'])} | {swept(name)} | {cell(r['planner'])} | "
          f"{cell(cross.get(name))} | "
          + (f"{pct(r['best']['attainment_after_warmup'])} at {r['best']['gpu_hours']:.2f}" if "best" in r else "-")
          + " |" for name, r in rows), ""])
