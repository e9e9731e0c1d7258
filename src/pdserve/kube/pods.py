"""Pure pod predicates on pods as the API returns them (camelCase dicts).

The operator's status, the planner's pool counts and the router's discovery all ask
"is this pod serving?"; one answer keeps them from disagreeing about the same pod."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def is_terminating(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def is_ready(pod: Mapping[str, Any]) -> bool:
    """Running, not terminating, and its Ready condition is True (what a Service's endpoints use)."""
    if is_terminating(pod):
        return False
    status = pod.get("status") or {}
    if status.get("phase") not in (None, "Running"):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def is_pending(pod: Mapping[str, Any]) -> bool:
    """Not yet running (unscheduled or starting): capacity asked for but not there."""
    return not is_terminating(pod) and (pod.get("status") or {}).get("phase") == "Pending"


def has_labels(pod: Mapping[str, Any], want: Mapping[str, str]) -> bool:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in want.items())
