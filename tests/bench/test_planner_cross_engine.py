"""bench/planner/dynamo_engine.py: what pdserve's planner and a fixed schedule read from, and answer to, Dynamo's
replay loop (its snapshots here are hand-written in the shape Dynamo 1.6.1's Rust loop passes; cross_engine.py's
smoke runs them against the real one where the peers' venv is installed)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "planner"))

from dynamo_engine import EngineView, PlannerDriver, RouterView, ScheduleDriver, window_metrics  # noqa: E402

from pdserve.sim.autoscale import PoolSizes  # noqa: E402


def traffic(n: int, isl: float, osl: float, ttft_ms: float, itl_ms: float, dur: float = 30.0) -> dict:
    return {"duration_s": dur, "num_req": n + 5, "avg_isl": isl, "avg_osl": osl, "avg_ttft_ms": ttft_ms,
            "avg_itl_ms": itl_ms, "shape_count": n, "ttft_count": n, "itl_count": n, "avg_kv_hit_rate": 0.0,
            "hit_rate_count": 0}


def fpm(worker: int, *, prefill: int = 0, queued_p: int = 0, decode: int = 0, queued_d: int = 0, kv: int = 0) -> dict:
    return {"worker_id": worker, "dp_rank": 0, "num_prefill_requests": prefill, "num_queued_prefill": queued_p,
            "num_decode_requests": decode, "num_queued_decode": queued_d, "sum_decode_kv_tokens": kv}


def snap(now_s: float, *, p: list[int], d: list[int], t: dict | None = None, pf: list | None = None,
         df: list | None = None, starting_p: int = 0) -> dict:
    return {"now_ms": now_s * 1000, "traffic": t, "active_prefill_ids": p, "active_decode_ids": d,
            "active_prefill_count": len(p), "active_decode_count": len(d), "starting_prefill_count": starting_p,
            "starting_decode_count": 0, "draining_prefill_count": 0, "draining_decode_count": 0,
            "non_draining_prefill_count": len(p) + starting_p, "non_draining_decode_count": len(d),
            "prefill_fpm_snapshots": pf or [], "decode_fpm_snapshots": df or []}


def test_completions_are_the_rate_window_s_merged_by_count() -> None:
    ev = EngineView(kv_tokens_per_worker=1000.0)
    ev.update(snap(30, p=[0], d=[0], t=traffic(10, 1000, 100, 200, 20)))
    ev.update(snap(60, p=[0], d=[0], t=traffic(30, 2000, 300, 400, 40)))
    c = ev.completions()
    # 40 completions over 60 s; means weighted by each window's completions, not by its arrivals (num_req)
    assert c["request_rate"] == pytest.approx(40 / 60)
    assert c["mean_isl"] == pytest.approx((10 * 1000 + 30 * 2000) / 40)
    assert c["mean_osl"] == pytest.approx((10 * 100 + 30 * 300) / 40)
    assert c["ttft"] == pytest.approx((10 * 0.2 + 30 * 0.4) / 40)
    assert c["itl"] == pytest.approx((10 * 0.02 + 30 * 0.04) / 40)
    ev.update(snap(90, p=[0], d=[0], t=traffic(0, 0, 0, 0, 0)))  # the first window leaves the 60 s
    c = ev.completions()
    assert c["completions"] == 30 and c["mean_isl"] == pytest.approx(2000)
    ev.update(snap(120, p=[0], d=[0], t=traffic(0, 0, 0, 0, 0)))
    c = ev.completions()
    assert c["completions"] == 0 and c["mean_isl"] is None and c["ttft"] is None and c["request_rate"] == 0.0


def test_pools_read_each_worker_s_last_metrics_and_forget_workers_that_left() -> None:
    ev = EngineView(kv_tokens_per_worker=1000.0)
    s = snap(30, p=[0, 1], d=[0, 1], pf=[fpm(0, prefill=2, queued_p=3), fpm(1, prefill=1, queued_p=1)],
             df=[fpm(0, decode=5, kv=500), fpm(1, decode=3, queued_d=2, kv=100)], starting_p=1)
    ev.update(s)
    p, d = ev.pool(s, "prefill", 0.25), ev.pool(s, "decode", None)
    assert (p.ready, p.starting, p.running, p.waiting, p.prefix_hit_ratio) == (2, 1, 3, 4, 0.25)
    assert (d.ready, d.running, d.waiting) == (2, 8, 2) and d.kv_usage == pytest.approx(0.3)
    # worker 1 reports nothing new: its last metrics stand; then it leaves and they go
    s2 = snap(60, p=[0, 1], d=[0, 1], pf=[fpm(0, prefill=0, queued_p=0)])
    ev.update(s2)
    assert ev.pool(s2, "prefill", None).waiting == 1
    s3 = snap(90, p=[0], d=[0, 1])
    ev.update(s3)
    assert ev.pool(s3, "prefill", None).waiting == 0 and ev.pool(s3, "prefill", None).running == 0


def test_the_router_side_counts_only_arrivals_up_to_the_last_scrape() -> None:
    # one 1000-token request a second from t = 0; the tick at 100 s reads the scrape at 97.5 s (15 s period, 7.5 s phase)
    rv = RouterView([(float(t), 1000) for t in range(0, 300)])
    rv.advance(100.0)
    assert rv.routed == 101  # arrivals at 0..100 s: none after the tick
    sig = rv.signals(100.0, 30.0)
    assert sig.end_s == pytest.approx(97.5) and sig.start_s == pytest.approx(37.5)
    assert sig.arrivals == 60 and sig.prompt_tokens_rate == pytest.approx(1000.0)
    assert set(sig.prompt_tokens_burst) and all(v > 0 for v in sig.prompt_tokens_burst.values())


def test_a_schedule_is_a_step_function_and_only_changes_are_sent() -> None:
    sd = ScheduleDriver(t0=5.0, interval_s=30.0, last_arrival_s=200.0, steps=[(30.0, 2, 1), (60.0, 4, 2), (120.0, 1, 1)])
    assert sd.want(0.0) is None and sd.want(30.0) == (2, 1) and sd.want(89.9) == (4, 2) and sd.want(500) == (1, 1)
    assert sd.initial_tick_ms() == 35_000.0
    out = sd.on_tick(snap(35.0, p=[0], d=[0]))
    assert out == {"target_prefill": 2, "target_decode": None, "next_tick_ms": 65_000.0}
    assert sd.ticks[-1]["prefill"] == {"active_count": 1, "starting_count": 0, "draining_count": 0}


def test_ticks_stop_after_the_last_arrival_once_every_worker_is_idle() -> None:
    sd = ScheduleDriver(t0=0.0, interval_s=30.0, last_arrival_s=40.0, steps=[(30.0, 1, 1)])
    busy = snap(60.0, p=[0], d=[0], df=[fpm(0, decode=2)])
    assert sd.on_tick(snap(30.0, p=[0], d=[0]))["next_tick_ms"] == 60_000.0  # before the last arrival
    assert sd.on_tick(busy)["next_tick_ms"] == 90_000.0  # after it, still decoding
    assert sd.on_tick(snap(90.0, p=[0], d=[0], df=[fpm(0, decode=0)]))["next_tick_ms"] is None


class Stub:
    def __init__(self) -> None:
        self.seen: list = []

    def on_tick(self, now, window, current):  # type: ignore[no-untyped-def]
        self.seen.append((now, window, current))
        return PoolSizes(prefill=3, decode=current.decode)


def test_the_planner_gets_the_window_pdserve_s_simulator_would_give_and_its_answer_becomes_targets() -> None:
    stub = Stub()
    drv = PlannerDriver(0.0, 30.0, 1000.0, autoscaler=stub, router=RouterView([(1.0, 500), (20.0, 700)]),
                        engines=EngineView(1000.0))
    out = drv.on_tick(snap(30.0, p=[0], d=[0], t=traffic(2, 600, 50, 300, 25), pf=[fpm(0, queued_p=1)], starting_p=1))
    now, w, cur = stub.seen[0]
    assert now == 30.0 and cur == PoolSizes(prefill=2, decode=1)
    assert w.request_rate == pytest.approx(2 / 30) and w.mean_isl == 600 and w.ttft_p50 == pytest.approx(0.3)
    assert w.ttft_p90 is None and w.prefill_ttft_mean is None  # not in Dynamo's snapshot: unknown, not invented
    assert w.prefill.waiting == 1 and w.arrivals == 2 and w.prompt_tokens_rate == pytest.approx(1200 / 60)
    assert out["target_prefill"] == 3 and out["target_decode"] is None
    assert drv.ticks[-1]["want"] == [3, 1]


def test_window_metrics_reads_no_arrival_after_now() -> None:
    rv, ev = RouterView([(10.0, 100), (50.0, 100)]), EngineView(1000.0)
    s = snap(30.0, p=[0], d=[0])
    ev.update(s)
    assert window_metrics(30.0, 30.0, rv, ev, s).arrivals == 1


def test_the_mocker_is_matched_to_what_the_planner_s_profile_calls_saturated(tmp_path: Path) -> None:
    """The prefill speed Dynamo's mocker is calibrated to (references.dynamo_inputs, read by dynamo_peer.calibrate
    since session 29) is the flat-out throughput the planner's own profile is built on (derive_profile's saturated
    point), at every prompt length the engine numbers list; dynamo_peer.pdserve_flat_out reads it between them."""
    import json

    import dynamo_peer
    from references import Setup, dynamo_inputs

    from pdserve.planner.core.profile_model import UTILISATION, derive_profile
    from pdserve.sim.config import Slo
    from pdserve.sim.traces import Trace, TraceRequest

    trace = Trace(tuple(TraceRequest(i, float(i), 1000, 10) for i in range(3)), "synthetic", "t", "0")
    prof = derive_profile("llama-3.1-8b-h100")
    s = Setup("llama-3.1-8b-h100", prof, 1, 1, 4, 4, Slo(), 30.0, 60.0)
    cal = json.loads(dynamo_inputs(trace, s, max_replicas=4, out_dir=tmp_path)[1].read_text())
    shared = [(isl, flat) for isl, flat in zip(cal["prefill_isl"], cal["prefill_flat_out_tokens_per_s"])
              if isl in {p.isl for p in prof.prefill.points}]
    assert len(shared) >= 4
    for isl, flat in shared:  # the profile's highest point is the engine flat out at its top utilisation
        assert flat * max(UTILISATION) == pytest.approx(prof.prefill_saturated(isl), rel=1e-9), isl
    lo, hi = cal["prefill_flat_out_tokens_per_s"][6:8]
    mid = dynamo_peer.pdserve_flat_out(cal, (cal["prefill_isl"][6] + cal["prefill_isl"][7]) // 2)
    assert min(lo, hi) <= mid <= max(lo, hi)


def _one_file_seen(job) -> dict:  # type: ignore[no-untyped-def]
    """cross_engine.one_file's stand-in (module level: the process pool pickles it by name): the job it was given."""
    return {"file": str(job.path), "router_mode": job.router_mode, "policies": {}}


def test_the_replay_router_is_chosen_once_for_every_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--router-mode reaches every file's job (whose replays, Dynamo's planner's included, run on it) and the result
    file says which router ran (the replays themselves need the peers' venv: the planner_cross_engine smoke)."""
    import json

    import cross_engine

    monkeypatch.setattr(cross_engine, "one_file", _one_file_seen)
    run = Path(__file__).resolve().parents[2] / "bench" / "planner" / "data" / "peer_sweep_smoke_run.json"
    for mode in (None, "kv_router"):
        out = tmp_path / f"{mode}.json"
        assert cross_engine.main(["--files", str(run), "--out", str(out), *(["--router-mode", mode] if mode else [])]) == 0
        doc = json.loads(out.read_text())
        assert doc["router_mode"] == (mode or "round_robin")
        assert [r["router_mode"] for r in doc["rows"]] == [mode or "round_robin"]
