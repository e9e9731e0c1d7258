"""The calibration counts each published measurement once and says which ones were fitted."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "worker"))

import calibration_measurements as cm  # noqa: E402

RESULTS = json.loads((ROOT / "bench/worker/calibration_results.json").read_text())


def test_repeated_runs_of_one_setup_are_one_row_each_metric() -> None:
    rows = cm.distinct_measurements(RESULTS)
    lambda_rows = [r for r in rows if r["measurement"].startswith("lambda-h100-llama-3-8b")]
    # Three Lambda runs x three metrics were 9 checks; they are 3 measurements, repeated 3 times.
    assert len(lambda_rows) == 3
    assert all(r["repeats"] == 3 for r in lambda_rows)
    # Same prompts and limits: the model predicts the same TTFT and TPOT for all three runs.
    assert all(r["distinct_predictions"] == 1 for r in lambda_rows if "ttft" in r["measurement"] or "tpot" in r["measurement"])
    checks = len(RESULTS["h100_checks"])
    assert len([r for r in rows if r["measurement"].split(":")[0] in
                {"vllm-ci-latency", "lambda-h100-llama-3-8b"}]) == 4 < checks


def test_every_row_has_a_role_and_the_summary_counts_fits_apart_from_holdouts() -> None:
    rows = cm.distinct_measurements(RESULTS)
    assert {r["role"] for r in rows} <= {"set", "held out", "informational"}
    s = cm.summary(rows)
    assert s["used_to_set_parameters"] + s["held_out"] + s["informational"] == s["distinct_measurements"] == len(rows)
    # Nothing that set a parameter is counted as evidence.
    assert all(r["role"] != "held out" for r in rows if r["measurement"].startswith(("vllm-ci", "lambda-h100-")))
    assert s["held_out_within_30pct"] == sum(1 for r in rows if r["role"] == "held out" and abs(r["error"]) <= 0.3)


def test_results_file_carries_the_distinct_table() -> None:
    assert RESULTS["distinct_measurements"] == json.loads(json.dumps(cm.distinct_measurements(RESULTS)))
    assert "## Distinct published measurements" in (ROOT / "bench/worker/calibration_results.md").read_text()
