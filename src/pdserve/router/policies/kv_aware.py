"""Precise KV-aware routing: overlap from the KV-event-fed index, cost vs load."""

from __future__ import annotations

from collections.abc import Sequence

from pdserve.router.kv_index import KvIndex
from pdserve.router.policies.cost import CostWeights, pick, raw_scores
from pdserve.router.policies.types import Decision, Policy, RouteRequest, WorkerView


class KvAwarePolicy(Policy):
    name = "kv_aware"

    def __init__(
        self,
        *,
        index: KvIndex | None = None,
        weights: CostWeights | None = None,
        block_size: int = 16,
        ledger_ttl_s: float = 600.0,
    ) -> None:
        super().__init__(block_size=block_size, ledger_ttl_s=ledger_ttl_s)
        self.index = index if index is not None else KvIndex()
        self.weights = weights or CostWeights()
        self._rotation = 0

    def overlaps(self, req: RouteRequest, workers: Sequence[WorkerView], now: float) -> dict[str, int]:
        return self.index.overlaps(req.block_hashes, [w.worker_id for w in workers])

    def _choose(self, req: RouteRequest, workers: Sequence[WorkerView], now: float) -> Decision:
        overlaps = self.overlaps(req, workers, now)
        scored = raw_scores(self, self.weights, req, workers, overlaps)
        self._rotation += 1
        best, note = pick(scored, self.weights, self._rotation)
        max_overlap = max(overlaps.values(), default=0)
        return Decision(
            worker_id=best.worker_id,
            overlap_blocks=best.overlap,
            score=best.cost,
            reason=(
                f"overlap {best.overlap}/{len(req.block_hashes)} blocks (best anywhere {max_overlap}), "
                f"{best.new_tokens} new tokens, {best.requests} active, cost {best.cost:.0f} "
                f"of {len(workers)} workers{note}"
            ),
            policy=self.name,
            new_prefill_tokens=best.new_tokens,
            block_hashes=tuple(req.block_hashes),
        )

    def forget_worker(self, worker_id: str) -> None:
        super().forget_worker(worker_id)
        self.index.remove_worker(worker_id)
