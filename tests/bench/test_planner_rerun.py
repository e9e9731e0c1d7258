"""bench/planner/rerun.py: a committed result file's own command, rerun with other policies on a copy."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[2] / "bench" / "planner"
sys.path.insert(0, str(HERE))

import recorded  # noqa: E402
import rerun  # noqa: E402


def test_the_recorded_command_loses_out_policies_and_the_peer(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("")
    cmd = (f"python bench/planner/evaluate.py --trace {trace} --rate-scale 2 --out bench/x.json --policies best "
           f"planner planner_no_level --reactive-prefill-target 2.0 --dynamo-python .cache/p/bin/python --max-replicas 8")
    assert recorded.recorded_argv(cmd, None) == ["--trace", str(trace), "--rate-scale", "2",
                                              "--reactive-prefill-target", "2.0", "--max-replicas", "8"]


def test_a_recorded_merge_is_dropped() -> None:
    # causal26's copies, rerun twice, recorded "--merge --merge --policies planner --merge"
    cmd = "python evaluate.py --rate-scale 1 --merge --merge --policies planner --merge --out x.json"
    assert recorded.recorded_argv(cmd, None) == ["--rate-scale", "1"]


def test_a_trace_not_here_is_looked_up_under_traces(tmp_path: Path) -> None:
    argv = recorded.recorded_argv("python evaluate.py --trace /gone/azure/conv.csv --out x.json", tmp_path)
    assert argv == ["--trace", str(tmp_path / "azure" / "conv.csv")]


def test_not_an_evaluate_command_is_refused() -> None:
    with pytest.raises(SystemExit, match="not an evaluate.py command"):
        recorded.recorded_argv("python suite.py --jobs 2", None)


def test_the_copy_keeps_the_path_below_results(tmp_path: Path) -> None:
    src = rerun.RESULTS / "heldout" / "70b_tp4" / "azure_conv_x2_from600.json"
    assert rerun.destination(src, tmp_path / "d") == tmp_path / "d" / "heldout" / "70b_tp4" / "azure_conv_x2_from600.json"
    assert rerun.destination(tmp_path / "x.json", tmp_path / "d") == tmp_path / "d" / "x.json"
