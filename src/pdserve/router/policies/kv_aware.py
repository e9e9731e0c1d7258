"""Precise KV-aware routing: overlap from the KV-event-fed index, cost vs load."""

from __future__ import annotations

from collections.abc import Sequence

from pdserve.router.core.approx_index import RecentRoutes
from pdserve.router.core.kv_index import KvIndex
from pdserve.router.policies.cost import CostWeights, pick, raw_scores
from pdserve.router.policies.ledger import RecentLoad
from pdserve.router.policies.types import Decision, Policy, RouteRequest, WorkerView


class KvAwarePolicy(Policy):
    """Overlap from KV events, plus speculative entries for what was just routed.

    Events arrive only after the worker has computed (and cached) a prompt, so a
    burst of requests sharing a new prefix would otherwise scatter before the first
    one's events land. Like llm-d's speculative indexing, each routed prompt counts
    as cached on its worker for ``speculative_ttl_s`` seconds (0 disables it).
    ``tie_offset``: the phase at which rotation among equal-cost workers starts.
    """

    name = "kv_aware"

    def __init__(
        self,
        *,
        index: KvIndex | None = None,
        weights: CostWeights | None = None,
        block_size: int = 16,
        ledger_ttl_s: float = 600.0,
        speculative_ttl_s: float = 10.0,
        speculative_max_blocks: int = 200_000,
        tie_offset: int = 0,
    ) -> None:
        super().__init__(block_size=block_size, ledger_ttl_s=ledger_ttl_s)
        self.index = index if index is not None else KvIndex()
        self.weights = weights or CostWeights()
        # Where rotation among tied workers starts. Nothing favours one phase over another;
        # benchmarks vary it (bench/router/routing_quality.py --seeds) because a replay's hit
        # ratio depends on it chaotically, as Dynamo's does on its random tie-breaks.
        if tie_offset < 0:
            raise ValueError(f"tie_offset must be >= 0, got {tie_offset}")
        self._rotation = tie_offset
        self.recent = RecentLoad(self.weights.recent_half_life_s)
        self.speculative = RecentRoutes(speculative_ttl_s, speculative_max_blocks) if speculative_ttl_s > 0 else None

    def overlaps(self, req: RouteRequest, ids: list[str], now: float) -> dict[str, int]:
        """Cached blocks of ``req``'s prompt per worker among ``ids`` (the decision's worker ids)."""
        found = self.index.overlaps(req.block_hashes, ids)
        if self.speculative is not None:
            w, n = self.speculative.overlap(req.block_hashes, now)
            if w is not None and n > found.get(w, 0) and w in ids:
                found[w] = n
        return found

    def on_routed(self, decision: Decision, req: RouteRequest, now: float) -> None:
        super().on_routed(decision, req, now)
        self.recent.add(decision.worker_id, now)
        if self.speculative is not None:
            self.speculative.record(decision.worker_id, req.block_hashes, now)

    def _choose(self, req: RouteRequest, workers: Sequence[WorkerView], now: float) -> Decision:
        ids = [w.worker_id for w in workers]
        self.recent.admit(ids)  # a worker new to the pool starts at its peers' load
        overlaps = self.overlaps(req, ids, now)
        scored = raw_scores(self, self.weights, req, workers, overlaps, self.recent, now)
        self._rotation += 1
        best, note = pick(scored, self.weights, self._rotation, req.prompt_tokens)
        max_overlap = max(overlaps.values(), default=0)
        return Decision(
            worker_id=best.worker_id,
            overlap_blocks=best.overlap,
            score=best.cost,
            reason=(
                f"overlap {best.overlap}/{len(req.block_hashes)} blocks (best anywhere {max_overlap}), "
                f"{best.new_tokens} new tokens, {best.requests} active, "
                f"{self.recent.value(best.worker_id, now):.1f} recent, cost {best.cost:.0f} "
                f"of {len(workers)} workers{note}"
            ),
            policy=self.name,
            new_prefill_tokens=best.new_tokens,
        )

    def forget_worker(self, worker_id: str) -> None:
        super().forget_worker(worker_id)
        self.index.remove_worker(worker_id)
        self.recent.drop_worker(worker_id)
        if self.speculative is not None:
            self.speculative.forget_worker(worker_id)
