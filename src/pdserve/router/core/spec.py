"""The routing spec: the one typed description of how requests are placed (pure).

The CRD's ``spec.router`` (pdserve.api.spec), the router's CLI / RouterConfig and the
simulator's SimConfig all carry a :class:`RoutingSpec`; :func:`build_policies` and the
:class:`~pdserve.router.core.scheduler.Scheduler` are built from it, so a policy,
its weights and the P/D rules mean the same thing in production and in simulation.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum

from pdserve.router.policies.cost import CostWeights


class PolicyName(StrEnum):
    ROUND_ROBIN = "round_robin"
    LEAST_LOADED = "least_loaded"
    POWER_OF_TWO = "power_of_two"
    PREFIX_APPROX = "prefix_approx"
    KV_AWARE = "kv_aware"
    CACHE_AWARE = "cache_aware"

    @classmethod
    def parse(cls, text: str | PolicyName) -> PolicyName:
        """The policy named ``text`` (``kv-aware`` spelled with a dash too); ValueError names the choices."""
        try:
            return cls(str(text).replace("-", "_"))
        except ValueError:
            raise ValueError(f"unknown routing policy {str(text)!r}; choose one of {[p.value for p in cls]}") from None


# Policies that read the prompt's block hashes (the router hashes prompts only for these).
PREFIX_POLICIES = frozenset({PolicyName.KV_AWARE, PolicyName.PREFIX_APPROX, PolicyName.CACHE_AWARE})
# Policies scored with CostWeights (the others ignore them).
WEIGHTED_POLICIES = frozenset({PolicyName.KV_AWARE, PolicyName.PREFIX_APPROX})


@dataclass(frozen=True, slots=True)
class AdmissionSpec:
    """TTFT-based admission (pdserve.router.core.admission): off unless ``ttft_slo_ms`` is set."""

    ttft_slo_ms: float | None = None
    factor: float = 3.0  # refuse when predicted TTFT > factor x SLO
    prefill_tokens_per_s: float = 20000.0  # initial throughput guess, learned online

    def __post_init__(self) -> None:
        if self.ttft_slo_ms is not None and not self.ttft_slo_ms > 0:
            raise ValueError(f"ttft_slo_ms must be positive, got {self.ttft_slo_ms}")
        if not self.factor > 0:
            raise ValueError(f"admission factor must be positive, got {self.factor}")
        if not self.prefill_tokens_per_s > 0:
            raise ValueError(f"prefill_tokens_per_s must be positive, got {self.prefill_tokens_per_s}")


@dataclass(frozen=True, slots=True)
class RoutingSpec:
    """How to place requests on the prefill and decode pools.

    ``policy`` places prompts: on the prefill pool under P/D, on the decode pool when
    there is no prefill pool (colocated). ``decode_policy`` places the decode side;
    unset, it is ``least_loaded`` after a remote prefill (the prompt's KV moves to
    wherever decode runs, so load is what matters) and ``policy`` when the decode worker
    prefills itself. ``disagg_threshold_tokens``: a prompt with fewer uncached tokens on
    the chosen prefill worker skips P/D and is prefilled locally by the decode worker.
    ``decode_reuse_threshold_tokens``: a prompt whose uncached tokens on a decode worker
    that already holds part of it (KV events) are fewer than this, and fewer than on the
    chosen prefill worker, is prefilled by that decode worker: conditional
    disaggregation on the decode pool's prefix cache (Dynamo's rule: prefill locally
    when the prompt minus the decode worker's prefix hit is short). Decode workers cache
    the prompts whose KV they received, so a conversation's earlier turns are often held
    on the decode side after the prefill side evicted them.
    ``max_prefill_queue_tokens``: when the chosen prefill worker already queues more prompt
    tokens than this (its time-to-drain is this over its prefill rate), and the decode worker
    the local policy picks would finish this prompt's prefill sooner (fewer queued plus
    uncached tokens), that decode worker prefills it: conditional disaggregation on the
    prefill pool's backlog (Dynamo's ``max_prefill_queue_size`` rule, measured in tokens
    instead of requests). 0 = off.
    """

    policy: PolicyName = PolicyName.KV_AWARE
    decode_policy: PolicyName | None = None
    weights: CostWeights = field(default_factory=CostWeights)
    block_size: int = 16  # the workers' KV block size: prompts are hashed in blocks of this
    disagg_threshold_tokens: int = 0
    decode_reuse_threshold_tokens: int = 0
    max_prefill_queue_tokens: int = 0
    admission: AdmissionSpec = field(default_factory=AdmissionSpec)

    def __post_init__(self) -> None:
        # Accept names as strings at the edges (tests, JSON) but hold the enum.
        object.__setattr__(self, "policy", PolicyName.parse(self.policy))
        if self.decode_policy is not None:
            object.__setattr__(self, "decode_policy", PolicyName.parse(self.decode_policy))
        if self.block_size <= 0:
            raise ValueError(f"block_size must be positive, got {self.block_size}")
        if self.disagg_threshold_tokens < 0:
            raise ValueError(f"disagg_threshold_tokens must be >= 0, got {self.disagg_threshold_tokens}")
        if self.decode_reuse_threshold_tokens < 0:
            raise ValueError(f"decode_reuse_threshold_tokens must be >= 0, got {self.decode_reuse_threshold_tokens}")
        if self.max_prefill_queue_tokens < 0:
            raise ValueError(f"max_prefill_queue_tokens must be >= 0, got {self.max_prefill_queue_tokens}")

    @property
    def local_decode_policy(self) -> PolicyName:
        """Decode pool policy when the decode worker also prefills (colocated, or P/D skipped)."""
        return self.decode_policy or self.policy

    @property
    def pd_decode_policy(self) -> PolicyName:
        """Decode pool policy after a remote prefill."""
        return self.decode_policy or PolicyName.LEAST_LOADED

    def without_kv_events(self) -> RoutingSpec:
        """This spec with kv_aware (which needs the model's tokenizer to read KV events)
        replaced by prefix_approx, which learns prefixes from its own routing."""
        approx = PolicyName.PREFIX_APPROX
        return replace(self, policy=approx if self.policy is PolicyName.KV_AWARE else self.policy,
                       decode_policy=approx if self.decode_policy is PolicyName.KV_AWARE else self.decode_policy)

    @property
    def uses_prefixes(self) -> bool:
        return bool({self.policy, self.local_decode_policy, self.pd_decode_policy} & PREFIX_POLICIES)
