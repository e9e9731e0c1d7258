"""bench/planner/README.md's results block is rendered from the committed result files (report.py)."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "planner"))
import report  # noqa: E402
import report_dynamo  # noqa: E402


def test_readme_block_matches_the_result_files():
    assert report.main(["--check"]) == 0, "stale: run .venv/bin/python bench/planner/report.py"


def test_every_run_states_its_feasible_fraction():
    results = ROOT / "bench" / "planner" / "results"
    block = report.render(results)
    # Count evaluation runs by their schema: results/ also holds other files (diagnosis/burst_misses_8b.json).
    # Dynamo's repeats (results/dynamo_repeat/) are not runs of their own.
    runs = sum(json.loads(f.read_text()).get("schema") == "pdserve.planner-eval/2" for f in results.glob("*/*.json")
               if f.parent.name != report.REPEAT_DIR)
    assert runs >= 12 and block.count("Feasible alone: ") == runs


def test_dynamo_repeats_are_a_spread_table_not_runs(tmp_path):
    """suite.py --dynamo-repeat writes results/dynamo_repeat/<setup>__<trace>.json: the report shows it next to
    the run's own Dynamo row, the summary records the spread and the commits, and it is not counted as a run."""
    import suite
    from resultmeta import Run

    src = ROOT / "bench" / "planner" / "results" / "8b_1gpu" / "azure_conv_x1.json"
    d = json.loads(src.read_text())
    dyn = d["results"]["dynamo"]
    (tmp_path / "8b_1gpu").mkdir()
    (tmp_path / "8b_1gpu" / "azure_conv_x1.json").write_text(json.dumps(d))
    again = dict(d, results={"dynamo": dyn | {"attainment_after_warmup": dyn["attainment_after_warmup"] - 0.25,
                                              "gpu_hours": 2 * dyn["gpu_hours"]}})
    (tmp_path / "dynamo_repeat").mkdir()
    (tmp_path / "dynamo_repeat" / "8b_1gpu__azure_conv_x1.json").write_text(json.dumps(again))

    block = report.render(tmp_path)
    assert block.count("Feasible alone: ") == 1
    a = 100 * dyn["attainment_after_warmup"]
    assert (f"| 8b_1gpu/azure_conv_x1 | {a:.1f} % / {a - 25:.1f} % | {dyn['gpu_hours']:.2f} / "
            f"{2 * dyn['gpu_hours']:.2f} |") in block

    doc = suite.summarise(tmp_path, Run(["suite.py"]))
    assert len(doc["runs"]) == 1
    (rep,) = doc["dynamo_repeats"]
    assert abs(rep["attainment_spread"] - 0.25) < 1e-9 and abs(rep["gpu_hours_spread"] - dyn["gpu_hours"]) < 1e-9
    assert doc["commits"] == sorted({d["meta"]["commit"], *(m["commit"] for m in d.get("earlier_runs", []))})


def test_the_prose_quotes_no_measured_number():
    """Measured numbers (a decimal followed by %, x or GPU-h) live in the generated block, not in the prose,
    so a regeneration of the results cannot leave a stale number in a sentence; the targets may be named."""
    import re

    text = (ROOT / "bench" / "planner" / "README.md").read_text()
    prose = text[text.index("### Reading the results"):text.index(report.BEGIN)]
    found = set(re.findall(r"\b\d+\.\d+ ?(?:%|x\b|GPU-h)", prose)) - {"1.15x"}
    assert not found, f"numbers typed into bench/planner/README.md's prose: {sorted(found)}"


def test_same_floor_in_both_simulators_is_reported_only_where_dynamo_attains_more(tmp_path):
    """The Mooncake verdict "behind Dynamo" compared two simulators: at the same replica floor Dynamo's mocker
    attained more than pdserve's simulator with at least as many replicas. claims.py says so, per floor, and only
    where Dynamo attains more."""
    import claims

    (tmp_path / "8b_1gpu").mkdir()
    (tmp_path / "peer_sweep").mkdir()
    (tmp_path / "8b_1gpu" / "t.json").write_text(json.dumps({"results": {"planner": {}}}))

    def pt(label, att, gh, p, d):
        return {"label": label, "attainment_after_warmup": att, "gpu_hours": gh, "max_prefill": p, "max_decode": d}

    sweep = {"peers": {
        "reactive": {"points": [pt("as run", 0.7, 2.0, 16, 4), pt("floor 10P3D", 0.922, 2.48, 16, 3),
                                pt("floor 11P4D", 0.95, 2.75, 16, 4)]},
        "dynamo": {"points": [pt("as run", 0.5, 0.67, 2, 2), pt("floor 10P3D", 0.940, 2.22, 10, 3),
                              pt("floor 11P4D", 0.944, 2.56, 11, 4)]}}}
    (tmp_path / "peer_sweep" / "8b_1gpu__t.json").write_text(json.dumps(sweep))
    out = claims.same_floor(tmp_path)
    assert "8b_1gpu/t floor 10P3D: Dynamo's replay 94.0 % at 2.22 GPU-h (max 10P3D)" in out
    assert "92.2 % at 2.48 GPU-h (max 16P3D)" in out
    assert "11P4D" not in out  # pdserve's simulator attained more there: nothing to say
    sweep["peers"]["dynamo"]["points"][1]["attainment_after_warmup"] = 0.9
    (tmp_path / "peer_sweep" / "8b_1gpu__t.json").write_text(json.dumps(sweep))
    assert claims.same_floor(tmp_path) == ""


def test_opt_in_variants_are_rendered_from_their_diagnosis_files(tmp_path):
    """burst_cost.py's files (the opt-in variants against the shipped planner) reach the README's generated block;
    other diagnosis files do not, and two decimals keep 99.97 % from reading as 100 %."""
    import claims

    (tmp_path / "diagnosis").mkdir()
    v = {"planner": {"attainment_after_warmup": 0.96286, "gpu_hours_vs_best": 1.138},
         "planner_link": {"attainment_after_warmup": 0.99974, "gpu_hours_vs_best": 1.178}}
    doc = {"schema": "pdserve.planner-burst-cost/1", "variants_run": ["planner", "planner_link"],
           "runs": [{"run": "70b_tp4/azure_conv_x4", "tuned_on": False, "variants": v}]}
    (tmp_path / "diagnosis" / "planner_link.json").write_text(json.dumps(doc))
    (tmp_path / "diagnosis" / "other.json").write_text(json.dumps({"schema": "x", "runs": []}))
    out = claims.variants(tmp_path)
    assert "`diagnosis/planner_link.json` (planner, planner_link): 70b_tp4/azure_conv_x4: planner 96.29 % at 1.14x, " \
           "planner_link 99.97 % at 1.18x" in out
    assert "other.json" not in out


def test_steady_causal_references_say_which_rule_reaches_the_target_where(tmp_path):
    """diagnosis/causal26 (rerun.py's copies): a file counts for a rule at >= 99 % after warm-up and <= 1.15x the best
    schedule found; files without both causal references are left out."""
    import claims

    def r(att: float, gpu_h: float, floor: list[int] | None = None) -> dict:
        return {"attainment_feasible_after_warmup": att, "gpu_hours": gpu_h} | ({"floor": floor} if floor else {})

    def doc(planner: dict, past: dict, onset: dict) -> dict:
        return {"results": {"best": r(1.0, 2.0), "planner": planner, "causal_past": past, "causal": onset}}

    root = tmp_path / "diagnosis" / "causal26"
    (root / "heldout" / "70b_tp4").mkdir(parents=True)
    (root / "70b_tp4").mkdir()
    # the planner dear, the past-need oracle within reach
    (root / "heldout" / "70b_tp4" / "w.json").write_text(json.dumps(
        doc(r(1.0, 3.0), r(0.995, 2.2, [1, 1]), r(1.0, 2.0, [1, 1]))))
    # the planner within reach (1.15x exactly), the past-need oracle under 99 %
    (root / "70b_tp4" / "x.json").write_text(json.dumps(doc(r(0.999, 2.3), r(0.98, 2.0, [2, 1]), r(0.99, 2.1, [1, 1]))))
    (root / "70b_tp4" / "y.json").write_text(json.dumps({"results": {"best": r(1.0, 1.0), "planner": r(1.0, 1.0)}}))
    out = claims.steady_causal(tmp_path)
    assert "(`results/diagnosis/causal26/`, 2 Azure runs" in out
    assert "planner on 1, the past-need oracle (no foresight, each interval's need read exactly once it is over) on 1, " \
           "the onset oracle (each interval's need at its start) on 2" in out
    assert "where the planner does not on heldout/70b_tp4/w; the planner where it does not on 70b_tp4/x; neither on " \
           "none." in out
    assert "heldout/70b_tp4/w: best 100.0 % at 2.00 GPU-h, planner 100.0 % at 1.50x, past-need floor 1P1D 99.5 % at " \
           "1.10x, onset floor 1P1D 100.0 % at 1.00x" in out
    assert "70b_tp4/y" not in out
    assert claims.steady_causal(tmp_path / "none") == ""


def test_held_out_windows_are_a_table_of_their_own_with_the_target_read(tmp_path):
    """results/heldout/<setup>/<trace>.json (windows no suite run replays): one row each, the target read on the
    planner's numbers, and not counted among the runs (nor summarised by the suite)."""
    import suite
    from resultmeta import Run

    src = ROOT / "bench" / "planner" / "results" / "8b_1gpu" / "azure_conv_x1.json"
    d = json.loads(src.read_text())
    d["results"].pop("planner_no_level", None)  # given below, on one window only
    best = d["results"]["best"]["gpu_hours"]
    d["trace"] |= {"id": "azure_conv_x1_from1800", "window_s": [1800.0, 2400.0]}
    met = d["results"] | {"planner": d["results"]["planner"] | {"attainment_after_warmup": 0.995,
                                                                "gpu_hours": 1.1 * best}}
    missed = d["results"] | {"planner": d["results"]["planner"] | {"attainment_after_warmup": 0.995,
                                                                   "gpu_hours": 1.2 * best}}
    (tmp_path / "heldout" / "8b_1gpu").mkdir(parents=True)
    (tmp_path / "heldout" / "8b_1gpu" / "a.json").write_text(json.dumps(d | {"results": met}))
    (tmp_path / "heldout" / "8b_1gpu" / "b.json").write_text(json.dumps(d | {"results": missed}))
    block = report.render(tmp_path)
    rows = [r for r in block.splitlines() if r.startswith("| [8b_1gpu/azure_conv_x1_from1800]")]
    assert len(rows) == 2 and "| 1800-2400 at 1x |" in rows[0]
    assert "| 99.5 %, 1.10x |" in rows[0] and rows[0].count("| met |") == 1
    assert "| 99.5 %, 1.20x |" in rows[1] and "| **missed** |" in rows[1]
    assert block.count("Feasible alone: ") == 0  # not runs of the suite
    assert suite.summarise(tmp_path, Run(["suite.py"]))["runs"] == []
    # A window added before any planner replayed it is marked fresh, and session 16's planner has its column.
    no_level = met | {"planner_no_level": met["planner"] | {"attainment_after_warmup": 1.0, "gpu_hours": 1.5 * best}}
    (tmp_path / "heldout" / "8b_1gpu" / "azure_conv_x2_from600.json").write_text(json.dumps(d | {"results": no_level}))
    rows = [r for r in report.render(tmp_path).splitlines() if r.startswith("| [8b_1gpu/azure_conv_x1_from1800]")]
    assert [r.split(" | ")[0].endswith("(fresh)") for r in rows] == [False, True, False]  # a, azure_conv_x2_from600, b
    assert rows[1].endswith("| met | 100.0 %, 1.50x | " + f"{d['meta']['commit'][:8]}, "
                            f"{d['meta']['loadavg_before']['1m']:.1f} |") and rows[0].count("| - |") >= 1


def test_the_cross_engine_runs_are_a_table_with_their_counts_read_from_the_file(tmp_path):
    """cross_engine.py's file (results/cross_engine.json): one row per run, the counts in the prose read from it."""
    def pol(att, gpu_h):
        return {"dynamo_engine": {"attainment_after_warmup": att, "gpu_hours": gpu_h}}

    rows = [
        {"file": "bench/planner/results/8b_1gpu/azure_conv_x4.json",
         "calibration": {"prefill_isl": 1195, "decode_b128_ctx2048_ratio_mocker_to_pdserve": 1.2,
                         "prefill_match": "flat-out", "prefill_isl1195_alone_ratio_mocker_to_pdserve": 1.43},
         "policies": {"planner": pol(1.0, 0.5) | {"pdserve_sim": {"attainment_after_warmup": 1.0, "gpu_hours": 0.45}},
                      "dynamo": pol(0.39, 0.35), "best": pol(1.0, 0.41), "static": pol(1.0, 0.5)}},
        {"file": "bench/planner/results/heldout/70b_tp4/azure_conv_x4_from600.json", "calibration": {"prefill_isl": 1200},
         "policies": {"planner": pol(0.7, 5.0), "dynamo": pol(0.8, 3.0), "best": pol(0.2, 3.7)}},
    ]
    rows[0]["policies"]["planner"]["dynamo_engine"]["meets_target"] = True  # cross_engine.py's verdict, read as is
    rows[0]["policies"]["dynamo"]["dynamo_engine"]["meets_target"] = False
    meta = {"commit": "abcdef0123", "loadavg_before": {"1m": 1.5}}
    (tmp_path / report_dynamo.CROSS_ENGINE).write_text(json.dumps({"meta": meta, "rows": rows}))
    block = report_dynamo.cross_engine(tmp_path)
    assert ("The done-when bound read in this engine (at least 99 % at no more than 1.15x the GPU-hours of the best "
            "schedule replayed here): the planner on 1, Dynamo's planner on 0.") in block
    assert ("Of 2 runs and windows, the planner attains at least 99 % on 1 and Dynamo's planner on 0; the planner "
            "attains more on 1, Dynamo's planner on 1; where both attain at least 99 % (0), the planner spends fewer "
            "GPU-hours on 0 and Dynamo's planner on 0. The best schedule found on pdserve's simulator holds 99 % in "
            "this engine on 1.") in block
    # matched flat out (session 29), the one-request ratio beside it; a file before names its match "alone"
    assert "| 8b_1gpu/azure_conv_x4 | 1195 flat-out (alone 1.43); 1.20 | 100.0 % at 0.50 | 39.0 % at 0.35 | 100.0 % at 0.41 | 100.0 % at 0.50 | " \
           "- | 100.0 % at 0.45 |" in block
    assert "| heldout/70b_tp4/azure_conv_x4_from600 | 1200 alone; - | 70.0 % at 5.00 |" in block
    rows[1]["policies"]["dynamo"] = pol(0.995, 4.0)
    rows[1]["policies"]["planner"] = pol(1.0, 5.0)
    (tmp_path / report_dynamo.CROSS_ENGINE).write_text(json.dumps({"meta": meta, "rows": rows}))
    c = report_dynamo.cross_engine_counts(json.loads((tmp_path / report_dynamo.CROSS_ENGINE).read_text()))
    assert (c["both_met"], c["planner_cheaper"], c["dynamo_cheaper"], c["planner_more"], c["dynamo_more"]) == (1, 0, 1, 2, 0)
    assert report_dynamo.cross_engine(tmp_path / "none") == ""
    # a planner setting replayed beside it (cross_engine.py --set) is a column of its own
    rows[0]["policies"]["planner@wide"] = pol(0.995, 0.6)
    (tmp_path / report_dynamo.CROSS_ENGINE).write_text(json.dumps({"meta": meta, "rows": rows,
                                                            "settings": {"wide": {"correction_bounds": [0.67, 4.0]}}}))
    block = report_dynamo.cross_engine(tmp_path)
    assert "| planner with correction_bounds [0.67, 4.0] (closed loop) |" in block
    assert "| 100.0 % at 0.45 | 99.5 % at 0.60 |" in block


def test_dynamo_as_guided_is_a_table_beside_it_as_shipped_with_counts_read_from_the_copies(tmp_path):
    """results/diagnosis/dynamo_load30/ (rerun.py --policies dynamo_load): Dynamo's planner as shipped and as its guide
    advises for bursty traffic, pdserve's planner in its simulator and, where cross_engine.json replays the run, on
    Dynamo's engine; the counts read from the files."""
    def r(att, gpu_h, p=1, d=1):
        return {"attainment_after_warmup": att, "gpu_hours": gpu_h, "max_prefill": p, "max_decode": d}

    base = tmp_path / report_dynamo.DYNAMO_LOAD_DIR
    runs = {"8b_1gpu/azure_conv_x4": {"dynamo": r(0.39, 0.35), "dynamo_load": r(0.995, 0.40, 3), "planner": r(1.0, 0.45, 2),
                                      "best": r(1.0, 0.41)},
            "heldout/70b_tp4/azure_conv_x4_from600": {"dynamo": r(0.37, 2.1), "dynamo_load": r(1.0, 1.6, 6, 3),
                                                      "planner": r(1.0, 1.5, 5, 4)},
            "8b_1gpu/bursty_seed0": {"dynamo": r(0.5, 0.5), "dynamo_load": r(0.4, 0.6), "planner": r(0.999, 1.6)},
            "8b_1gpu/no_peer": {"planner": r(1.0, 1.0)}}  # no Dynamo rows: not a row here
    for name, res in runs.items():
        (base / name).parent.mkdir(parents=True, exist_ok=True)
        (base / f"{name}.json").write_text(json.dumps({"results": res}))
    cross = {"file": "bench/planner/results/8b_1gpu/azure_conv_x4.json",
             "policies": {"planner": {"dynamo_engine": r(1.0, 0.5, 2)}}}
    (tmp_path / report_dynamo.CROSS_ENGINE).write_text(json.dumps({"rows": [cross]}))
    block = report_dynamo.dynamo_guided(tmp_path)
    assert ("Of 3 runs and windows: Dynamo's planner as shipped meets 99 % on 0, as guided on 2, pdserve's planner on 3; "
            "guided attains more than shipped on 2 and less on 1; pdserve's planner attains more than the guided one on "
            "2, less on 0; where both meet 99 % (2) pdserve's planner spends fewer GPU-hours on 1, the guided one on 1. "
            "On one engine (Dynamo's; 1 of them replayed there): pdserve's planner meets 99 % on 1, attains more than "
            "the guided Dynamo on 1, less on 0; where both meet 99 % (1) it spends fewer GPU-hours on 0, the guided "
            "one on 1. Swept (0),") in block
    # its sweep at the planner's GPU-hours (peer_sweep.py --peers dynamo_load), where one was run
    sweep = base / report_dynamo.GUIDED_SWEEP / "8b_1gpu__azure_conv_x4.json"
    sweep.parent.mkdir(parents=True)
    sweep.write_text(json.dumps({"peers": {"dynamo_load": {"swept": True, "at_planner_gpu_hours": {
        "attainment": 0.998, "between": ["as run", "floor 2P1D"], "reached": True}}}}))
    (base / report_dynamo.GUIDED_SWEEP / "8b_1gpu__bursty_seed0.json").write_text(
        json.dumps({"peers": {"dynamo_load": {"swept": False}}}))
    block = report_dynamo.dynamo_guided(tmp_path)
    assert "Swept (1), at the planner's GPU-hours the guided Dynamo attains more than pdserve's planner on 0, less on 1." \
        in block
    assert ("| 8b_1gpu/azure_conv_x4 | 39.0 % at 0.35 (max 1P1D) | 99.5 % at 0.40 (max 3P1D) | 99.8 % (as run .. floor "
            "2P1D) | 100.0 % at 0.45 (max 2P1D) | 100.0 % at 0.50 (max 2P1D) | 100.0 % at 0.41 |") in block
    assert "| 8b_1gpu/bursty_seed0 | 50.0 % at 0.50 (max 1P1D) | 40.0 % at 0.60 (max 1P1D) | not swept (spent as much) |" in block
    assert "| heldout/70b_tp4/azure_conv_x4_from600 | 37.0 % at 2.10 (max 1P1D) | 100.0 % at 1.60 (max 6P3D) | - |" in block
    assert "no_peer" not in block
    assert "KV router instead" not in block
    # ours replayed on Dynamo's KV router too (cross_engine.py --router-mode kv_router): compared with round robin
    (tmp_path / report_dynamo.CROSS_ENGINE_KV).write_text(json.dumps({"rows": [cross]}))
    assert ("Replayed on Dynamo's KV router instead (`cross_engine.py --router-mode kv_router`, "
            "`results/diagnosis/cross_engine_kv30.json`, 1 of them), ours spends the GPU-hours and attains what it does "
            "on round robin (within half a percent and half a point in a thousand) on 1.") in report_dynamo.dynamo_guided(tmp_path)
    assert report_dynamo.dynamo_guided(tmp_path / "none") == ""
