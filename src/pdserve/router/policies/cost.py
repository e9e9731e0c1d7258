"""The cost model shared by the cache-aware policies (pure).

Cost is measured in prefill-token equivalents: the tokens this worker would still have
to compute for the request (prompt minus cached overlap) plus the prompt work already
queued there, plus a per-request charge for what is running or waiting and a charge
for KV pressure. Lower is better.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pdserve.router.policies.types import Policy, RouteRequest, WorkerView


@dataclass(frozen=True, slots=True)
class CostWeights:
    overlap_weight: float = 1.0  # how much a cached token is worth vs a queued one
    request_tokens: float = 128.0  # charge per running/waiting request, in tokens
    kv_tokens: float = 2048.0  # charge at kv_usage=1.0 (linear below kv_full)
    kv_full: float = 0.97  # above this the worker is about to preempt: avoid it
    # Herding guard: a worker whose request count exceeds balance_factor x mean +
    # balance_slack is not eligible while any other worker is.
    balance_factor: float = 1.5
    balance_slack: float = 4.0
    # Costs within tie_tokens of the best are ties, broken by fewer requests then rotation.
    tie_tokens: float = 16.0

    def __post_init__(self) -> None:
        for name in ("overlap_weight", "request_tokens", "kv_tokens", "balance_factor", "balance_slack", "tie_tokens"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0 < self.kv_full <= 1:
            raise ValueError(f"kv_full must be in (0, 1], got {self.kv_full}")
        if self.balance_factor < 1:
            raise ValueError(f"balance_factor must be >= 1, got {self.balance_factor}")


@dataclass(frozen=True, slots=True)
class Scored:
    worker_id: str
    cost: float
    overlap: int
    new_tokens: int
    requests: int


def score_workers(
    policy: Policy,
    weights: CostWeights,
    req: RouteRequest,
    workers: Sequence[WorkerView],
    overlaps: dict[str, int],
) -> list[Scored]:
    out: list[Scored] = []
    for w in workers:
        overlap = overlaps.get(w.worker_id, 0)
        new = policy.new_tokens(req, overlap)
        cached = req.prompt_tokens - new
        requests = policy.active_requests(w)
        cost = (
            req.prompt_tokens
            - weights.overlap_weight * cached
            + policy.pending_prefill(w)
            + weights.request_tokens * requests
            + weights.kv_tokens * w.kv_usage
        )
        if w.kv_usage >= weights.kv_full:
            cost += 1e9
        out.append(Scored(w.worker_id, cost, overlap, new, requests))
    return out


def pick(scored: list[Scored], weights: CostWeights, rotation: int) -> tuple[Scored, str]:
    """Choose the best eligible worker; returns it and a note on any guard that fired."""
    note = ""
    mean = sum(s.requests for s in scored) / len(scored)
    limit = weights.balance_factor * mean + weights.balance_slack
    eligible = [s for s in scored if s.requests <= limit]
    if len(eligible) < len(scored):
        note = f"; balance guard excluded {len(scored) - len(eligible)} busy worker(s)"
    if not eligible:
        eligible = scored
    best_cost = min(s.cost for s in eligible)
    ties = [s for s in eligible if s.cost <= best_cost + weights.tie_tokens]
    if len(ties) > 1:
        fewest = min(s.requests for s in ties)
        ties = [s for s in ties if s.requests == fewest]
        # Rotate among exact ties so cache misses on an idle pool spread out.
        return ties[rotation % len(ties)], note + (f"; tie among {len(ties)}" if len(ties) > 1 else "")
    return ties[0], note
