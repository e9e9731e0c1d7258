"""The operator's least-privilege RBAC: the chart's ClusterRole must equal RULES exactly.

The control-plane tests run the operator under an identity bound to exactly these
rules, so a missing verb fails a test and an unused one is a review smell."""

from __future__ import annotations

from typing import Any

from pdserve.api import GROUP, PLURAL

NAMESPACED_RULES: list[dict[str, Any]] = [
    # The resource itself: watch it; patch it for kopf's finalizer and progress annotations.
    {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": [GROUP], "resources": [f"{PLURAL}/status"], "verbs": ["get", "patch"]},
    # Owner references with blockOwnerDeletion need this where OwnerReferencesPermissionEnforcement is on.
    {"apiGroups": [GROUP], "resources": [f"{PLURAL}/finalizers"], "verbs": ["update"]},
    # Children, applied with server-side apply (create + patch); Deployments are watched for drift.
    {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch", "create", "patch"]},
    {"apiGroups": [""], "resources": ["services", "serviceaccounts"], "verbs": ["get", "create", "patch"]},
    {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"], "verbs": ["get", "create", "patch"]},
    # The workers' NetworkPolicy (spec.networkPolicy), applied like the other children.
    {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": ["get", "create", "patch"]},
    # Pending pods explain ScalingLimited; also, the router Role grants pods get/list/watch,
    # and RBAC only lets the operator grant what it holds itself.
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    # Kubernetes Events on transitions (ours and kopf's).
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    # The planner (same ServiceAccount) reads a measured capacity profile from the ConfigMap
    # named by the resource's pdserve.io/capacity-profile annotation.
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]},
]

# Cluster-scoped: a namespaced Role cannot grant these, so a namespace-scoped install
# binds NAMESPACED_RULES per watched namespace plus a small ClusterRole with these.
CLUSTER_RULES: list[dict[str, Any]] = [
    # kopf rescans resources when CRDs change.
    {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["list", "watch"]},
    # A worker pod on a deleted or unreachable node still counts as ready in its Deployment until
    # Kubernetes deletes it (40-80 s, 5 min): the status says so, and a node's change triggers a sync.
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
]

RULES: list[dict[str, Any]] = NAMESPACED_RULES + CLUSTER_RULES

# Leader election: a Role in the operator's own namespace only (its Lease lives there).
LEASE_RULES: list[dict[str, Any]] = [
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
]
