"""Routing policies: pure scheduling cores shared by the live router and the simulator.

``make_policy(name, **options)`` builds one; see docs/internals.md for the contract.
"""

from __future__ import annotations

from typing import Any

from pdserve.router.policies.cache_aware import CacheAwarePolicy
from pdserve.router.policies.cost import CostWeights, pool_weights
from pdserve.router.policies.kv_aware import KvAwarePolicy
from pdserve.router.policies.least_loaded import LeastLoadedPolicy
from pdserve.router.policies.power_of_two import PowerOfTwoPolicy
from pdserve.router.policies.prefix_approx import PrefixApproxPolicy
from pdserve.router.policies.round_robin import RoundRobinPolicy
from pdserve.router.policies.types import Decision, NoWorkersError, Policy, RouteRequest, WorkerView

POLICIES: dict[str, type[Policy]] = {
    "round_robin": RoundRobinPolicy,
    "least_loaded": LeastLoadedPolicy,
    "power_of_two": PowerOfTwoPolicy,
    "prefix_approx": PrefixApproxPolicy,
    "kv_aware": KvAwarePolicy,
    "cache_aware": CacheAwarePolicy,
}


def make_policy(name: str, **options: Any) -> Policy:
    """Build a policy by name. Unknown names or options raise ValueError naming them."""
    cls = POLICIES.get(name.replace("-", "_"))
    if cls is None:
        raise ValueError(f"unknown routing policy {name!r}; choose one of {sorted(POLICIES)}")
    try:
        return cls(**options)
    except TypeError as e:
        raise ValueError(f"bad options for policy {name!r}: {e}") from e


__all__ = [
    "POLICIES",
    "CacheAwarePolicy",
    "CostWeights",
    "Decision",
    "KvAwarePolicy",
    "LeastLoadedPolicy",
    "NoWorkersError",
    "Policy",
    "PowerOfTwoPolicy",
    "PrefixApproxPolicy",
    "RoundRobinPolicy",
    "RouteRequest",
    "WorkerView",
    "make_policy",
    "pool_weights",
]
