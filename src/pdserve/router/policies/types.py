"""Value types shared by every routing policy (see docs/internals.md)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from pdserve.router.policies.ledger import InflightLedger


@dataclass(frozen=True, slots=True)
class WorkerView:
    """What the router knows about one worker when it decides.

    ``running``/``waiting``/``kv_usage`` come from the worker's own metrics (possibly
    a little stale); ``inflight_prefill_tokens`` is prompt work already sent there
    that has not produced its first token yet.
    """

    worker_id: str
    running: int = 0
    waiting: int = 0
    inflight_prefill_tokens: int = 0
    kv_usage: float = 0.0


@dataclass(frozen=True, slots=True)
class RouteRequest:
    """One request to place. ``block_hashes`` are the prompt's full-block prefix
    hashes in order (any hashable: vLLM's 64-bit ints for KV-event matching)."""

    request_id: str
    token_ids: Sequence[int]
    block_hashes: Sequence[Hashable]
    prompt_tokens: int


@dataclass(frozen=True, slots=True)
class Decision:
    """A placement. ``score`` is the policy's cost for the chosen worker (lower is
    better for cost-based policies); ``reason`` is a one-line human explanation."""

    worker_id: str
    overlap_blocks: int
    score: float
    reason: str
    policy: str = ""
    new_prefill_tokens: int = 0

    def header(self) -> str:
        """Compact form for the ``x-pdserve-route`` debug header."""
        return (
            f"policy={self.policy}; worker={self.worker_id}; overlap_blocks={self.overlap_blocks}; "
            f"score={self.score:.1f}; why={self.reason}"
        )


class NoWorkersError(RuntimeError):
    """Raised by ``select`` when the candidate list is empty."""


class Policy(ABC):
    """Base class: keeps the router's own ledger of routed-but-unfinished requests,
    which every load estimate combines with the (possibly stale) worker views."""

    name: str = "base"

    def __init__(self, *, block_size: int = 16, ledger_ttl_s: float = 600.0) -> None:
        if block_size <= 0:
            raise ValueError(f"block_size must be positive, got {block_size}")
        self.block_size = block_size
        self.ledger = InflightLedger(ttl_s=ledger_ttl_s)

    @abstractmethod
    def _choose(self, req: RouteRequest, workers: Sequence[WorkerView], now: float) -> Decision: ...

    def select(self, req: RouteRequest, workers: Sequence[WorkerView], now: float) -> Decision:
        if not workers:
            raise NoWorkersError("no workers available to route to")
        self.ledger.expire(now)
        return self._choose(req, workers, now)

    def on_routed(self, decision: Decision, req: RouteRequest, now: float) -> None:
        self.ledger.add(req.request_id, decision.worker_id, decision.new_prefill_tokens, now)

    def on_prefill_done(self, request_id: str, now: float) -> None:
        """Optional: the request's first token arrived, its prompt work is over."""
        self.ledger.prefill_done(request_id)

    def on_finished(self, request_id: str, worker_id: str, now: float) -> None:
        self.ledger.finish(request_id)

    def forget_worker(self, worker_id: str) -> None:
        """The worker left the pool: drop anything this policy remembers about it."""
        self.ledger.drop_worker(worker_id)

    # Helpers shared by the load-based policies.
    def active_requests(self, w: WorkerView) -> int:
        """Requests on the worker: its own count, or ours when its view is stale."""
        return max(w.running + w.waiting, self.ledger.requests(w.worker_id))

    def pending_prefill(self, w: WorkerView) -> int:
        return max(w.inflight_prefill_tokens, self.ledger.prefill_tokens(w.worker_id))

    def new_tokens(self, req: RouteRequest, overlap_blocks: int) -> int:
        # vLLM always recomputes at least the last prompt token, even on a full hit.
        return max(req.prompt_tokens - overlap_blocks * self.block_size, 1 if req.prompt_tokens else 0)
