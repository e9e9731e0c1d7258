"""Round robin: the baseline that ignores load and cache."""

from __future__ import annotations

from collections.abc import Sequence

from pdserve.router.policies.types import Decision, Policy, RouteRequest, WorkerView


class RoundRobinPolicy(Policy):
    name = "round_robin"

    def __init__(self, *, block_size: int = 16, ledger_ttl_s: float = 600.0) -> None:
        super().__init__(block_size=block_size, ledger_ttl_s=ledger_ttl_s)
        self._next = 0

    def _choose(self, req: RouteRequest, workers: Sequence[WorkerView], now: float) -> Decision:
        i = self._next % len(workers)
        self._next += 1
        w = workers[i]
        return Decision(
            worker_id=w.worker_id,
            overlap_blocks=0,
            score=float(i),
            reason=f"turn {i} of {len(workers)} workers",
            policy=self.name,
            new_prefill_tokens=req.prompt_tokens,
        )
