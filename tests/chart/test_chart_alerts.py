"""The PrometheusRule's rules pass `promtool check rules`, and `promtool test rules`
shows the SLO alerts fire on a slow service and stay quiet on a fast one."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from .conftest import of_kind, render

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(not Path(PROMTOOL).exists(), reason="promtool (Debian package prometheus) is not installed"),
]

# A router pod's labels as the PodMonitor relabels them.
_LABELS = 'namespace="ml", pdserve_service="{service}", pdserve_role="router"'


def _rule_groups(chart: helm.Chart, values: dict[str, Any]) -> list[dict[str, Any]]:
    (rule,) = of_kind(render(chart, {"monitoring": {"prometheusRule": True}, **values}), "PrometheusRule")
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


def _histogram(metric: str, service: str, per_minute: dict[str, int], minutes: int) -> list[dict[str, str]]:
    """Cumulative bucket series growing by per_minute[le] each minute."""
    labels = _LABELS.format(service=service)
    series = []
    for le, inc in per_minute.items():
        series.append({"series": f'{metric}_bucket{{{labels}, le="{le}"}}', "values": f"0+{inc}x{minutes}"})
    series.append({"series": f"{metric}_count{{{labels}}}", "values": f"0+{per_minute['+Inf']}x{minutes}"})
    return series


def _promtool(tmp_path: Path, groups: list[dict[str, Any]], tests: list[dict[str, Any]] | None = None) -> subprocess.CompletedProcess[str]:
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": groups}))
    if tests is None:
        return subprocess.run([PROMTOOL, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    spec = tmp_path / "test.yaml"
    spec.write_text(yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": tests}))
    return subprocess.run([PROMTOOL, "test", "rules", str(spec)], capture_output=True, text=True, timeout=60)


def test_rules_pass_promtool_check(chart: helm.Chart, tmp_path: Path) -> None:
    result = _promtool(tmp_path, _rule_groups(chart, {}))
    assert result.returncode == 0, result.stdout + result.stderr


def test_ttft_alert_fires_only_when_attainment_is_below_target(chart: helm.Chart, tmp_path: Path) -> None:
    groups = _rule_groups(chart, {"alerts": {"ttftSeconds": 0.5, "attainmentTarget": 0.9, "for": "2m", "window": "5m"}})
    # Slow: half of the requests take 0.5-1 s, so the p90 is ~0.9 s > 0.5 s.
    slow = _histogram("pdserve_router_time_to_first_token_seconds", "llama", {"0.25": 5, "0.5": 5, "1.0": 10, "+Inf": 10}, 30)
    # Fast: 95 % within 0.25 s, so the p90 is ~0.24 s: no alert for "quick".
    fast = _histogram("pdserve_router_time_to_first_token_seconds", "quick", {"0.25": 19, "0.5": 20, "1.0": 20, "+Inf": 20}, 30)
    tests = [
        {
            "interval": "1m",
            "input_series": slow + fast,
            "alert_rule_test": [
                {
                    "eval_time": "20m",
                    "alertname": "PdserveTTFTSLOAttainmentLow",
                    "exp_alerts": [
                        {
                            "exp_labels": {"namespace": "ml", "pdserve_service": "llama", "severity": "warning"},
                            "exp_annotations": {
                                "summary": "ml/llama: fewer than 90% of requests meet the TTFT SLO",
                                "description": "The p90 time to first token is 900ms, above the 0.5s SLO, for 2m. Check the prefill pool's queue depth and whether the planner is held or at its GPU budget.",
                            },
                        }
                    ],
                }
            ],
        }
    ]
    result = _promtool(tmp_path, groups, tests)
    assert result.returncode == 0, result.stdout + result.stderr


def test_planner_held_and_pending_pods_alert(chart: helm.Chart, tmp_path: Path) -> None:
    groups = _rule_groups(chart, {"alerts": {"plannerHeldFor": "5m", "pendingFor": "3m"}})
    tests = [
        {
            "interval": "1m",
            "input_series": [
                {"series": 'pdserve_planner_held{namespace="ml", service="llama"}', "values": "0 0 1x20"},
                {"series": 'pdserve_planner_held{namespace="ml", service="other"}', "values": "0x22"},
                {"series": 'kube_pod_status_phase{namespace="ml", pod="llama-decode-1", phase="Pending"}', "values": "1x20"},
                {"series": 'kube_pod_labels{namespace="ml", pod="llama-decode-1", label_pdserve_io_service="llama", label_pdserve_io_role="decode"}', "values": "1x20"},
                {"series": 'kube_pod_status_phase{namespace="ml", pod="unrelated", phase="Pending"}', "values": "1x20"},
            ],
            "alert_rule_test": [
                {"eval_time": "4m", "alertname": "PdservePlannerHeld", "exp_alerts": []},
                {
                    "eval_time": "10m",
                    "alertname": "PdservePlannerHeld",
                    "exp_alerts": [
                        {
                            "exp_labels": {"namespace": "ml", "service": "llama", "severity": "warning"},
                            "exp_annotations": {
                                "summary": "ml/llama: the planner has held its replica counts for 5m",
                                "description": "The planner refuses to act (missing or stale metrics, or a budget conflict). See status.planner.reason on the DisaggregatedService.",
                            },
                        }
                    ],
                },
                {
                    "eval_time": "10m",
                    "alertname": "PdservePodsPending",
                    "exp_alerts": [
                        {
                            "exp_labels": {"namespace": "ml", "label_pdserve_io_service": "llama", "label_pdserve_io_role": "decode", "severity": "warning"},
                            "exp_annotations": {
                                "summary": "ml/llama: 1 decode pods Pending",
                                "description": "Pods have been Pending for 3m: usually no node has a free GPU. The planner's decision cannot take effect.",
                            },
                        }
                    ],
                },
            ],
        }
    ]
    result = _promtool(tmp_path, groups, tests)
    assert result.returncode == 0, result.stdout + result.stderr
