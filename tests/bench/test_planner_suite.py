"""suite.py regenerates what the committed planner results hold: one command, nothing merged in by hand."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "planner"))
import suite  # noqa: E402

RESULTS = ROOT / "bench" / "planner" / "results"


def test_every_committed_run_and_policy_is_one_the_suite_produces():
    files = {(f.parent.name, f.stem) for setup in suite.SETUPS for f in (RESULTS / setup).glob("*.json")}
    assert files == {(s, t) for s, plan in suite.PLAN.items() for t in plan}
    for setup, trace in sorted(files):
        d = json.loads((RESULTS / setup / f"{trace}.json").read_text())
        assert set(d["results"]) - {"dynamo"} == set(suite.policies(setup, trace)), (setup, trace)
        assert "earlier_runs" not in d, f"{setup}/{trace}: rows merged from earlier runs"
        tuned = (setup, trace) in suite.TUNE
        assert d["trace"]["tuned_on"] == tuned
        args = suite.run_args(setup, trace, tuned)
        # the tuning runs carry their sweeps, the held-out ones none
        assert ("sweep" in d["results"]["reactive"]) == tuned == ("--reactive-sweep" in args)
        assert ("sweep" in d["results"]["planner"]) == tuned


def test_one_commit_and_a_clean_tree_behind_every_number():
    s = json.loads((RESULTS / "summary.json").read_text())
    assert len(s["commits"]) == 1 and not s["any_dirty"]
    for f in [*(RESULTS / d for d in suite.SETUPS), RESULTS / "dynamo_repeat", RESULTS / "diagnosis",
              RESULTS / suite.SWEEP_DIR]:
        for g in f.glob("*.json"):
            if g.name in {f"{k}.json" for k in suite.DIAGNOSIS} or g.parent.name != "diagnosis":
                meta = json.loads(g.read_text())["meta"]
                assert (meta["commit"], meta["dirty"]) == (s["commits"][0], False), g


def test_every_peer_that_spent_less_than_the_planner_was_swept():
    """"Ahead" is read at the planner's GPU-hours (peer_sweep.py): a run where a peer spent less and no sweep
    says so would leave the target unmeasured (None), which the summary counts as not met."""
    s = json.loads((RESULTS / "summary.json").read_text())
    if not all("peers" in r for r in s["runs"]):
        pytest.skip("summary.json from before peer_sweep.py (session 9): regenerate the suite")
    for r in s["runs"]:
        for peer, v in r["peers"].items():
            assert v["planner_ahead"] is not None, (r["file"], peer)
            if suite.needs_sweep(r["policies"]["planner"]["gpu_hours"], v["gpu_hours"]):
                assert v["sweep_points"] > 1 and (RESULTS / suite.SWEEP_DIR / f"{r['setup']}__{r['trace']}.json").exists()


def test_the_peer_sweep_replays_exactly_the_runs_trace():
    """peer_sweep.py refuses a run file whose trace its flags do not give (sha256 check): every planned run's sweep
    gets the trace-defining flags evaluate.py gets (the 8B bursty runs' --history 900 included)."""
    import evaluate

    keys = ("trace", "bursty", "rate_scale", "start", "duration", "limit", "history", "trace_id", "model_profile",
            "max_replicas", "interval", "startup", "warmup", "kv_link_gbps")
    tr = suite.traces(Path("/traces"))
    for setup, plan in suite.PLAN.items():
        for trace in plan:
            tail = [*suite.SETUPS[setup], "--trace-id", trace, "--out", "/tmp/x.json"]
            ev = evaluate.build_parser().parse_args([*tr[trace], *suite.run_args(setup, trace, False), *tail])
            sw = evaluate.build_parser().parse_args([*suite.sweep_args(tr, setup, trace, []), *tail])
            assert {k: getattr(sw, k) for k in keys} == {k: getattr(ev, k) for k in keys}, (setup, trace)


def test_the_summary_says_where_the_references_themselves_miss_the_target():
    """A run the planner misses is read against what the references reach there (by hand)."""
    def res(best_att: float, causal: tuple[float, float] | None = None) -> dict:
        out = {"best": {"attainment_after_warmup": best_att, "gpu_hours_vs_best": 1.0}}
        if causal is not None:
            out["causal"] = {"attainment_after_warmup": causal[0], "gpu_hours_vs_best": causal[1]}
        return out

    assert suite.reference_reach(res(0.995)) == {"best_attains": True, "causal_within_budget": None}
    assert suite.reference_reach(res(0.9899)) == {"best_attains": False, "causal_within_budget": None}
    assert suite.reference_reach(res(None)) == {"best_attains": False, "causal_within_budget": None}  # type: ignore[arg-type]
    assert suite.reference_reach(res(0.999, (0.995, 1.15)))["causal_within_budget"] is True
    assert suite.reference_reach(res(0.999, (0.995, 1.24)))["causal_within_budget"] is False
    assert suite.reference_reach(res(0.999, (0.985, 1.0)))["causal_within_budget"] is False

    sys.path.insert(0, str(ROOT / "bench"))
    import readme_table

    def run(trace: str, met: bool, best: bool, causal: bool | None) -> dict:
        return {"setup": "8b", "trace": trace, "target_met": met,
                "reference": {"best_attains": best, "causal_within_budget": causal}}

    runs = [run("a", True, True, None), run("b", False, False, None), run("c", False, True, False),
            run("d", False, True, True), run("e", False, False, False)]
    assert readme_table.unreached(runs) == (
        "; of the 4 that miss, the best schedule found itself under 99 % on 2 (8b/b, 8b/e) and the onset-oracle causal "
        "reference itself over 1.15x or under 99 % on 1 (8b/c)")
    assert readme_table.unreached([run("a", True, True, None)]) == ""
    assert readme_table.unreached([run("d", False, True, True)]) == ""


def test_every_held_out_window_is_one_the_suite_replays_with_its_flags():
    """results/heldout/ holds exactly suite.HELDOUT's windows, each run with the window and history the suite
    gives it, and the summary reads the target on each with report.py's rule."""
    files = sorted((RESULTS / "heldout").glob("*/*.json"))
    assert {(f.parent.name, f.stem) for f in files} == {(s, t) for s in suite.HELDOUT for t in suite.HELDOUT[s]}
    import shlex

    import evaluate

    def window(argv: list[str]) -> tuple:
        a = evaluate.build_parser().parse_args([*argv, "--out", "x"])
        return a.trace.name, a.rate_scale, a.start, a.duration, a.history, a.trace_id
    for f in files:
        ran = window(shlex.split(json.loads(f.read_text())["meta"]["command"])[2:])  # after python evaluate.py
        plan = window([*suite.heldout_args(Path("/x"), f.parent.name, f.stem), "--trace-id", f.stem])
        assert ran == plan, f
    s = json.loads((RESULTS / "summary.json").read_text())
    rows = {(r["setup"], r["trace"]): r for r in s["heldout"]}
    assert set(rows) == {(f.parent.name, f.stem) for f in files}
    for r in rows.values():
        assert r["target_met"] == (r["planner_attainment_after_warmup"] >= 0.99 and r["planner_vs_best"] <= 1.15)
    assert len(s["heldout_commits"]) == 1
