"""bench/planner/restart.py's restart times and its store-equal observations."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "planner"))

from restart import as_stored, restart_times  # noqa: E402

from pdserve.planner.core.observation import Observation, PoolState  # noqa: E402


def test_restarts_fall_mid_span_in_the_scored_window() -> None:
    assert restart_times(600.0, 1800.0, 300.0) == [750.0, 1050.0, 1350.0, 1650.0]
    assert restart_times(600.0, 700.0, 300.0) == []  # a window shorter than half a span: no restart scored


def test_the_store_gives_back_ready_pods_not_what_was_asked_for() -> None:
    o = Observation(timestamp=5.0, prefill=PoolState(3, ready=2), decode=PoolState(2), request_rate=1.0)
    s = as_stored(o)
    assert (s.prefill, s.decode) == (PoolState(2, ready=2), PoolState(2, ready=2))
    assert s.request_rate == 1.0 and s.timestamp == 5.0
