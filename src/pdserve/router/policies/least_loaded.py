"""Least loaded: fewest active requests, then least queued prompt work."""

from __future__ import annotations

from collections.abc import Sequence

from pdserve.router.policies.load import describe, load_key
from pdserve.router.policies.types import Decision, Policy, RouteRequest, WorkerView


class LeastLoadedPolicy(Policy):
    name = "least_loaded"

    def __init__(self, *, block_size: int = 16, ledger_ttl_s: float = 600.0) -> None:
        super().__init__(block_size=block_size, ledger_ttl_s=ledger_ttl_s)
        self._rotation = 0

    def _choose(self, req: RouteRequest, workers: Sequence[WorkerView], now: float) -> Decision:
        keys = [load_key(self, w) for w in workers]
        best = min(keys)
        ties = [w for w, k in zip(workers, keys) if k == best]
        # Rotate among equals so an idle pool is not filled worker 0 first every time.
        self._rotation += 1
        w = ties[self._rotation % len(ties)]
        return Decision(
            worker_id=w.worker_id,
            overlap_blocks=0,
            score=float(best[1]),
            reason=f"least loaded of {len(workers)}: {describe(self, w)}",
            policy=self.name,
            new_prefill_tokens=req.prompt_tokens,
        )
