"""Handler wiring and the operator CLI's argument checks (no cluster needed)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pdserve.operator.handlers import HandlerConfig, build_registry, settings
from pdserve.operator.reconcile import Reconciler


def _ids(handlers: object) -> list[str]:
    return sorted(str(h) for h in handlers)  # type: ignore[attr-defined]


def test_registry_handlers_and_optional_planner_daemon() -> None:
    plain = build_registry(Reconciler(None), HandlerConfig(resync_seconds=30))  # type: ignore[arg-type]
    assert _ids(plain._changing.get_all_handlers()) == ["Handler 'reconcile'", "Handler 'reconcile'", "Handler 'reconcile/spec'"]
    assert _ids(plain._watching.get_all_handlers()) == ["Handler 'child'"]
    assert _ids(plain._spawning.get_all_handlers()) == ["Timer 'resync'"]
    hosted = build_registry(Reconciler(None), HandlerConfig(hosted_planner=True))  # type: ignore[arg-type]
    assert "Daemon 'planner'" in _ids(hosted._spawning.get_all_handlers())


def test_settings_keep_state_in_our_own_annotations() -> None:
    s = settings()
    assert s.persistence.finalizer == "pdserve.io/operator"
    assert s.watching.server_timeout == 300
    # A fixed namespace list must not need cluster-wide namespace listing.
    assert not s.scanning.disabled and settings(namespaced=True).scanning.disabled


def test_rules_split_into_namespaced_and_cluster_parts() -> None:
    from pdserve.operator.rbac import CLUSTER_RULES, NAMESPACED_RULES, RULES

    assert RULES == NAMESPACED_RULES + CLUSTER_RULES
    assert all(r["resources"] == ["customresourcedefinitions"] for r in CLUSTER_RULES)
    # Least privilege: nothing may delete, nothing touches secrets, and configmaps are
    # only read by name (the planner's capacity profile).
    assert not any("delete" in r["verbs"] or "*" in r["verbs"] for r in RULES)
    assert not any(res in ("secrets", "*") for r in RULES for res in r["resources"])
    assert all(r["verbs"] == ["get"] for r in RULES if "configmaps" in r["resources"])


def test_cli_help_and_bad_arguments() -> None:
    out = subprocess.run([sys.executable, "-m", "pdserve.cli", "operator", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "--all-namespaces" in out.stdout and "--hosted-planner" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "pdserve.cli", "operator", "--resync-seconds", "0"], capture_output=True, text=True)
    assert bad.returncode != 0 and "--resync-seconds must be > 0" in bad.stderr


@pytest.mark.parametrize("argv", [["-A", "-n", "x"], ["--log-level", "loud"]])
def test_cli_refuses_conflicting_or_unknown_options(argv: list[str]) -> None:
    out = subprocess.run([sys.executable, "-m", "pdserve.cli", "operator", *argv], capture_output=True, text=True)
    assert out.returncode == 2 and "error" in out.stderr
