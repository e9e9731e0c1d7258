"""bench/planner/report_conditions.py: the README table of a settings sweep after the service's history, over
tick phases (settings_sweep.py --history service --phases N)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "planner"))

from report_conditions import FILE, lower_than_shipped, settings_service  # noqa: E402


def _f(file: str, met: int, lo: float, med: float, vs: float | None) -> dict:
    return {"file": file, "met": met, "of": 2, "attainment_min": lo, "attainment_median": med,
            "gpu_hours_vs_best_median": vs}


def _doc() -> dict:
    ship = [_f("bench/planner/results/heldout/a.json", 1, 0.80, 0.90, 1.10),
            _f("bench/planner/results/heldout/b.json", 2, 0.995, 0.999, 1.00)]
    other = [_f("bench/planner/results/heldout/a.json", 2, 0.99, 0.995, 1.12),
             _f("bench/planner/results/heldout/b.json", 2, 0.994, 0.999, None)]
    return {"meta": {"commit": "0123456789abcdef", "loadavg_before": {"1m": 1.25}},
            "settings": {"x": {"scale_down_stabilization_s": 120}}, "conditions": ["service", "service_phase_1_of_2"],
            "over_conditions": {
                "shipped": {"files": ship, "files_met_under_every_condition": 1, "median_files_meeting_target": 1.5},
                "x": {"files": other, "files_met_under_every_condition": 2, "median_files_meeting_target": 2}}}


def test_a_setting_is_counted_against_the_shipped_planner_s_lowest_attainment() -> None:
    assert lower_than_shipped(_doc(), "x") == (1, 1)


def test_the_table_has_a_row_per_window_and_a_cell_per_setting(tmp_path: Path) -> None:
    f = tmp_path / FILE
    f.parent.mkdir(parents=True)
    f.write_text(json.dumps(_doc()))
    text = settings_service(tmp_path)
    assert "commit 01234567, load 1.2" in text and "`x`: scale_down_stabilization_s 120" in text
    assert "`x` meets the target under every condition on 2 (median over the conditions 2), its lowest attainment " \
           "below the shipped planner's on 1 and above on 1" in text
    assert "| heldout/a | 1 of 2; 80.00-90.00 %; 1.10x | 2 of 2; 99.00-99.50 %; 1.12x |" in text
    assert "| heldout/b | 2 of 2; 99.50-99.90 %; 1.00x | 2 of 2; 99.40-99.90 %; - |" in text
    assert settings_service(tmp_path / "none") == ""


def test_each_sweep_file_gets_its_own_table(tmp_path: Path) -> None:
    # a sweep too long for one session runs as several files (bursty windows, 70B windows): each is rendered
    (tmp_path / FILE.parent).mkdir(parents=True)
    (tmp_path / FILE).write_text(json.dumps(_doc()))
    (tmp_path / FILE.parent / f"{FILE.stem}_bursty.json").write_text(json.dumps(_doc()))
    one = {"meta": {"commit": "0"}, "settings": {}, "files_meeting_target": {"shipped": 0}, "rows": []}
    (tmp_path / FILE.parent / f"{FILE.stem}_one_condition.json").write_text(json.dumps(one))  # no table, no crash
    text = settings_service(tmp_path)
    assert text.count("#### Settings after the service's history") == 2
    assert f"/{FILE.parent.name}/{FILE.stem}_bursty.json`" in text and f"/{FILE}`" in text
