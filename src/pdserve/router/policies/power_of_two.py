"""Power of two choices: sample two workers at random, take the less loaded."""

from __future__ import annotations

import random
from collections.abc import Sequence

from pdserve.router.policies.load import describe, load_key
from pdserve.router.policies.types import Decision, Policy, RouteRequest, WorkerView


class PowerOfTwoPolicy(Policy):
    name = "power_of_two"

    def __init__(
        self,
        *,
        rng: random.Random | None = None,
        seed: int | None = 0,
        block_size: int = 16,
        ledger_ttl_s: float = 600.0,
    ) -> None:
        super().__init__(block_size=block_size, ledger_ttl_s=ledger_ttl_s)
        self.rng = rng if rng is not None else random.Random(seed)

    def _choose(self, req: RouteRequest, workers: Sequence[WorkerView], now: float) -> Decision:
        if len(workers) == 1:
            pair = [workers[0]]
        else:
            pair = self.rng.sample(list(workers), 2)
        w = min(pair, key=lambda v: load_key(self, v))
        other = [v.worker_id for v in pair if v is not w]
        return Decision(
            worker_id=w.worker_id,
            overlap_blocks=0,
            score=float(self.active_requests(w)),
            reason=f"less loaded of sampled {[w.worker_id, *other]}: {describe(self, w)}",
            policy=self.name,
            new_prefill_tokens=req.prompt_tokens,
        )
