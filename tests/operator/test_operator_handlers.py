"""Handler wiring and the operator CLI's argument checks (no cluster needed)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pdserve.operator.handlers import HandlerConfig, build_registry, settings
from pdserve.operator.reconcile import Reconciler


def _ids(handlers: object) -> list[str]:
    return sorted(str(h) for h in handlers)  # type: ignore[attr-defined]


def test_registry_handlers_and_the_planner_daemon_by_default() -> None:
    hosted = build_registry(Reconciler(None), HandlerConfig(resync_seconds=30))  # type: ignore[arg-type]
    assert _ids(hosted._changing.get_all_handlers()) == ["Handler 'reconcile'", "Handler 'reconcile'", "Handler 'reconcile/spec'"]
    assert _ids(hosted._watching.get_all_handlers()) == ["Handler 'child'", "Handler 'node'", "Handler 'pod-deleted'"]
    # The planner is hosted by the operator, always (one host): a daemon per autoscaled resource.
    assert _ids(hosted._spawning.get_all_handlers()) == ["Daemon 'planner'", "Timer 'resync'"]
    plain = build_registry(Reconciler(None), HandlerConfig(planner=None))  # type: ignore[arg-type]
    assert _ids(plain._spawning.get_all_handlers()) == ["Timer 'resync'"]


def test_settings_keep_state_in_our_own_annotations() -> None:
    s = settings()
    assert s.persistence.finalizer == "pdserve.io/operator"
    assert s.watching.server_timeout == 300
    # A fixed namespace list must not need cluster-wide namespace listing.
    assert not s.scanning.disabled and settings(namespaced=True).scanning.disabled


def test_rules_split_into_namespaced_and_cluster_parts() -> None:
    from pdserve.operator.rbac import CLUSTER_RULES, LEASE_RULES, NAMESPACED_RULES, RULES

    assert RULES == NAMESPACED_RULES + CLUSTER_RULES
    # The Lease is the only thing it writes outside the watched namespaces' children.
    assert LEASE_RULES == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]}]
    assert not any("leases" in r["resources"] for r in RULES)
    assert [r["resources"] for r in CLUSTER_RULES] == [["customresourcedefinitions"], ["nodes"]]
    # Nodes are only read (a worker pod's node deleted or unreachable), never written.
    assert CLUSTER_RULES[1]["verbs"] == ["get", "list", "watch"]
    # Least privilege: nothing may delete, nothing touches secrets, and configmaps are
    # only read by name (the planner's capacity profile).
    assert not any("delete" in r["verbs"] or "*" in r["verbs"] for r in RULES)
    assert not any(res in ("secrets", "*") for r in RULES for res in r["resources"])
    assert all(r["verbs"] == ["get"] for r in RULES if "configmaps" in r["resources"])


def test_cli_help_and_bad_arguments() -> None:
    out = subprocess.run([sys.executable, "-m", "pdserve.cli", "operator", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "--all-namespaces" in out.stdout and "--prometheus-url" in out.stdout and "--lease-name" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "pdserve.cli", "operator", "--resync-seconds", "0"], capture_output=True, text=True)
    assert bad.returncode != 0 and "--resync-seconds must be > 0" in bad.stderr
    # A follower could take over while the leader still believes it leads: refused by name.
    bad = subprocess.run([sys.executable, "-m", "pdserve.cli", "operator", "--lease-duration", "5", "--lease-renew-deadline", "8"],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "duration (5.0) > renew deadline (8.0)" in bad.stderr


@pytest.mark.parametrize("argv", [["-A", "-n", "x"], ["--log-level", "loud"]])
def test_cli_refuses_conflicting_or_unknown_options(argv: list[str]) -> None:
    out = subprocess.run([sys.executable, "-m", "pdserve.cli", "operator", *argv], capture_output=True, text=True)
    assert out.returncode == 2 and "error" in out.stderr
