"""pdserve's one Kubernetes layer: names, typed errors, events, pod readiness, client setup.

Used by the operator, the planner's Kubernetes actuator and the router's discovery.
The package root is light (no client import); ``pdserve.kube.client`` sets up the
official client, ``pdserve.kube.events`` posts through kopf."""

from pdserve.kube.constants import (
    API_VERSION,
    FIELD_MANAGER,
    GROUP,
    KIND,
    MANAGED_BY,
    PLANNER_COMPONENT,
    PLURAL,
    ROLE_LABEL,
    SERVICE_LABEL,
    VERSION,
    pool_selector,
)
from pdserve.kube.errors import KubeError
from pdserve.kube.pods import is_pending, is_ready, is_terminating

__all__ = [
    "API_VERSION",
    "FIELD_MANAGER",
    "GROUP",
    "KIND",
    "MANAGED_BY",
    "PLANNER_COMPONENT",
    "PLURAL",
    "ROLE_LABEL",
    "SERVICE_LABEL",
    "VERSION",
    "KubeError",
    "is_pending",
    "is_ready",
    "is_terminating",
    "pool_selector",
]
