"""Dynamo's kv_router worker-selection rule as a policy inside pdserve's simulator (a baseline).

Dynamo's replay and pdserve's simulator differ in their engine models (speed, P/D handoff),
so comparing their hit ratios compares routers *and* engines at once. This baseline puts
Dynamo's rule in pdserve's simulator: same engines, same lagged views as every pdserve
policy, only the routing rule differs. The rule is Dynamo's default cost, as its router
documents it (docs "KV cache routing", ``DefaultWorkerSelector`` in lib/kv-router), at its
defaults (overlap credit 1, prefill load scale 1, temperature 0):

    raw_prefill_blocks = (prompt tokens not yet prefilled on the worker + this prompt) / block
    cost = max(0, raw_prefill_blocks - overlap blocks) + active blocks + this prompt's blocks
           not already active there

"active" blocks are those of requests routed to the worker and not yet done there (Dynamo
tracks them per request and dedups shared prefixes); overlap comes from the KV-event index
only (Dynamo has no speculative entries by default). The lowest cost wins; ties are broken
at random, seeded here (``seed``) so a replay can be repeated.

Checked against Dynamo's own replay where the engines agree best: on chunked:8, Mooncake
minutes 0-10, this policy in pdserve.sim scores about what Dynamo's replay does (see the
README's routing section).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Hashable, Sequence

from pdserve.router.core.kv_index import KvIndex
from pdserve.router.policies import Decision, Policy, RouteRequest, WorkerView


class DynamoRulePolicy(Policy):
    name = "dynamo_kv_router_rule"

    def __init__(self, index: KvIndex, *, block_size: int, pool: str, seed: int = 0) -> None:
        super().__init__(block_size=block_size)
        self.index = index
        # On a prefill worker a request is active until its prompt is done; on an aggregated one until it ends.
        self.release_at_prefill = pool == "prefill"
        self.rng = random.Random(seed)
        self.active: dict[str, Counter[Hashable]] = {}
        self._blocks: dict[str, tuple[str, Sequence[Hashable]]] = {}

    def _choose(self, req: RouteRequest, workers: Sequence[WorkerView], now: float) -> Decision:
        bs = self.block_size
        overlaps = self.index.overlaps(req.block_hashes, [w.worker_id for w in workers])
        blocks = -(-req.prompt_tokens // bs)
        partial = blocks - len(req.block_hashes)  # a trailing partial block has no hash but takes a block
        best: list[tuple[str, int]] = []
        low = float("inf")
        for w in workers:
            wid = w.worker_id
            overlap = overlaps.get(wid, 0)
            active = self.active.get(wid, Counter())
            fresh = sum(1 for h in req.block_hashes if h not in active) + partial
            prefill = (self.pending_prefill(w) + req.prompt_tokens) / bs
            cost = max(0.0, prefill - overlap) + len(active) + fresh
            if cost < low:
                low, best = cost, [(wid, overlap)]
            elif cost == low:
                best.append((wid, overlap))
        wid, overlap = best[self.rng.randrange(len(best))] if len(best) > 1 else best[0]
        return Decision(wid, overlap, low, f"Dynamo's default cost {low:.1f} blocks, overlap {overlap}", self.name,
                        self.new_tokens(req, overlap))

    def on_routed(self, decision: Decision, req: RouteRequest, now: float) -> None:
        super().on_routed(decision, req, now)
        self.active.setdefault(decision.worker_id, Counter()).update(req.block_hashes)
        self._blocks[req.request_id] = (decision.worker_id, req.block_hashes)

    def _release(self, request_id: str) -> None:
        held = self._blocks.pop(request_id, None)
        if held is None:
            return
        active = self.active[held[0]]
        active.subtract(held[1])
        for h in held[1]:
            if active[h] <= 0:
                del active[h]

    def on_prefill_done(self, request_id: str, now: float) -> None:
        super().on_prefill_done(request_id, now)
        if self.release_at_prefill:
            self._release(request_id)

    def on_finished(self, request_id: str, worker_id: str, now: float) -> None:
        super().on_finished(request_id, worker_id, now)
        self._release(request_id)

    def forget_worker(self, worker_id: str) -> None:
        super().forget_worker(worker_id)
        self.active.pop(worker_id, None)
