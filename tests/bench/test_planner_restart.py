"""bench/planner/restart.py's restart times and its store-equal observations."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "planner"))

from recorded import recorded_argv  # noqa: E402
from restart import as_stored, replay, restart_times  # noqa: E402

from pdserve.planner.core.observation import Observation, PoolState  # noqa: E402


def test_restarts_fall_mid_span_in_the_scored_window() -> None:
    assert restart_times(600.0, 1800.0, 300.0) == [750.0, 1050.0, 1350.0, 1650.0]
    assert restart_times(600.0, 700.0, 300.0) == []  # a window shorter than half a span: no restart scored


def test_the_store_gives_back_ready_pods_not_what_was_asked_for() -> None:
    o = Observation(timestamp=5.0, prefill=PoolState(3, ready=2), decode=PoolState(2), request_rate=1.0)
    s = as_stored(o)
    assert (s.prefill, s.decode) == (PoolState(2, ready=2), PoolState(2, ready=2))
    assert s.request_rate == 1.0 and s.timestamp == 5.0


def test_a_committed_run_restarted_cold_and_warm() -> None:
    # 150 requests of the committed Azure excerpt (51 s, warm-up 10 s, one planner tick, at 30 s): of the restarts due
    # every 10 s (15, 25, 35, 45 s) the two due by 30 s are one restart there; the two after the last tick never happen.
    root = Path(__file__).resolve().parents[2]
    f = root / "bench/planner/data/excess_smoke_run.json"
    import json

    argv = recorded_argv(json.loads(f.read_text())["meta"]["command"], root / "bench/sim/data")
    assert restart_times(10.0, 50.6, 10.0) == [15.0, 25.0, 35.0, 45.0]
    row = replay((str(f), argv, 10.0))
    assert row["restarts_s"] == [30.0] and row["warm_replayed_intervals"] == [0], row
    p, w = row["replays"]["planner"], row["replays"]["warm"]
    assert w["replicas"] == p["replicas"] and w["attainment_after_warmup"] == p["attainment_after_warmup"]
