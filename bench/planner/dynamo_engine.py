"""pdserve's planner, and fixed schedules, driving Dynamo 1.6.1's offline replay engine instead of pdserve's simulator.

Every other number in bench/planner scores a policy on pdserve's own simulator: the planner is judged by an engine
model from the same code base. Dynamo's offline replay is another engine model (its mocker, a Rust discrete-event
simulation of prefill and decode workers with its own scheduler, KV transfer and start-up), and its Rust loop takes a
scaling policy from Python: any object with ``initial_tick_ms()`` and ``on_tick(snapshot) -> {"target_prefill",
"target_decode", "next_tick_ms"}`` (what Dynamo's own planner adapter, ``dynamo.planner.offline.replay_adapter``,
implements). Two such policies here, run by ``cross_engine.py`` in the peers' environment:

* ``PlannerDriver``: pdserve's planner, closed loop. Each tick it builds the ``WindowMetrics`` pdserve's simulator
  would give it (``pdserve.sim.windows``) from what a live deployment would show: the router's arrival-time signals
  (prompt-token rate over the 60 s rate window, the per-scrape peak, the burst gauge) from the trace's arrivals up to
  the last scrape, as the router counts them; the engines' side from Dynamo's snapshot: completions in the rate
  window (request rate, mean ISL / OSL, mean TTFT and ITL, from Dynamo's per-tick traffic windows), each worker's last
  forward-pass metrics (queued and running requests, decode KV tokens) and the workers ready, starting and draining.
  Then it calls the same ``PlannerAutoscaler`` the simulator calls. What Dynamo's snapshot does not carry is left
  unknown, not invented: tail latencies (p90) and the prefill engines' own TTFT (so the planner's latency correction
  keeps its prefill ratio at 1, and an unknown tail counts as near the SLO, as the planner treats it live).
* ``ScheduleDriver``: a per-tick schedule replayed open loop (a committed run's best schedule found, static size or
  the planner's own decisions in pdserve's simulator), to see whether a schedule sized on one engine model holds on
  the other.

Ticks fall where pdserve's simulator puts them: the first arrival plus each interval.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from pdserve.sim.autoscale import PoolMetrics, PoolSizes, WindowMetrics
from pdserve.sim.windows import RATE_WINDOW_S, RouterWindow, WindowTracker


def pool_counts(snapshot: dict[str, Any], role: str) -> tuple[int, int, int]:
    """(ready, starting, draining) workers of a pool in Dynamo's replay snapshot."""
    return (int(snapshot[f"active_{role}_count"]), int(snapshot.get(f"starting_{role}_count", 0)),
            int(snapshot.get(f"draining_{role}_count", 0)))


def tick_record(now_s: float, snapshot: dict[str, Any]) -> dict[str, Any]:
    """One tick in ``dynamo_peer.run``'s shape (what ``evaluate.score_replay`` reads)."""
    out: dict[str, Any] = {"at_s": now_s}
    for role in ("prefill", "decode"):
        ready, starting, draining = pool_counts(snapshot, role)
        out[role] = {"active_count": ready, "starting_count": starting, "draining_count": draining}
    return out


def _idle(snapshot: dict[str, Any], fpm: dict[str, dict[tuple[int, int], dict]]) -> bool:
    busy = sum(f.get("num_prefill_requests", 0) + f.get("num_queued_prefill", 0) + f.get("num_decode_requests", 0)
               + f.get("num_queued_decode", 0) for role in fpm.values() for f in role.values())
    return busy == 0


class RouterView:
    """The router's arrival-time signals from the trace's arrivals, fed up to each tick: what pdserve's simulator's
    ``WindowTracker`` counts as requests are routed (the same object reads the per-scrape peak and the burst gauge)."""

    def __init__(self, arrivals: list[tuple[float, int]]) -> None:
        self.pending = deque(sorted(arrivals))
        self.tracker = WindowTracker(None)  # type: ignore[arg-type]  # only its router side is used
        self.routed = 0

    def advance(self, now: float) -> None:
        while self.pending and self.pending[0][0] <= now:
            t, tokens = self.pending.popleft()
            self.tracker.arrived(SimpleNamespace(arrival_s=t, input_tokens=tokens))  # type: ignore[arg-type]
            self.routed += 1

    def signals(self, now: float, interval_s: float) -> RouterWindow:
        """The router's counters at the last scrape before ``now``: the simulator's own read."""
        return self.tracker.router_window(self.tracker.last_scrape(now), interval_s)


@dataclass
class EngineView:
    """The engines' side from Dynamo's snapshots: completions over the rate window (its per-tick traffic windows,
    merged), each worker's last forward-pass metrics (kept until it reports again, dropped when it leaves)."""

    kv_tokens_per_worker: float
    window_s: float = RATE_WINDOW_S
    traffic: deque = field(default_factory=deque)  # (duration s, traffic dict) of the last ticks
    fpm: dict[str, dict[tuple[int, int], dict]] = field(default_factory=lambda: {"prefill": {}, "decode": {}})

    def update(self, snapshot: dict[str, Any]) -> None:
        t = snapshot.get("traffic")
        if t is not None and t.get("duration_s", 0) > 0:
            self.traffic.append(t)
            while sum(x["duration_s"] for x in self.traffic) - self.traffic[0]["duration_s"] >= self.window_s - 1e-9:
                self.traffic.popleft()
        for role in ("prefill", "decode"):
            cache = self.fpm[role]
            for f in snapshot.get(f"{role}_fpm_snapshots", []):
                cache[(f["worker_id"], f.get("dp_rank", 0))] = f
            alive = set(snapshot[f"active_{role}_ids"]) | set(snapshot.get(f"draining_{role}_ids", []))
            for key in [k for k in cache if k[0] not in alive]:
                del cache[key]

    def completions(self) -> dict[str, Any]:
        """Request rate, means and latencies of the requests completed in the rate window (None: none completed)."""
        dur = sum(t["duration_s"] for t in self.traffic)
        n = sum(t.get("shape_count", 0) for t in self.traffic)

        def mean(key: str, count: str, scale: float = 1.0) -> float | None:
            c = sum(t.get(count, 0) for t in self.traffic)
            return sum(t[key] * t.get(count, 0) for t in self.traffic) / c * scale if c else None

        hit_n = sum(t.get("hit_rate_count", 0) for t in self.traffic)
        return {"request_rate": n / dur if dur > 0 else 0.0, "completions": n,
                "mean_isl": mean("avg_isl", "shape_count"), "mean_osl": mean("avg_osl", "shape_count"),
                "ttft": mean("avg_ttft_ms", "ttft_count", 1e-3), "itl": mean("avg_itl_ms", "itl_count", 1e-3),
                "hit": (sum(t["avg_kv_hit_rate"] * t["hit_rate_count"] for t in self.traffic) / hit_n) if hit_n else None}

    def pool(self, snapshot: dict[str, Any], role: str, hit: float | None) -> PoolMetrics:
        ready, starting, draining = pool_counts(snapshot, role)
        fs = list(self.fpm[role].values())
        running = sum(f.get("num_prefill_requests", 0) if role == "prefill" else f.get("num_decode_requests", 0)
                      for f in fs)
        waiting = sum(f.get("num_queued_prefill", 0) + f.get("num_queued_decode", 0) for f in fs)
        kv = [f.get("sum_decode_kv_tokens", 0) / self.kv_tokens_per_worker for f in fs] if role == "decode" else []
        return PoolMetrics(ready=ready, starting=starting, draining=draining, running=int(running), waiting=int(waiting),
                           kv_usage=min(sum(kv) / len(kv), 1.0) if kv else 0.0, prefix_hit_ratio=hit)


def window_metrics(now: float, interval_s: float, router: RouterView, engines: EngineView,
                   snapshot: dict[str, Any]) -> WindowMetrics:
    """What pdserve's planner reads at ``now``, from the router's signals and Dynamo's engine snapshot."""
    router.advance(now)
    sig = router.signals(now, interval_s)
    done = engines.completions()
    prefill, decode = engines.pool(snapshot, "prefill", done["hit"]), engines.pool(snapshot, "decode", None)
    return WindowMetrics(
        start_s=sig.start_s, end_s=sig.end_s, arrivals=sig.arrivals, request_rate=done["request_rate"],
        mean_isl=done["mean_isl"], mean_osl=done["mean_osl"], completions=done["completions"],
        ttft_p50=done["ttft"], ttft_p90=None, itl_p50=done["itl"], itl_p90=None, prefill=prefill, decode=decode,
        prompt_tokens_rate=sig.prompt_tokens_rate,
        inflight=prefill.running + prefill.waiting + decode.running + decode.waiting,
        prompt_tokens_peak_rate=sig.prompt_tokens_peak_rate, prompt_tokens_burst=sig.prompt_tokens_burst,
        prefill_ttft_mean=None, prefill_ttft_p90=None)


@dataclass
class _Ticking:
    """Ticks at the first arrival plus each interval while requests arrive or any worker is busy."""

    t0: float
    interval_s: float
    last_arrival_s: float
    ticks: list[dict[str, Any]] = field(default_factory=list)
    _n: int = 0

    def initial_tick_ms(self) -> float:
        return (self.t0 + self.interval_s) * 1000.0

    def _next(self, now: float, idle: bool) -> float | None:
        self._n += 1
        return None if now > self.last_arrival_s and idle else (self.t0 + (self._n + 1) * self.interval_s) * 1000.0


@dataclass
class PlannerDriver(_Ticking):
    """pdserve's planner (a ``PlannerAutoscaler``) as the replay's scaling policy, closed loop."""

    autoscaler: Any = None
    router: RouterView | None = None
    engines: EngineView | None = None

    def on_tick(self, snapshot: dict[str, Any]) -> dict[str, Any]:
        assert self.router is not None and self.engines is not None and self.autoscaler is not None
        now = snapshot["now_ms"] / 1000.0
        self.engines.update(snapshot)
        window = window_metrics(now, self.interval_s, self.router, self.engines, snapshot)
        current = PoolSizes(prefill=int(snapshot.get("non_draining_prefill_count", window.prefill.ready)),
                            decode=int(snapshot.get("non_draining_decode_count", window.decode.ready)))
        want = self.autoscaler.on_tick(now, window, current)
        self.ticks.append(tick_record(now, snapshot) | {"want": [want.prefill, want.decode]})
        return {"target_prefill": want.prefill if want.prefill != current.prefill else None,
                "target_decode": want.decode if want.decode != current.decode else None,
                "next_tick_ms": self._next(now, _idle(snapshot, self.engines.fpm))}


@dataclass
class ScheduleDriver(_Ticking):
    """A schedule, open loop: at each tick the sizes of its last step at or before the tick (times from t0)."""

    steps: list[tuple[float, int, int]] = field(default_factory=list)
    engines: EngineView = field(default_factory=lambda: EngineView(1.0))  # for when the workers are idle

    def want(self, rel_s: float) -> tuple[int, int] | None:
        i = bisect.bisect_right([s[0] for s in self.steps], rel_s + 1e-6) - 1
        return (self.steps[i][1], self.steps[i][2]) if i >= 0 else None

    def on_tick(self, snapshot: dict[str, Any]) -> dict[str, Any]:
        now = snapshot["now_ms"] / 1000.0
        self.engines.update(snapshot)
        want = self.want(now - self.t0)
        self.ticks.append(tick_record(now, snapshot))
        cur = (snapshot.get("non_draining_prefill_count"), snapshot.get("non_draining_decode_count"))
        return {"target_prefill": want[0] if want and want[0] != cur[0] else None,
                "target_decode": want[1] if want and want[1] != cur[1] else None,
                "next_tick_ms": self._next(now, _idle(snapshot, self.engines.fpm))}
