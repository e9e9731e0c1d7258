"""bench/planner/history_length.py: which history a planner in service has at a window, and the committed run with
--history replayed as recorded and after that longer history, over the same scored requests."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "planner"))

from committed import aligned_first_tick, service_history_s, with_history  # noqa: E402
from history_length import replay  # noqa: E402
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


def test_the_service_replay_ticks_at_the_recorded_instants() -> None:
    # recorded: first arrival 0.2 s, scored from 600.3 s, ticks at 30.2 + 30 k; service: first arrival 0.05 s,
    # scored from 1200.35 s, so the recorded 630.2 s... is its 1230.25 s...: ticks at 0.25 + 30 k, the first at 0.25 s
    assert aligned_first_tick(0.2, 600.3, 0.05, 1200.35, 30.0) == pytest.approx(0.25)
    # a grid point on the first arrival itself: the next one
    assert aligned_first_tick(0.0, 600.0, 0.0, 1200.0, 30.0) == 30.0


def test_with_history_replaces_or_adds_the_flag() -> None:
    assert with_history(["--start", "5", "--history", "60"], 120.0) == ["--start", "5", "--history", "120"]
    assert with_history(["--start", "5"], 120.0) == ["--start", "5", "--history", "120"]


def test_the_committed_run_after_the_longer_history_scores_the_same_requests() -> None:
    # the Azure excerpt's 240-300 s, recorded after 120 s of history; the service's is all 240 s before it
    argv = recorded_argv(json.loads(RUN.read_text())["meta"]["command"], ROOT / "bench/sim/data")
    row = replay((str(RUN), argv, 240.0, 2))
    rec, svc, half = row["replays"]["recorded"], row["replays"]["service"], row["replays"]["phase_1_of_2"]
    assert (rec["history_s"], svc["history_s"], half["history_s"]) == (120.0, 240.0, 120.0)
    assert len(set(row["scored_requests"].values())) == 1, row["scored_requests"]
    # the service replay ticks at the recorded instants; the phase variant half an interval (30 s) off them
    phase = rec["ticks_from_scored_start_mod_interval"]
    assert svc["ticks_from_scored_start_mod_interval"] == phase
    assert half["ticks_from_scored_start_mod_interval"] == round((phase + 15.0) % 30.0, 3)
    committed = json.loads(RUN.read_text())["results"]["planner"]
    assert rec["attainment_after_warmup"] == committed["attainment_after_warmup"]
    assert abs(rec["gpu_hours"] - committed["gpu_hours"]) < 1e-9


def test_the_report_counts_what_the_longer_history_moved() -> None:
    from report_history import counts

    def r(a: float, g: float, m: bool) -> dict:
        return {"attainment_after_warmup": a, "gpu_hours": g, "meets_target": m}

    def row(rec: dict, svc: dict, *phases: dict) -> dict:
        return {"replays": {"recorded": rec, "service": svc} | {f"phase_{j}_of_3": p for j, p in enumerate(phases, 1)}}

    d = {"rows": [row(r(0.99, 1.0, True), r(0.99, 1.0, True), r(0.99, 1.0, True), r(0.99, 1.0, True)),  # unchanged
                  # cheaper and under 99 % (lost), inside the phases' range, and a phase misses too
                  row(r(0.995, 1.0, True), r(0.98, 0.9, False), r(0.97, 1.0, False), r(0.995, 1.0, True)),
                  # dearer and over (gained), above every phase
                  row(r(0.97, 1.0, False), r(0.995, 1.1, True), r(0.97, 1.0, False), r(0.98, 1.0, False))]}
    assert counts(d) == {"att_lower": 1, "att_higher": 1, "gpu_lower": 1, "gpu_higher": 1, "unchanged": 1,
                         "gained": 1, "lost": 1, "fell_under_99": 1, "phase_verdict_differs": 1,
                         "beyond_phase_spread": 1}


def test_a_service_condition_at_a_phase_ticks_that_far_off_the_recorded_instants() -> None:
    # committed.prepare: the service history with the ticks a third of an interval (10 s) after the recorded ones
    from committed import Condition, prepare, ticks_from_scored_start

    argv = recorded_argv(json.loads(RUN.read_text())["meta"]["command"], ROOT / "bench/sim/data")
    runs = prepare(argv, [Condition(), Condition(True), Condition(True, 1, 3)], 240.0)
    at = {c.name: ticks_from_scored_start(trace, s, feas) for c, (_, trace, s, feas, _, _) in runs.runs.items()}
    assert at["service"] == at["recorded"]
    assert at["service_phase_1_of_3"] == round((at["recorded"] + 10.0) % 30.0, 3)
    with pytest.raises(ValueError, match="service"):
        prepare(argv, [Condition(True)], None)


def test_a_condition_that_scores_other_requests_is_not_read_against_the_file_s_best() -> None:
    from committed import not_the_window

    row = {"scored_requests": {"a": "h1", "b": "h2"},
           "replays": {"a": {"gpu_hours_vs_best": 1.1, "meets_target": True},
                       "b": {"gpu_hours_vs_best": 1.0, "meets_target": True}}}
    not_the_window(row, "h1")
    assert row["same_scored_requests"] is False
    assert row["replays"]["a"] == {"gpu_hours_vs_best": 1.1, "meets_target": True}
    assert row["replays"]["b"] == {"gpu_hours_vs_best": None, "meets_target": False}
