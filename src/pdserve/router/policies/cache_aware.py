"""A baseline after SGLang's router ``cache_aware`` policy, for comparison.

SGLang keeps an approximate radix tree per worker of the requests it routed there.
If the load (requests in flight) is imbalanced — max - min > ``balance_abs_threshold``
and max > min x ``balance_rel_threshold`` — it picks the least loaded worker.
Otherwise it takes the worker with the longest prefix match when the match covers more
than ``cache_threshold`` of the prompt, else the worker with the smallest tree (the
most room). Here the tree is over block hashes instead of characters.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pdserve.router.core.approx_index import ApproxPrefixIndex
from pdserve.router.policies.types import Decision, Policy, RouteRequest, WorkerView


class CacheAwarePolicy(Policy):
    name = "cache_aware"

    def __init__(
        self,
        *,
        cache_threshold: float = 0.5,
        balance_abs_threshold: int = 32,
        balance_rel_threshold: float = 1.0001,
        max_blocks: int = 1_000_000,
        block_size: int = 16,
        ledger_ttl_s: float = 600.0,
    ) -> None:
        super().__init__(block_size=block_size, ledger_ttl_s=ledger_ttl_s)
        if not 0 <= cache_threshold <= 1:
            raise ValueError(f"cache_threshold must be in [0, 1], got {cache_threshold}")
        self.cache_threshold = cache_threshold
        self.balance_abs_threshold = balance_abs_threshold
        self.balance_rel_threshold = balance_rel_threshold
        self.tree = ApproxPrefixIndex(ttl_s=math.inf, max_blocks=max_blocks)

    def _choose(self, req: RouteRequest, workers: Sequence[WorkerView], now: float) -> Decision:
        loads = {w.worker_id: self.active_requests(w) for w in workers}
        hi, lo = max(loads.values()), min(loads.values())
        ids = [w.worker_id for w in workers]
        overlaps = self.tree.overlaps(req.block_hashes, ids, now)
        if hi - lo > self.balance_abs_threshold and hi > lo * self.balance_rel_threshold:
            wid = min(ids, key=lambda i: loads[i])
            why = f"imbalanced (loads {lo}..{hi}): shortest queue"
        else:
            best = max(ids, key=lambda i: (overlaps.get(i, 0), -loads[i]))
            matched = overlaps.get(best, 0) * self.block_size
            rate = matched / req.prompt_tokens if req.prompt_tokens else 0.0
            if rate > self.cache_threshold:
                wid = best
                why = f"match rate {rate:.2f} > {self.cache_threshold}"
            else:
                wid = min(ids, key=lambda i: (self.tree.size_of(i), loads[i]))
                why = f"match rate {rate:.2f} <= {self.cache_threshold}: smallest tree"
        overlap = overlaps.get(wid, 0)
        return Decision(
            worker_id=wid,
            overlap_blocks=overlap,
            score=float(loads[wid]),
            reason=why,
            policy=self.name,
            new_prefill_tokens=self.new_tokens(req, overlap),
        )

    def on_routed(self, decision: Decision, req: RouteRequest, now: float) -> None:
        super().on_routed(decision, req, now)
        self.tree.record(decision.worker_id, req.block_hashes, now)

    def forget_worker(self, worker_id: str) -> None:
        super().forget_worker(worker_id)
        self.tree.forget_worker(worker_id)
