"""One set of planner defaults: what the CRD and the CLI ship is what bench/planner evaluated."""

from __future__ import annotations

import sys
from pathlib import Path

from pdserve.api.crd import build_crd
from pdserve.kube.constants import GROUP, VERSION
from pdserve.planner.core.policy import PolicyConfig
from pdserve.planner.core.spec_config import settings_from_body

ROOT = Path(__file__).resolve().parents[2]


def _minimal_body() -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "DisaggregatedService",
            "metadata": {"name": "svc", "namespace": "ns"},
            "spec": {"model": {"name": "m"}, "engine": {"kind": "mock"}, "autoscaling": {"enabled": True}}}


def test_resource_defaults_are_the_policy_defaults() -> None:
    cfg = settings_from_body(_minimal_body()).config
    shipped = PolicyConfig()
    assert cfg.scale_down_stabilization_s == shipped.scale_down_stabilization_s
    assert cfg.interval_s == shipped.interval_s
    assert cfg.target_utilization == shipped.target_utilization
    assert cfg.peak_window_s == shipped.peak_window_s


def test_crd_schema_defaults_are_the_policy_defaults() -> None:
    """The API server applies the CRD's defaults, so they must be the same numbers."""
    crd = build_crd()
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["autoscaling"]
    props = schema["properties"]
    assert props["scaleDownStabilizationSeconds"]["default"] == PolicyConfig.scale_down_stabilization_s
    assert props["intervalSeconds"]["default"] == PolicyConfig.interval_s
    assert schema["default"]["scaleDownStabilizationSeconds"] == PolicyConfig.scale_down_stabilization_s


def test_planner_cli_defaults_are_the_policy_defaults() -> None:
    import argparse

    from pdserve.planner.shell import cli

    parser = argparse.ArgumentParser()
    cli._run_parser(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args(["run"])
    assert args.stabilization_s == PolicyConfig.scale_down_stabilization_s
    assert args.target_utilization == PolicyConfig.target_utilization
    assert args.startup_s == PolicyConfig.startup_s


def test_evaluation_runs_the_shipped_defaults() -> None:
    sys.path.insert(0, str(ROOT / "bench" / "planner"))
    try:
        import evaluate
    finally:
        sys.path.remove(str(ROOT / "bench" / "planner"))
    args = evaluate.build_parser().parse_args(["--bursty", "0", "--out", "x.json"])
    assert args.stabilization == PolicyConfig.scale_down_stabilization_s
    assert args.interval == PolicyConfig.interval_s
    assert args.target_utilization == PolicyConfig.target_utilization
    assert args.peak_window == PolicyConfig.peak_window_s


def test_the_shipped_burst_reserve_is_the_fitted_one_with_the_absorb_gate() -> None:
    """Session 9: what bench/planner evaluates as ``planner`` and what the CLI ships; the gate at 0.9 of the TTFT SLO
    since session 27 (0.5 before)."""
    import argparse

    from pdserve.planner.shell import cli

    cfg = PolicyConfig()
    assert (cfg.burst_budget_s, cfg.burst_fit_budget_s, cfg.burst_absorb_fraction) == (2.0, 4.0, 0.9)
    assert cfg.invalid() is None
    parser = argparse.ArgumentParser()
    cli._run_parser(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args(["run"])
    assert (args.burst_budget, args.burst_fit_budget, args.burst_absorb_fraction) == (2.0, 4.0, 0.9)
    off = parser.parse_args(["run", "--burst-budget", "none", "--burst-fit-budget", "none"])
    assert (off.burst_budget, off.burst_fit_budget) == (None, None)


def test_the_decode_ratio_is_read_as_a_line_within_its_own_bounds() -> None:
    """Session 28: judged on Dynamo's engine model (bench/planner cross_engine.py); the same replays in pdserve's
    simulator (results/diagnosis/settings_sweep28_decode_curve.json)."""
    import argparse

    from pdserve.planner.shell import cli

    cfg = PolicyConfig()
    assert cfg.correction_decode_curve and cfg.correction_bounds_decode == (0.67, 4.0)
    assert cfg.correction_bounds == (0.67, 1.5)  # the prefill ratio keeps the shared bounds
    parser = argparse.ArgumentParser()
    cli._run_parser(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args(["run"])
    assert args.correction_decode_curve and args.decode_correction_max == 4.0
