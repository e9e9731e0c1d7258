"""What the simulated router sees of its engines: the live router's view, not the engines' truth.

By default (SimConfig) the router sees worker gauges as of its last /metrics scrape
(every ``view_refresh_s``, the live ``--scrape-interval``), with only what vLLM's
/metrics carries, and KV events one batch per engine step, ``kv_event_lag_s`` after the
step (vLLM's ZMQ publisher -> the router's subscriber). ``exact_views`` is the idealised
router that sees every engine at the instant it decides.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable

from pdserve.router.core.kv_index import KvIndex
from pdserve.router.policies import WorkerView
from pdserve.sim.config import SimConfig
from pdserve.sim.instance import Instance, State
from pdserve.worker.kvcache import KvEvents


_READY, _RELEASED = State.READY, State.RELEASED  # read per event (Python 3.11's EnumType.__getattr__ makes
# every read of a member through the class ~5x a module global's)


class RouterView:
    def __init__(self, config: SimConfig, index: KvIndex) -> None:
        self.index = index
        self.scraping = config.view_refresh_s > 0 and not config.exact_views
        self.refresh_s = config.view_refresh_s
        self.event_lag_s = 0.0 if config.exact_views else config.kv_event_lag_s
        self._refs: dict[str, Counter[Hashable]] = {}  # worker -> block key -> copies held

    def views(self, ready: Iterable[Instance]) -> list[WorkerView]:
        if self.scraping:
            return [i.scraped_view or i.view(load=False) for i in ready]
        return [i.view() for i in ready]

    def scrape(self, instances: Iterable[Instance]) -> None:
        """Like the live router's periodic /metrics scrape."""
        for inst in instances:
            if inst.state is _READY:
                # Only what vLLM's /metrics carries (running, waiting, KV usage): it has no gauge of queued
                # prompt tokens, so the live router's views say 0 there and its ledger supplies them.
                inst.scraped_view = inst.view(prefill_tokens=False)

    def apply_events(self, inst: Instance, ev: KvEvents) -> None:
        """One step's batch of KV events lands in the router's index."""
        if inst.state is _RELEASED:  # a late batch from a worker the router already forgot
            return
        # The engine reports a block each time it is cached, also when another block of the
        # same worker already holds that content, and one BlockRemoved per evicted block (as
        # vLLM does): count copies per worker so that evicting one copy does not drop a
        # block the worker still holds (the live router's KvIndex.apply counts them too).
        refs = self._refs.get(inst.instance_id)
        if refs is None:
            refs = self._refs[inst.instance_id] = Counter()
        gone = []
        for h in ev.removed:
            n = refs.get(h, 0) - 1
            if n > 0:
                refs[h] = n
            else:
                refs.pop(h, None)
                gone.append(h)
        if gone:
            self.index.remove(inst.instance_id, gone)
        for stored in ev.stored:
            refs.update(stored.block_hashes)  # +1 per hash, counted in C
            self.index.store(inst.instance_id, stored.block_hashes)
