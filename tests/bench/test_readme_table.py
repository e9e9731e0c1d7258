"""The README's benchmark table is generated from the committed result files and must agree with them."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import readme_router  # noqa: E402
import readme_table  # noqa: E402
import resultmeta  # noqa: E402


@pytest.mark.parametrize("rel", sorted(readme_table.TARGETS))
def test_generated_tables_match_the_result_files(rel: str) -> None:
    text = (ROOT / rel).read_text()
    assert readme_table.splice(text, readme_table.TARGETS[rel](ROOT)) == text, (
        f"{rel}'s generated table is stale: run .venv/bin/python bench/readme_table.py")
    assert readme_table.main(["--check"]) == 0


def _copy_tree(tmp: Path) -> Path:
    for rel in readme_table.TARGETS:
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).write_text((ROOT / rel).read_text())
    for src in {row.source for row in readme_table.ROWS} | set(readme_router.ROUTING_FILES) | {readme_router.REUSE_FILE} \
            | set(readme_router.GAP_FILES):
        dst = tmp / src
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / src, dst)
    return tmp


def test_check_fails_when_a_result_changes_and_regeneration_fixes_it(tmp_path: Path) -> None:
    root = _copy_tree(tmp_path)
    src = root / "bench/sim/results/curves_distserve-opt13b.json"
    doc = json.loads(src.read_text())
    label = next(iter(doc["summary"]))
    doc["summary"][label]["goodput_per_gpu"]["median"] += 0.5
    src.write_text(json.dumps(doc))
    assert readme_table.main(["--check", "--root", str(root)]) == 1
    assert readme_table.main(["--root", str(root)]) == 0
    assert readme_table.main(["--check", "--root", str(root)]) == 0
    assert f"{label} {doc['summary'][label]['goodput_per_gpu']['median']:.2f}" in (root / "README.md").read_text()


def test_distserve_row_is_the_artefact_of_one_command_with_chunked_prefill() -> None:
    doc = json.loads((ROOT / "bench/sim/results/curves_distserve-opt13b.json").read_text())
    meta = doc["meta"]
    assert meta["command"].startswith("python bench/sim/curves.py") and "--seeds" in meta["command"]
    assert meta["runs"] == len(doc["seeds"]) == len(doc["per_seed"]) >= 3
    assert len(meta["commit"]) == 40 and not meta["dirty"]
    assert {"colocated:1", "chunked:1", "2P1D"} <= set(doc["summary"])
    row = next(line for line in (ROOT / "README.md").read_text().splitlines() if "DistServe-style" in line)
    assert "chunked:1" in row and "2P1D/colocated:1" in row


def test_readme_without_markers_is_refused() -> None:
    with pytest.raises(ValueError, match="markers"):
        readme_table.splice("# no table here\n", "x")


def test_write_result_records_command_commit_date_load_and_runs(tmp_path: Path) -> None:
    run = resultmeta.Run(["bench/x.py", "--flag", "a b"], runs=3)
    path = resultmeta.write_result(tmp_path / "r.json", {"meta": "dropped", "value": 1}, run)
    doc = json.loads(path.read_text())
    meta = doc["meta"]
    assert list(doc) == ["meta", "value"]
    assert meta["command"] == "python bench/x.py --flag 'a b'"
    assert len(meta["commit"]) == 40 and isinstance(meta["dirty"], bool)
    assert meta["date"].endswith("Z") and meta["runs"] == 3
    assert set(meta["loadavg_before"]) == {"1m", "5m", "15m"}
    assert meta["loadavg_before"]["1m"] >= 0


def test_spread_reports_median_range_and_relative_spread() -> None:
    s = resultmeta.spread([1.0, 3.0, 2.0, 2.0])
    assert (s["n"], s["median"], s["min"], s["max"]) == (4, 2.0, 1.0, 3.0)
    assert s["rel_spread"] == 1.0
    with pytest.raises(ValueError):
        resultmeta.spread([])


def test_routing_rows_put_dynamo_beside_pdserve_on_every_window(tmp_path: Path) -> None:
    root = _copy_tree(tmp_path)
    for rel in readme_router.ROUTING_FILES:
        doc = json.loads((ROOT / rel).read_text())
        assert doc["meta"]["command"].startswith("python bench/router/routing_quality.py")
        assert {"round_robin", "kv_router"} <= set(doc["dynamo"]), rel
        assert doc["dynamo"]["kv_router"]["prefix_hit_ratio"]["n"] >= 3, rel
        # kv_aware's replay depends on its tie phase as chaotically as Dynamo's on its random tie-breaks:
        # both sides are reported over several runs.
        assert doc["results"]["kv_aware"]["prefix_hit_ratio"]["n"] >= 3, rel
        top = [r["prefix_hit_ratio"]["max"] if isinstance(r["prefix_hit_ratio"], dict) else r["prefix_hit_ratio"]
               for r in doc["results"].values()]
        assert doc["bound"]["hit_ratio"] >= max(top), rel
    # A changed Dynamo number shows up as a stale bench/router/README.md.
    src = root / readme_router.ROUTING_FILES[0]
    doc = json.loads(src.read_text())
    doc["dynamo"]["kv_router"]["prefix_hit_ratio"]["median"] = 0.999
    src.write_text(json.dumps(doc))
    assert readme_table.main(["--check", "--root", str(root)]) == 1


def test_speed_and_decision_results_are_repeated_runs_with_provenance() -> None:
    for rel in ("bench/sim/results/speed_mooncake_chunked8.json", "bench/sim/results/speed_mooncake_4p4d.json"):
        doc = json.loads((ROOT / rel).read_text())
        assert doc["meta"]["runs"] >= 3 and doc["pdserve"]["cpu_s"]["n"] == doc["meta"]["runs"], rel
        assert doc["dynamo"]["cpu_s"]["n"] == doc["meta"]["runs"], rel
        assert doc["meta"]["cpu_affinity"] == [1], rel  # one core, as the command says (taskset -c 1)
    dt = json.loads((ROOT / "bench/router/results/decision_time.json").read_text())
    assert dt["meta"]["runs"] >= 3 and dt["results"]["kv_aware"]["cpu_p99_us"]["n"] == dt["meta"]["runs"]


def test_readme_routing_rows_cover_every_window_with_its_verdict() -> None:
    """The done-when of issue 15 is per window (P/D and held-out ones included): the README
    must show each window, whether it was tuned on, and the verdict computed from its file."""
    rows = [line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("| Routing beside")]
    assert len(rows) == len(readme_router.ROUTING_FILES)
    for rel, row in zip(readme_router.ROUTING_FILES, rows):
        d = json.loads((ROOT / rel).read_text())
        assert f"{d['layout']}, {d['trace']} {d['window']} ({readme_router.ROUTING_ROLE[rel]})" in row
        assert readme_router.verdict(d) in row


def test_routing_verdict_names_each_miss() -> None:
    def doc(hit: float, mm: float, dyn_hits: list[float]) -> dict:
        dyn = {"kv_router": {"prefix_hit_ratio": resultmeta.spread(dyn_hits)}} if dyn_hits else {}
        return {"results": {"kv_aware": {"prefix_hit_ratio": hit, "max_mean_requests": mm}}, "dynamo": dyn}

    assert readme_router.verdict(doc(0.074, 1.05, [0.070, 0.074, 0.080])) == "target met"
    assert readme_router.verdict(doc(0.073, 1.05, [0.070, 0.074, 0.080])) == (
        "target missed: hit ratio below Dynamo's median")
    assert readme_router.verdict(doc(0.2, 1.11, [0.1])) == "target missed: max/mean > 1.1"
    assert readme_router.verdict(doc(0.2, 1.0, [])) == "no Dynamo run"
    # A P/D window's row also judges kv_aware with decode-side reuse, which Dynamo's replay does not model.
    d = doc(0.073, 1.02, [0.070, 0.074, 0.080])
    d["results"][readme_router.DECODE_REUSE] = {"prefix_hit_ratio": 0.081, "max_mean_requests": 1.03}
    assert readme_router.verdict(d, readme_router.DECODE_REUSE) == "target met"


def test_routing_rows_state_how_sure_the_verdict_is() -> None:
    far = readme_router._rank_test({"n": 5, "values": [1, 2, 3, 4, 5]}, {"n": 5, "values": [6, 7, 8, 9, 10]})
    near = readme_router._rank_test({"n": 4, "values": [1, 3, 5, 7]}, {"n": 4, "values": [2, 4, 6, 8]})
    assert "p = 0.0079, 5 vs 5" in far and "p = 0.69, 4 vs 4" in near
    assert readme_router._rank_test(0.1, {"n": 5, "values": [1, 2]}) == ""  # one deterministic run: no test
    held_out = next(line for line in (ROOT / "README.md").read_text().splitlines()
                    if "4P4D, conversation_trace.jsonl minutes 20-30" in line)
    assert "Mann-Whitney p = " in held_out


def test_dirty_ignores_result_files_but_not_code(tmp_path: Path) -> None:
    """A suite rewrites committed result files run after run: those outputs must not mark later runs dirty,
    while any other tracked change still does."""
    import subprocess

    def git(*a: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), *a], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "bench" / "planner" / "results").mkdir(parents=True)
    (tmp_path / "bench" / "planner" / "results" / "r.json").write_text("{}")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    (tmp_path / "bench" / "planner" / "results" / "r.json").write_text('{"a": 1}')
    assert resultmeta.git_commit(tmp_path)["dirty"] is False
    (tmp_path / "code.py").write_text("x = 2\n")
    assert resultmeta.git_commit(tmp_path)["dirty"] is True


def test_the_planner_row_counts_the_held_out_windows():
    import readme_table

    def row(trace: str, att: float, vs: float, met: bool) -> dict:
        return {"setup": "8b", "trace": trace, "history_s": 600.0, "planner_attainment_after_warmup": att,
                "planner_vs_best": vs, "target_met": met}

    assert readme_table.heldout_windows([]) == ""
    out = readme_table.heldout_windows([row("a", 0.995, 1.15, True), row("b", 0.995, 1.16, False),
                                        row("c", 0.98, 0.9, False)])
    assert "after 600 s of the trace replayed" in out and "1/3 meet >= 99 % at <= 1.15x" in out
    assert out.endswith("missed: 8b/b 99.5 % at 1.16x, 8b/c 98.0 % at 0.90x")


def test_the_default_change_row_counts_what_differs() -> None:
    def replay(att: float, vs: float, same: bool = False) -> dict[str, object]:
        return {"attainment_after_warmup": att, "gpu_hours": vs * 2, "gpu_hours_vs_best": vs,
                "same_as_committed_planner": same}
    d = {"settings": {"w900": {"peak_window_s": 900}}, "files_meeting_target": {"shipped": 1, "w900": 1},
         "rows": [{"replays": {"shipped": replay(0.999, 1.0), "w900": replay(0.999, 1.0, True)}},
                  {"replays": {"shipped": replay(0.995, 1.3), "w900": replay(0.990, 1.2, True)}},
                  {"replays": {"shipped": replay(0.95, 0.8), "w900": replay(0.96, 0.8)}}]}
    text = readme_table.defaults_beside(d)
    assert "3 runs and windows" in text and "peak_window_s 900" in text
    assert "equal the committed files' on 2 of them" in text
    assert "the replays differ on 2, attainment lower on 1, GPU-hours vs best +0.00..+0.10x" in text
