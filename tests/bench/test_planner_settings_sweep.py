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
