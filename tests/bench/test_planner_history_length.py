"""bench/planner/history_length.py: which history a planner in service has at a window, and the committed run with
--history replayed as recorded and after that longer history, over the same scored requests."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "planner"))

from history_length import replay, service_history_s, with_history  # noqa: E402
from recorded import recorded_argv  # noqa: E402

RUN = ROOT / "bench/planner/data/history_smoke_run.json"
TRACE = ["--trace", "t.csv"]


def test_the_service_history_is_its_memory_or_all_the_trace_before_the_window() -> None:
    # 240 intervals of 30 s: 7,200 s; a window at 2,400 s has 2,400 s before it, one at 9,000 s the whole memory
    assert service_history_s([*TRACE, "--start", "2400", "--history", "600"]) == 2400
    assert service_history_s([*TRACE, "--start", "9000", "--history", "600"]) == 7200
    assert service_history_s([*TRACE, "--start", "9000", "--history", "600", "--interval", "10"]) == 2400
    assert service_history_s(["--bursty", "1", "--history", "900"]) == 7200
    # nothing longer to replay: the window starts where its history does; a run without history scores another window
    assert service_history_s([*TRACE, "--start", "600", "--history", "600"]) is None
    assert service_history_s([*TRACE, "--duration", "600"]) is None


def test_with_history_replaces_or_adds_the_flag() -> None:
    assert with_history(["--start", "5", "--history", "60"], 120.0) == ["--start", "5", "--history", "120"]
    assert with_history(["--start", "5"], 120.0) == ["--start", "5", "--history", "120"]


def test_the_committed_run_after_the_longer_history_scores_the_same_requests() -> None:
    # the Azure excerpt's 240-300 s, recorded after 120 s of history; the service's is all 240 s before it
    argv = recorded_argv(json.loads(RUN.read_text())["meta"]["command"], ROOT / "bench/sim/data")
    row = replay((str(RUN), argv, 240.0))
    rec, svc = row["replays"]["recorded"], row["replays"]["service"]
    assert (rec["history_s"], svc["history_s"]) == (120.0, 240.0)
    assert row["scored_requests"]["recorded"] == row["scored_requests"]["service"], row["scored_requests"]
    committed = json.loads(RUN.read_text())["results"]["planner"]
    assert rec["attainment_after_warmup"] == committed["attainment_after_warmup"]
    assert abs(rec["gpu_hours"] - committed["gpu_hours"]) < 1e-9
