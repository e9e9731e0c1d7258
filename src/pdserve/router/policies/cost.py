"""The cost model shared by the cache-aware policies (pure).

Cost is measured in prefill-token equivalents: the tokens this worker would still have
to compute for the request (prompt minus cached overlap) plus the prompt work already
queued there, plus a per-request charge for what is running or waiting and a charge
for KV pressure. Lower is better.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

from pdserve.router.policies.ledger import RecentLoad
from pdserve.router.policies.types import Policy, RouteRequest, WorkerView


@dataclass(frozen=True, slots=True)
class CostWeights:
    # A cached token is worth more than the compute it saves now: routing elsewhere
    # would also duplicate the prefix's KV there and evict other useful blocks.
    # overlap_weight 3 and the recent-load pair below were tuned together (session 4,
    # bench/router/routing_quality.py) on Mooncake conversation minutes 0-10, 10-20 and
    # 40-50 (chunked:8 and 4P4D) and the synthetic seed-1 trace; minutes 20-30 held out.
    # request_tokens 64 is from session 2 (Mooncake minutes 0-10).
    overlap_weight: float = 3.0
    request_tokens: float = 64.0  # charge per running/waiting request, in tokens
    kv_tokens: float = 2048.0  # charge at kv_usage=1.0 (linear below kv_full)
    kv_full: float = 0.97  # above this the worker is about to preempt: avoid it
    # Herding guard: a worker whose request count exceeds balance_factor x mean +
    # balance_slack is not eligible while any other worker is.
    balance_factor: float = 1.5
    balance_slack: float = 4.0
    # Costs within max(tie_tokens, tie_fraction x prompt) of the best are ties, broken
    # by fewer requests then rotation. A band relative to the prompt beat a fixed 16
    # tokens on Mooncake (hit ratio 0.90 -> ~0.95 of the oracle, lower TTFT p90)
    # without swallowing the benefit of a cached prefix on short prompts.
    tie_tokens: float = 8.0
    tie_fraction: float = 0.01
    # Charge, in tokens, per request routed to the worker lately, each counting
    # 2^(-age / recent_half_life_s) (policies.ledger.RecentLoad): what in-flight counts
    # miss at light load, where follow-up turns land on whoever took the conversation.
    # Without it (0) popular shared prefixes herded (synthetic trace: max/mean requests
    # 1.25-1.32); 512 / 120 s: 1.01-1.03 on every tuning window at the same hit ratio.
    recent_request_tokens: float = 512.0
    recent_half_life_s: float = 120.0

    def __post_init__(self) -> None:
        for name in ("overlap_weight", "request_tokens", "kv_tokens", "balance_factor", "balance_slack", "tie_tokens",
                     "tie_fraction", "recent_request_tokens"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0 < self.kv_full <= 1:
            raise ValueError(f"kv_full must be in (0, 1], got {self.kv_full}")
        if self.balance_factor < 1:
            raise ValueError(f"balance_factor must be >= 1, got {self.balance_factor}")
        if not self.recent_half_life_s > 0:
            raise ValueError(f"recent_half_life_s must be positive, got {self.recent_half_life_s}")


def pool_weights(weights: CostWeights, pool: str) -> CostWeights:
    """The weights a pool's policy uses. On a prefill-only worker KV usage is prompts
    being computed plus KV waiting for the decode side to pull it: transient, already
    charged as queued prompt tokens, and no decode there can be preempted, so the linear
    KV charge only pushed requests off their cached prefix (4P4D Mooncake replay: 0.88
    -> 0.90 of the oracle's hit ratio). The ``kv_full`` guard still applies."""
    return replace(weights, kv_tokens=0.0) if pool == "prefill" else weights


class Scored(NamedTuple):
    worker_id: str
    cost: float
    overlap: int
    new_tokens: int
    requests: int


def raw_scores(
    policy: Policy,
    weights: CostWeights,
    req: RouteRequest,
    workers: Sequence[WorkerView],
    overlaps: dict[str, int],
    recent: RecentLoad | None = None,
    now: float = 0.0,
) -> list[tuple[float, int, int, int, str]]:
    """(cost, requests, overlap, new_tokens, worker_id) per worker. Cost of every worker. This is the decision-time hot loop (64 workers in well
    under 100 us), so the ledger lookups and arithmetic are inlined."""
    bs = policy.block_size
    prompt = req.prompt_tokens
    floor = 1 if prompt else 0  # vLLM always recomputes at least the last token
    ow, rt, kt, kv_full = weights.overlap_weight, weights.request_tokens, weights.kv_tokens, weights.kv_full
    ledger_requests = policy.ledger._requests
    ledger_prefill = policy.ledger._prefill
    get_overlap = overlaps.get
    recent_scaled = recent.scaled if recent is not None and weights.recent_request_tokens else None
    if recent_scaled:
        rc = weights.recent_request_tokens * recent.scale(now)  # type: ignore[union-attr]
        get_recent = recent_scaled.get
    out: list[tuple[float, int, int, int, str]] = []
    append = out.append
    for w in workers:
        wid = w.worker_id
        overlap = get_overlap(wid, 0)
        new = prompt - overlap * bs
        if new < floor:
            new = floor
        requests = w.running + w.waiting
        mine = ledger_requests.get(wid, 0)
        if mine > requests:
            requests = mine
        queued = w.inflight_prefill_tokens
        mine = ledger_prefill.get(wid, 0)
        if mine > queued:
            queued = mine
        cost = new - (ow - 1.0) * (prompt - new) + queued + rt * requests + kt * w.kv_usage
        if recent_scaled:
            cost += rc * get_recent(wid, 0.0)
        if w.kv_usage >= kv_full:
            cost += 1e9
        append((cost, requests, overlap, new, wid))
    return out


def score_workers(
    policy: Policy,
    weights: CostWeights,
    req: RouteRequest,
    workers: Sequence[WorkerView],
    overlaps: dict[str, int],
) -> list[Scored]:
    return [Scored(t[4], t[0], t[2], t[3], t[1]) for t in raw_scores(policy, weights, req, workers, overlaps)]


def pick(scored: list[tuple[float, int, int, int, str]], weights: CostWeights, rotation: int,
         prompt_tokens: int = 0) -> tuple[Scored, str]:
    """Choose the best eligible worker from ``raw_scores``; returns it and a note on
    any guard that fired."""
    note = ""
    limit = weights.balance_factor * sum(s[1] for s in scored) / len(scored) + weights.balance_slack
    eligible = [s for s in scored if s[1] <= limit]
    if len(eligible) < len(scored):
        note = f"; balance guard excluded {len(scored) - len(eligible)} busy worker(s)"
    if not eligible:
        eligible = scored
    cutoff = min(eligible)[0] + max(weights.tie_tokens, weights.tie_fraction * prompt_tokens)
    ties = [s for s in eligible if s[0] <= cutoff]
    if len(ties) > 1:
        fewest = min(s[1] for s in ties)
        ties = [s for s in ties if s[1] == fewest]
        if len(ties) > 1:
            # Rotate among ties so cache misses on an idle pool spread out.
            note += f"; tie among {len(ties)}"
    t = ties[rotation % len(ties)]
    return Scored(t[4], t[0], t[2], t[3], t[1]), note
