"""The one place routing policies are built from a :class:`RoutingSpec` (pure)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from pdserve.router.core.kv_index import KvIndex
from pdserve.router.policies import (
    CacheAwarePolicy,
    CostWeights,
    KvAwarePolicy,
    LeastLoadedPolicy,
    Policy,
    PowerOfTwoPolicy,
    PrefixApproxPolicy,
    RoundRobinPolicy,
    pool_weights,
)
from pdserve.router.core.spec import PolicyName, RoutingSpec

Pool = Literal["prefill", "decode"]


def build_policy(name: PolicyName | str, pool: Pool, *, block_size: int = 16, weights: CostWeights | None = None,
                 index: KvIndex | None = None) -> Policy:
    """One policy for ``pool``. ``weights`` (kv_aware, prefix_approx) go through
    :func:`pool_weights`, so a prefill pool never carries the KV-usage charge;
    ``index`` is the KV-event-fed index kv_aware reads (a fresh one when None)."""
    key = PolicyName.parse(name)
    w = pool_weights(weights or CostWeights(), pool)
    if key is PolicyName.KV_AWARE:
        return KvAwarePolicy(index=index, weights=w, block_size=block_size)
    if key is PolicyName.PREFIX_APPROX:
        return PrefixApproxPolicy(weights=w, block_size=block_size)
    if key is PolicyName.CACHE_AWARE:
        return CacheAwarePolicy(block_size=block_size)
    if key is PolicyName.POWER_OF_TWO:
        return PowerOfTwoPolicy(block_size=block_size)
    if key is PolicyName.LEAST_LOADED:
        return LeastLoadedPolicy(block_size=block_size)
    return RoundRobinPolicy(block_size=block_size)


@dataclass(frozen=True)
class PolicySet:
    """The three placements a router makes, each with its own ledger of what it sent:
    prompts on the prefill pool, decode after a remote prefill, and decode where the
    decode worker prefills itself (colocated, or P/D skipped)."""

    prefill: Policy
    pd_decode: Policy
    local_decode: Policy

    @classmethod
    def from_spec(cls, spec: RoutingSpec, index: KvIndex | None = None) -> PolicySet:
        def make(name: PolicyName, pool: Pool) -> Policy:
            return build_policy(name, pool, block_size=spec.block_size, weights=spec.weights, index=index)

        return cls(prefill=make(spec.policy, "prefill"), pd_decode=make(spec.pd_decode_policy, "decode"),
                   local_decode=make(spec.local_decode_policy, "decode"))

    def all(self) -> tuple[Policy, Policy, Policy]:
        return self.prefill, self.pd_decode, self.local_decode

    def replacing(self, pool: Literal["prefill", "decode", "colocated"], policy: Policy) -> PolicySet:
        """This set with ``policy`` placing everything on ``pool`` (benchmarks' oracles and
        replays of live placements; "colocated" is a decode pool without a prefill pool)."""
        if pool == "prefill":
            return replace(self, prefill=policy)
        if pool == "decode":
            return replace(self, pd_decode=policy, local_decode=policy)
        return replace(self, local_decode=policy)
