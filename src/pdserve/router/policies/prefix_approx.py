"""Approximate prefix-aware routing: overlap guessed from the router's own history."""

from __future__ import annotations

from pdserve.router.core.approx_index import ApproxPrefixIndex
from pdserve.router.policies.cost import CostWeights
from pdserve.router.policies.kv_aware import KvAwarePolicy
from pdserve.router.policies.types import Decision, RouteRequest


class PrefixApproxPolicy(KvAwarePolicy):
    """Same cost model as kv_aware; only the source of the overlap differs."""

    name = "prefix_approx"

    def __init__(
        self,
        *,
        ttl_s: float = 120.0,
        max_blocks: int = 1_000_000,
        weights: CostWeights | None = None,
        block_size: int = 16,
        ledger_ttl_s: float = 600.0,
        tie_offset: int = 0,
    ) -> None:
        # Its whole index is "speculative": no separate short-lived layer.
        super().__init__(weights=weights, block_size=block_size, ledger_ttl_s=ledger_ttl_s, speculative_ttl_s=0,
                         tie_offset=tie_offset)
        self.approx = ApproxPrefixIndex(ttl_s=ttl_s, max_blocks=max_blocks)

    def overlaps(self, req: RouteRequest, ids: list[str], now: float) -> dict[str, int]:
        return self.approx.overlaps(req.block_hashes, ids, now)

    def on_routed(self, decision: Decision, req: RouteRequest, now: float) -> None:
        super().on_routed(decision, req, now)  # the ledger
        self.approx.record(decision.worker_id, req.block_hashes, now)

    def forget_worker(self, worker_id: str) -> None:
        super().forget_worker(worker_id)
        self.approx.forget_worker(worker_id)
