"""bench/planner/settings_sweep.py's ``--set NAME=FIELD:VALUE[,FIELD:VALUE...]`` (also cross_engine.py's)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "planner"))

from settings_sweep import parse_set  # noqa: E402


def test_fields_values_and_none() -> None:
    assert parse_set("a=prefill_utilization:0.95,hold_prefill_on_rise:true") == (
        "a", {"prefill_utilization": 0.95, "hold_prefill_on_rise": True})
    assert parse_set("b=burst_fit_budget_s:none") == ("b", {"burst_fit_budget_s": None})


def test_a_list_value_keeps_its_commas_and_becomes_the_field_s_tuple() -> None:
    name, change = parse_set("wide=correction_bounds:[0.67,4.0],target_utilization:0.8")
    assert name == "wide" and change == {"correction_bounds": (0.67, 4.0), "target_utilization": 0.8}


@pytest.mark.parametrize("text", ["nofield", "x=", "x=not_a_field:1", "x=target_utilization"])
def test_bad_settings_are_refused_by_name(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="--set"):
        parse_set(text)


def test_conditions_are_each_history_at_each_phase() -> None:
    from committed import conditions

    assert [c.name for c in conditions(1, "recorded")] == ["recorded"]
    assert [c.name for c in conditions(2, "both")] == ["recorded", "phase_1_of_2", "service", "service_phase_1_of_2"]
    assert [c.phase for c in conditions(4, "service")] == [0.0, 0.25, 0.5, 0.75]


def test_a_setting_is_read_over_the_conditions() -> None:
    from committed import conditions
    from settings_sweep import over_conditions

    def r(a: float, vs: float | None, met: bool) -> dict:
        return {"attainment_after_warmup": a, "gpu_hours_vs_best": vs, "meets_target": met}

    conds = conditions(3, "recorded")  # recorded, phase_1_of_3, phase_2_of_3
    rows = [  # A: met at one phase only; B: met at all three; C: met at none
        {"file": "A", "replays": {"s@recorded": r(0.995, 1.1, True), "s@phase_1_of_3": r(0.98, 1.0, False),
                                  "s@phase_2_of_3": r(0.97, 1.2, False)}},
        {"file": "B", "replays": {"s@recorded": r(0.999, 1.0, True), "s@phase_1_of_3": r(0.995, 1.05, True),
                                  "s@phase_2_of_3": r(0.991, 1.1, True)}},
        {"file": "C", "replays": {"s@recorded": r(0.9, None, False), "s@phase_1_of_3": r(0.8, None, False),
                                  "s@phase_2_of_3": r(0.95, None, False)}}]
    s = over_conditions(rows, ["s"], conds)["s"]
    assert s["files_meeting_target"] == {"recorded": 2, "phase_1_of_3": 1, "phase_2_of_3": 1}
    assert s["median_files_meeting_target"] == 1
    assert s["files_met_under_every_condition"] == 1
    a, b, c = s["files"]
    assert (a["met"], a["of"], a["attainment_median"], a["attainment_min"], a["gpu_hours_vs_best_median"]) == (
        1, 3, 0.98, 0.97, 1.1)
    assert (b["met"], c["met"], c["gpu_hours_vs_best_median"]) == (3, 0, None)


def test_a_bursty_window_after_another_history_is_read_as_the_recorded_window() -> None:
    # a bursty seed's longer history is another draw of the whole span: another trace hash, the same scored requests;
    # the row carries the recorded trace's hash (the committed file's) and each condition's scored requests
    from committed import Condition, load_planner, scored_hash
    from settings_sweep import replay

    argv = ["--bursty", "2", "--duration", "60", "--history", "60", "--model-profile", "llama-3.1-8b-h100",
            "--max-replicas", "4"]
    _, trace, _, _, _, _ = load_planner(argv)
    args = load_planner(argv)[0]
    row = replay(("f.json", argv, {}, [Condition(True), Condition(True, 1, 2)], 120.0))
    assert row["trace_sha256"] == trace.sha256
    assert set(row["scored_requests"].values()) == {row["recorded_scored"]} == {scored_hash(trace, args.warmup)}


def test_a_condition_is_parsed_back_from_its_name() -> None:
    from committed import conditions, parse_condition

    for c in conditions(4, "both"):
        assert parse_condition(c.name) == c


def test_an_earlier_output_is_read_again_as_a_fresh_run_reads_it(tmp_path: Path) -> None:
    # the committed run with history, replayed after the service's history at two phases, then --reread: the same
    # rows and reading (nothing replayed); a multiple of best taken out of the earlier rows comes back
    import json

    from settings_sweep import main

    root = Path(__file__).resolve().parents[2]
    run, traces = root / "bench/planner/data/history_smoke_run.json", root / "bench/sim/data"
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["--files", str(run), "--traces", str(traces), "--history", "service", "--phases", "2",
                 "--out", str(a)]) == 0
    first = json.loads(a.read_text())
    for r in first["rows"][0]["replays"].values():
        r["gpu_hours_vs_best"], r["meets_target"] = None, False
    a.write_text(json.dumps(first))
    assert main(["--reread", str(a), "--traces", str(traces), "--out", str(b)]) == 0
    again = json.loads(b.read_text())
    assert again["conditions"] == ["service", "service_phase_1_of_2"]
    assert [r["gpu_hours_vs_best"] for r in again["rows"][0]["replays"].values()] == [1.0, 1.0]
    assert again["files_meeting_target"] == {"shipped": {"service": 1, "service_phase_1_of_2": 1}}
