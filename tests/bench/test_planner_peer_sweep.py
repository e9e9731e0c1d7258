"""The peers at the planner's GPU-hours (bench/planner/peer_sweep.py) and what the suite's summary makes of them."""

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "bench" / "planner"), str(ROOT / "bench")]
import peer_sweep  # noqa: E402
from peer_sweep import Point, at_gpu_hours, floors, frontier, mean_replicas  # noqa: E402

# A frozen copy of the committed 8B bursty_seed1 run at ee76d4f (planner 75.9 % at 0.91 GPU-h, Dynamo 68.3 % at 0.50,
# reactive 78.4 % at 1.10): the tests below are hand-worked on those numbers, which a regeneration changes.
RUN = ROOT / "tests" / "bench" / "golden" / "planner_eval_bursty_seed1_ee76d4f.json"


def test_frontier_keeps_only_points_that_buy_attainment():
    pts = [Point("a", 0.5, 0.40), Point("b", 0.8, 0.30), Point("c", 1.0, 0.80), Point("d", 1.2, 0.80)]
    assert [p.label for p in frontier(pts)] == ["a", "c"]


def test_value_at_the_planners_gpu_hours_is_interpolated_on_the_frontier():
    pts = [Point("as run", 0.5, 0.40), Point("b", 0.8, 0.30), Point("c", 1.0, 0.80)]
    at = at_gpu_hours(pts, 0.75)
    # between a (0.5, 40 %) and c (1.0, 80 %), half-way: 60 %; b is cheaper than c but attains less than a
    assert at["attainment"] == pytest.approx(0.60) and at["reached"] and at["between"] == ["as run", "c"]
    # the brief's alternative: the most attainment among points at >= 0.75 x 0.99 GPU-hours (b and c)
    assert at["best_at_or_above"] == {"label": "c", "attainment": 0.80, "gpu_hours": 1.0}


def test_a_peer_that_never_spent_the_planners_gpu_hours_is_flagged():
    at = at_gpu_hours([Point("as run", 0.5, 0.40), Point("b", 0.7, 0.55)], 1.0)
    assert at["attainment"] == 0.55 and not at["reached"] and at["best_at_or_above"] is None
    # within 1 % counts as spending it (the two replays keep their own clocks)
    assert at_gpu_hours([Point("as run", 0.5, 0.40), Point("b", 0.995, 0.55)], 1.0)["reached"]


def test_a_peer_that_spent_more_is_read_at_its_own_point():
    at = at_gpu_hours([Point("as run", 1.3, 0.70)], 1.0)
    assert at["attainment"] == 0.70 and at["reached"]


def test_floors_are_the_planners_time_mean_replicas_rounded_down_and_up():
    # 2P1D for 100 s, 4P3D for 50 s, 1P1D for the last 50 s: mean 2.25 P, 1.5 D over 200 s
    series = [[0, 2, 1], [100, 4, 3], [150, 1, 1]]
    assert mean_replicas(series, 0.0, 200.0) == pytest.approx((2.25, 1.5))
    # after a 50 s history: 2P1D for 50 s, 4P3D for 50 s, 1P1D for 50 s
    assert mean_replicas(series, 50.0, 200.0) == pytest.approx((7 / 3, 5 / 3))
    assert floors((2.25, 1.5), 16) == [(2, 1), (3, 2)]
    assert floors((1.2, 1.4), 16) == [(2, 2)]  # 1P1D is the peers' own floor already: not a sweep point
    assert floors((20.0, 0.5), 16) == [(16, 1)]


def test_reactive_floor_holds_min_replicas_when_idle():
    from baselines import ReactiveAutoscaler
    from pdserve.sim.autoscale import PoolSizes

    idle = SimpleNamespace(prefill=SimpleNamespace(running=0, waiting=0, ready=1),
                           decode=SimpleNamespace(kv_usage=0.0, ready=1))
    sc = ReactiveAutoscaler(30.0, 16, 16, stabilization_s=0.0, min_p=3, min_d=2)
    assert sc.on_tick(30.0, idle, PoolSizes(1, 1)) == PoolSizes(3, 2)
    assert ReactiveAutoscaler(30.0, 16, 16, stabilization_s=0.0).on_tick(30.0, idle, PoolSizes(1, 1)) == PoolSizes(1, 1)


def _point(gh: float, att: float) -> dict:
    return {"attainment_after_warmup": att, "attainment_feasible_after_warmup": att, "gpu_hours": gh,
            "max_prefill": 4, "max_decode": 2}


def test_only_a_peer_that_spent_less_is_swept():
    d = json.loads(RUN.read_text())
    calls: list[dict] = []

    def replay(p: dict) -> dict:
        calls.append(p)
        return _point(2 * d["results"]["planner"]["gpu_hours"], 0.70)

    dyn = peer_sweep.sweep(d, "dynamo", [("x", {"k": 1})], replay)  # Dynamo spent 0.55x the planner's GPU-hours
    assert calls == [{"k": 1}] and dyn["swept"] and len(dyn["points"]) == 2
    react = peer_sweep.sweep(d, "reactive", [("x", {"k": 1})], replay)  # reactive spent more: its own point
    assert len(calls) == 1 and not react["swept"]


def test_summary_reads_ahead_at_the_planners_gpu_hours(tmp_path):
    """On 8B bursty_seed1 Dynamo spent 0.50 GPU-h (68.3 %) against the planner's 0.91 (75.9 %): the plain
    comparison (kept as planner_dominates) says no; with a sweep reaching 70 % at twice the planner's GPU-hours,
    the peer at the planner's GPU-hours is ~68.8 % and the planner is ahead. Without a sweep it is not measured."""
    import suite
    from resultmeta import Run

    d = json.loads(RUN.read_text())
    (tmp_path / "8b_1gpu").mkdir()
    (tmp_path / "8b_1gpu" / "bursty_seed1.json").write_text(json.dumps(d))
    row = suite.summarise(tmp_path, Run(["suite.py"]))["runs"][0]
    assert row["peers"]["dynamo"]["planner_dominates"] is False
    assert row["target"]["ahead_of_dynamo_at_planner_gpu_hours"] is None and row["target_met"] is False
    # reactive spent more than the planner (1.10 vs 0.91 GPU-h) and attained more (78.4 vs 75.9 %): not ahead
    assert row["target"]["ahead_of_reactive_at_planner_gpu_hours"] is False

    pl = d["results"]["planner"]
    sw = peer_sweep.sweep(d, "dynamo", [("floor", {})], lambda p: _point(2 * pl["gpu_hours"], 0.70))
    (tmp_path / "peer_sweep").mkdir()
    (tmp_path / "peer_sweep" / "8b_1gpu__bursty_seed1.json").write_text(json.dumps({
        "run": {"sha256": d["trace"]["sha256"]}, "planner": {"gpu_hours": pl["gpu_hours"]}, "peers": {"dynamo": sw}}))
    row = suite.summarise(tmp_path, Run(["suite.py"]))["runs"][0]
    peer = row["peers"]["dynamo"]
    lo, a0 = d["results"]["dynamo"]["gpu_hours"], d["results"]["dynamo"]["attainment_after_warmup"]
    want = a0 + (0.70 - a0) * (pl["gpu_hours"] - lo) / (2 * pl["gpu_hours"] - lo)
    assert peer["at_planner_gpu_hours"] == pytest.approx(want) and peer["reached"] and peer["sweep_points"] == 2
    assert row["target"]["ahead_of_dynamo_at_planner_gpu_hours"] is (pl["attainment_after_warmup"] >= want) is True
    assert peer["planner_dominates"] is False

    # a sweep made against another planner result is refused, not silently used
    (tmp_path / "peer_sweep" / "8b_1gpu__bursty_seed1.json").write_text(json.dumps({
        "run": {"sha256": d["trace"]["sha256"]}, "planner": {"gpu_hours": 1.0}, "peers": {"dynamo": sw}}))
    with pytest.raises(SystemExit):
        suite.summarise(tmp_path, Run(["suite.py"]))


def test_report_and_claims_render_the_sweep(tmp_path):
    import report

    d = json.loads(RUN.read_text())
    pl = d["results"]["planner"]
    sw = peer_sweep.sweep(d, "dynamo", [("floor 3P2D", {})], lambda p: _point(2 * pl["gpu_hours"], 0.90))
    (tmp_path / "8b_1gpu").mkdir()
    (tmp_path / "8b_1gpu" / "bursty_seed1.json").write_text(json.dumps(d))
    (tmp_path / "peer_sweep").mkdir()
    (tmp_path / "peer_sweep" / "8b_1gpu__bursty_seed1.json").write_text(json.dumps({"peers": {"dynamo": sw}}))
    block = report.render(tmp_path)
    row = next(x for x in block.splitlines() if x.startswith("| 8b_1gpu/bursty_seed1 | dynamo |"))
    at = sw["at_planner_gpu_hours"]["attainment"]  # 68.3 % at 0.50 .. 90 % at 1.83 GPU-h, read at 0.91: ~75 %
    # the planner's 75.9 % is ahead of the interpolated ~75.1 %, not of 90 % at twice its GPU-hours: both shown
    assert sw["planner_ahead"] and sw["planner_ahead_of_best_at_or_above"] is False
    assert f"{100 * at:.1f} % (as run .. floor 3P2D)" in row and row.endswith("| yes (the other reading disagrees) |")
    assert "dynamo: ahead on" in block and "vs planner 75.9 %" in block


def test_scaled_floor():
    assert peer_sweep.scaled_floor({"min_p": 11, "min_d": 3, "x": 1}, ("min_p", "min_d"), 2.11 / 2.58) == \
        {"min_p": 9, "min_d": 2, "x": 1}
    assert peer_sweep.scaled_floor({"min_p": 5, "min_d": 2}, ("min_p", "min_d"), 0.95) == {"min_p": 4, "min_d": 2}
    assert peer_sweep.scaled_floor({"min_p": 2, "min_d": 1}, ("min_p", "min_d"), 0.95) is None  # only 1P1D left
    assert peer_sweep.scaled_floor({"prefill_target": 1.0}, ("min_p", "min_d"), 0.5) is None  # not a floor


def test_disagreeing_readings_get_one_floor_scaled_to_the_planners_gpu_hours():
    """Dynamo on 8B bursty_seed1 (68.3 % at 0.50 GPU-h, planner 75.9 % at 0.91): a 6P2D floor at twice the planner's
    GPU-hours attaining 90 % reads ~75.1 % by interpolation (planner ahead) but 90 % by the other reading: one more
    floor, 6P2D scaled by 0.5 = 3P1D, is replayed; at 0.93 GPU-h and 80 % it settles both readings (not ahead)."""
    d = json.loads(RUN.read_text())
    g = d["results"]["planner"]["gpu_hours"]
    calls: list[dict] = []

    def replay(p: dict) -> dict:
        calls.append(p)
        return _point(2 * g, 0.90) if len(calls) == 1 else _point(1.02 * g, 0.80)

    six = {"prefill_min_endpoint": 6, "decode_min_endpoint": 2}
    sw = peer_sweep.sweep(d, "dynamo", [("floor 6P2D", six)], replay)
    assert calls == [six, {"prefill_min_endpoint": 3, "decode_min_endpoint": 1}]
    assert sw["points"][-1]["label"] == "floor 3P1D (refined)"
    assert sw["planner_ahead"] is False and sw["planner_ahead_of_best_at_or_above"] is False
    assert sw["at_planner_gpu_hours"]["between"] == ["as run", "floor 3P1D (refined)"]


def test_dynamo_as_guided_is_swept_with_its_load_scaling_and_kv_router_kept(tmp_path, monkeypatch):
    """A run holding dynamo_load (rerun.py --policies dynamo_load) gets its own sweep: each point Dynamo's knobs
    merged over the guided configuration, on its KV router; --peers picks which of the run's peers to sweep. The
    peer's replay is recorded here (its venv is not in CI; the planner_dynamo_load smoke runs the real one)."""
    import evaluate

    run = json.loads((ROOT / "bench" / "planner" / "data" / "peer_sweep_smoke_run.json").read_text())
    cheap = run["results"]["planner"] | {"gpu_hours": run["results"]["planner"]["gpu_hours"] / 2,
                                         "attainment_after_warmup": 0.5, "max_prefill": 1, "max_decode": 1}
    run["results"]["dynamo_load"] = cheap
    src = tmp_path / "run.json"
    src.write_text(json.dumps(run))
    calls = []

    def fake(python, trace, s, max_replicas, warmup_s, out, feas, paid_from_s=0.0, planner=None,
             router_mode="round_robin"):
        calls.append((planner, router_mode))
        return cheap

    monkeypatch.setattr(evaluate, "run_dynamo", fake)
    argv = ["--run", str(src), "--trace", str(ROOT / "bench" / "sim" / "data" / "azure_conv_excerpt.csv"),
            "--duration", "0", "--limit", "150", "--warmup", "10", "--dynamo-python", "/nowhere/python",
            "--out", str(tmp_path / "sweep.json")]
    assert peer_sweep.main([*argv, "--peers", "dynamo_load"]) == 0
    peers = json.loads((tmp_path / "sweep.json").read_text())["peers"]
    assert list(peers) == ["dynamo_load"] and peers["dynamo_load"]["swept"]
    assert calls and all(r == "kv_router" and p["enable_load_scaling"] is True for p, r in calls)
    assert {"load_predictor": "constant", "enable_load_scaling": True} in [p for p, _ in calls]
    assert {"ttft_ms": 1000.0, "itl_ms": 25.0, "enable_load_scaling": True} in [p for p, _ in calls]  # targets x0.5
