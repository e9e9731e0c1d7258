"""Routing policies: pure scheduling cores shared by the live router and the simulator.

pdserve.router.core.build builds them from a RoutingSpec (the only place that does);
see docs/internals.md for the contract.
"""

from __future__ import annotations

from pdserve.router.policies.cache_aware import CacheAwarePolicy
from pdserve.router.policies.cost import CostWeights, pool_weights
from pdserve.router.policies.kv_aware import KvAwarePolicy
from pdserve.router.policies.least_loaded import LeastLoadedPolicy
from pdserve.router.policies.power_of_two import PowerOfTwoPolicy
from pdserve.router.policies.prefix_approx import PrefixApproxPolicy
from pdserve.router.policies.round_robin import RoundRobinPolicy
from pdserve.router.policies.types import Decision, NoWorkersError, Policy, RouteRequest, WorkerView

__all__ = [
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
    "pool_weights",
]
