"""Per-interval metrics for the autoscaler hook (what a Prometheus scrape would show)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pdserve.sim.autoscale import PoolMetrics, PoolSizes, WindowMetrics
from pdserve.sim.instance import State
from pdserve.sim.metrics import RequestRecord, percentile

if TYPE_CHECKING:
    from pdserve.sim.simulator import Simulation

_EMPTY = PoolMetrics(ready=0, starting=0, draining=0, running=0, waiting=0, kv_usage=0.0, prefix_hit_ratio=None)


class WindowTracker:
    """Accumulates arrivals and completions between ticks; reads gauges at a tick."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.isl: list[int] = []
        self.osl: list[int] = []
        self.ttft: list[float] = []
        self.tpot: list[float] = []
        self.prefix_seen: dict[str, tuple[int, int]] = {}  # instance -> (hits, queries) at last tick

    def arrived(self, rec: RequestRecord) -> None:
        self.isl.append(rec.input_tokens)
        self.osl.append(rec.output_tokens)

    def completed(self, rec: RequestRecord) -> None:
        self.ttft.append(rec.ttft)
        if rec.output_tokens > 1:
            self.tpot.append(rec.tpot)

    def pool_sizes(self) -> PoolSizes:
        def live(pool: str) -> int:
            return sum(1 for i in self.sim.instances.get(pool, ()) if i.state in (State.STARTING, State.READY))

        if self.sim.disagg:
            return PoolSizes(prefill=live("prefill"), decode=live("decode"))
        return PoolSizes(prefill=0, decode=live("colocated"))

    def _pool(self, pool: str) -> PoolMetrics:
        insts = self.sim.instances.get(pool, [])
        active = [i for i in insts if i.state in (State.READY, State.DRAINING)]
        ready = [i for i in insts if i.state is State.READY]
        hits = queries = 0
        for i in insts:
            h, q = i.engine.prefix_hits, i.engine.prefix_queries
            h0, q0 = self.prefix_seen.get(i.instance_id, (0, 0))
            hits += h - h0
            queries += q - q0
            self.prefix_seen[i.instance_id] = (h, q)
        return PoolMetrics(
            ready=len(ready),
            starting=sum(1 for i in insts if i.state is State.STARTING),
            draining=sum(1 for i in insts if i.state is State.DRAINING),
            running=sum(len(i.engine.running) for i in active),
            waiting=sum(len(i.engine.waiting) + i.incoming for i in active) + len(self.sim.pending[pool]),
            kv_usage=sum(i.engine.pool.usage() for i in ready) / len(ready) if ready else 0.0,
            prefix_hit_ratio=hits / queries if queries else None,
        )

    def snapshot(self, now: float, interval_s: float) -> WindowMetrics:
        n = len(self.isl)
        sim = self.sim
        if sim.disagg:
            prefill, decode = self._pool("prefill"), self._pool("decode")
        else:
            prefill, decode = _EMPTY, self._pool("colocated")
        w = WindowMetrics(
            start_s=now - interval_s,
            end_s=now,
            arrivals=n,
            request_rate=n / interval_s,
            mean_isl=sum(self.isl) / n if n else None,
            mean_osl=sum(self.osl) / n if n else None,
            completions=len(self.ttft),
            ttft_p50=percentile(self.ttft, 50),
            ttft_p90=percentile(self.ttft, 90),
            itl_p50=percentile(self.tpot, 50),
            itl_p90=percentile(self.tpot, 90),
            prefill=prefill,
            decode=decode,
        )
        self.isl, self.osl, self.ttft, self.tpot = [], [], [], []
        return w
