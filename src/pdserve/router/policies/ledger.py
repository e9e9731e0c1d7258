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
