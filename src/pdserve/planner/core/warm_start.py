"""A planner that starts where a running one would be: its history replayed from the metrics store.

Everything the policy learns lives in its memory: the rate history the forecast and the learnt release margin
read, the bursts held as a reserve for ``peak_window_s``, the latency correction and its hold, the
stabilisation window's recommendations. A planner that restarts (an operator upgrade, a lost Lease, a crashed
pod) starts from none of it: its first tick sees no burst to keep a reserve for and an empty stabilisation
window, so it can release at once what the running planner held (bench/planner ``restart.py``). The metrics
store still has every interval the planner read; replaying them through ``decide`` (decisions discarded)
rebuilds that memory exactly: the same observations give the same state, as the simulator checks.

Pure: observations in, the policy's memory out; the Prometheus range queries live in
``pdserve.planner.shell.source_prometheus`` (``PrometheusSource.history``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from pdserve.planner.core.observation import Observation
from pdserve.planner.core.policy import PlannerPolicy
from pdserve.planner.core.policy_config import PolicyConfig


@dataclass(frozen=True)
class WarmStart:
    """What a warm start replayed: how many intervals, how many of those the policy held on (a field missing), from
    when to when, and how many ticks the store had nothing for."""

    intervals: int
    held: int
    since: float | None
    until: float | None
    empty: int = 0  # ticks the store had nothing for (skipped: a gap is no evidence of idleness)

    def describe(self) -> str:
        if not self.intervals:
            return "cold start: no history in the metrics store" + (f" ({self.empty} empty intervals)" if self.empty else "")
        span = (self.until or 0.0) - (self.since or 0.0)
        return (f"warm start: {self.intervals} intervals ({span:.0f} s) of history replayed"
                + (f", {self.held} of them held" if self.held else "")
                + (f", {self.empty} empty skipped" if self.empty else ""))


def history_span_s(config: PolicyConfig) -> float:
    """How far back a warm start reads: the policy's whole memory. The rate history (``history_len`` intervals) is
    the longest thing it keeps as shipped, and a shorter replay forecasts from less than a running planner; a burst
    window or a stabilisation set longer than that would otherwise start with the bursts it should remember gone."""
    return history_len_ticks(config) * config.interval_s


def history_len_ticks(config: PolicyConfig) -> int:
    """The intervals a warm start replays: ``history_len``, or as many as cover the longest other memory."""
    longest = max(config.peak_window_s, config.scale_down_stabilization_s, config.correction_hold_s)
    return max(config.history_len, math.ceil(longest / config.interval_s))


def history_ticks(config: PolicyConfig, now: float) -> list[float]:
    """The ticks a running planner would have decided at before ``now``, oldest first (one interval apart,
    the last one interval before ``now``)."""
    return [now - k * config.interval_s for k in range(history_len_ticks(config), 0, -1)]


def warm_start(policy: PlannerPolicy, history: Iterable[Observation]) -> WarmStart:
    """Replay ``history`` (a fresh policy's past, as the metrics store saw it) through ``policy.decide`` in time
    order; the decisions are dropped, the memory they leave is kept. Call it before the policy's first live tick:
    replayed after one, the history would be remembered twice."""
    obs = sorted(history, key=lambda o: o.timestamp)
    replayed = held = empty = 0
    since = until = None
    for o in obs:
        if not math.isfinite(o.timestamp):
            continue
        if o.error or not any(v is not None for k, v in o.metrics_dict().items() if k != "timestamp"):
            # Nothing stored for this tick (before the service existed, a scrape gap): replayed, it would read
            # as an idle interval (scale to zero counts idleness from the first tick it sees).
            empty += 1
            continue
        d = policy.decide(o, o.timestamp)
        replayed += 1
        held += d.held
        since = o.timestamp if since is None else since
        until = o.timestamp
    return WarmStart(replayed, held, since, until, empty)
