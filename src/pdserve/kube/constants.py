"""The names pdserve's objects carry on a cluster: one definition for operator, planner and router.

The API group and kind come from the resource's own model (``pdserve.api``); the labels
are the contract between what the operator renders and what the planner and the
router's discovery select: change one and every selector here follows."""

from __future__ import annotations

from pdserve.api.resource import API_VERSION, CRD_NAME, GROUP, KIND, PLURAL, VERSION

SERVICE_LABEL = "pdserve.io/service"
ROLE_LABEL = "pdserve.io/role"
MANAGED_BY = "pdserve-operator"
# Server-side apply's field manager and the Events' reporting component.
FIELD_MANAGER = "pdserve-operator"
PLANNER_COMPONENT = "pdserve-planner"

# The leader-election Lease of the operator's replicas (in the operator's namespace).
LEASE_NAME = "pdserve-operator"

MERGE_PATCH = "application/merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


def pool_selector(service: str, role: str | None = None) -> str:
    """The label selector of one service's pods, or of one pool of it."""
    return f"{SERVICE_LABEL}={service}" + (f",{ROLE_LABEL}={role}" if role else "")


__all__ = [
    "API_VERSION",
    "APPLY_PATCH",
    "CRD_NAME",
    "FIELD_MANAGER",
    "GROUP",
    "KIND",
    "LEASE_NAME",
    "MANAGED_BY",
    "MERGE_PATCH",
    "PLANNER_COMPONENT",
    "PLURAL",
    "ROLE_LABEL",
    "SERVICE_LABEL",
    "VERSION",
    "pool_selector",
]
