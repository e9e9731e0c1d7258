"""The router's own account of requests it has routed and not yet seen finish.

Worker metrics are scraped periodically, so a burst of requests arriving between two
scrapes would all see the same load and herd onto one worker. The ledger is updated
at decision time and closes that gap.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class _Entry:
    worker_id: str
    prefill_tokens: int
    routed_at: float


class InflightLedger:
    def __init__(self, ttl_s: float = 600.0) -> None:
        # A TTL so that a lost on_finished (crashed client, bug) cannot pin load forever.
        self.ttl_s = ttl_s
        self._entries: dict[str, _Entry] = {}
        self._requests: dict[str, int] = {}
        self._prefill: dict[str, int] = {}

    def add(self, request_id: str, worker_id: str, prefill_tokens: int, now: float) -> None:
        if request_id in self._entries:
            self.finish(request_id)
        self._entries[request_id] = _Entry(worker_id, prefill_tokens, now)
        self._requests[worker_id] = self._requests.get(worker_id, 0) + 1
        self._prefill[worker_id] = self._prefill.get(worker_id, 0) + prefill_tokens

    def prefill_done(self, request_id: str) -> None:
        e = self._entries.get(request_id)
        if e is not None and e.prefill_tokens:
            self._prefill[e.worker_id] -= e.prefill_tokens
            e.prefill_tokens = 0

    def finish(self, request_id: str) -> None:
        e = self._entries.pop(request_id, None)
        if e is None:
            return
        self._requests[e.worker_id] -= 1
        self._prefill[e.worker_id] -= e.prefill_tokens
        if self._requests[e.worker_id] == 0:
            del self._requests[e.worker_id]
            del self._prefill[e.worker_id]

    def expire(self, now: float) -> None:
        if not self._entries:
            return
        # Entries are inserted in time order (dicts keep order), so stop at the first live one.
        stale = []
        for rid, e in self._entries.items():
            if now - e.routed_at <= self.ttl_s:
                break
            stale.append(rid)
        for rid in stale:
            self.finish(rid)

    def drop_worker(self, worker_id: str) -> None:
        for rid in [r for r, e in self._entries.items() if e.worker_id == worker_id]:
            self.finish(rid)

    def requests(self, worker_id: str) -> int:
        return self._requests.get(worker_id, 0)

    def prefill_tokens(self, worker_id: str) -> int:
        return self._prefill.get(worker_id, 0)

    def worker_of(self, request_id: str) -> str | None:
        e = self._entries.get(request_id)
        return e.worker_id if e else None

    def __len__(self) -> int:
        return len(self._entries)


class RecentLoad:
    """Requests routed to each worker lately, each weighing 2^(-age / half_life_s).

    In-flight counts say nothing at light load (every worker is nearly idle, so a cached
    prefix always wins and popular prefixes herd onto their owner), yet the requests a
    worker was just given predict its next minutes: a conversation's follow-up turns go
    where its context is cached. Decayed counts carry that memory.

    Stored scaled by 2^((t - origin) / half_life_s), so a decision reads every worker
    with one exp2 (``scale``) instead of one per worker; the origin moves forward
    before the scaled values could overflow.

    A worker joining a pool that has been serving starts at the mean of its peers
    (``admit``), not at zero: the peers each carry about rate x half_life / ln 2 / n
    decayed requests, so a zero would make the newcomer the cheapest worker by that
    many ``recent_request_tokens`` and it took all the traffic until its count caught
    up. In the planner's replays (70B TP4, Azure 1x from 1,200 s) the second prefill
    replica took 854 of the next 180 s's 1,180 requests, queued past the TTFT SLO on
    it alone, and the planner read that as a slow engine and added a third.
    """

    _REBASE = 64.0  # exponent at which values are rescaled (2^64 is far from float limits)

    def __init__(self, half_life_s: float) -> None:
        if not half_life_s > 0:
            raise ValueError(f"half_life_s must be positive, got {half_life_s}")
        self.half_life_s = half_life_s
        self._origin = 0.0
        self._scaled: dict[str, float] = {}
        self._known: set[str] = set()

    def add(self, worker_id: str, now: float, amount: float = 1.0) -> None:
        e = (now - self._origin) / self.half_life_s
        if e > self._REBASE:
            shrink = 2.0 ** -e
            self._scaled = {w: v * shrink for w, v in self._scaled.items() if v * shrink > 1e-9}
            self._origin, e = now, 0.0
        self._scaled[worker_id] = self._scaled.get(worker_id, 0.0) + amount * 2.0**e

    def scale(self, now: float) -> float:
        """Multiply a :attr:`scaled` value by this to get its decayed weight at ``now``."""
        return 2.0 ** (-(now - self._origin) / self.half_life_s)

    @property
    def scaled(self) -> dict[str, float]:
        return self._scaled

    def value(self, worker_id: str, now: float) -> float:
        return self._scaled.get(worker_id, 0.0) * self.scale(now)

    def admit(self, worker_ids: list[str]) -> None:
        """Workers among ``worker_ids`` seen for the first time (or again after ``drop_worker``) start
        at the mean value of the known ones among them; where none is known yet (a pool's first
        decision) they all start at zero, as equals."""
        known = self._known
        new = [w for w in worker_ids if w not in known]
        if not new:
            return
        peers = [self._scaled.get(w, 0.0) for w in worker_ids if w in known]
        if peers:
            seed = sum(peers) / len(peers)  # scaled values share one origin: the mean of them is the mean's
            for w in new:
                self._scaled[w] = seed
        known.update(new)

    def drop_worker(self, worker_id: str) -> None:
        self._scaled.pop(worker_id, None)
        self._known.discard(worker_id)
