"""Coasting (pdserve.sim.coast) is a speed-up only: with it on and off, every result is identical.

Each case replays a workload both ways and compares every request record, the summary,
step and preemption counts, end time, GPU-seconds and per-instance counters; inter-token
gaps are compared as a multiset (the summary sorts them). The cases cover what bounds a
coast: arrivals (also many at the same instant), P/D hand-offs, HTTP hops, scrapes on a
0.5 s grid with arrivals on the same grid, exact views, the clock limit and an autoscaler.
"""

from __future__ import annotations

import random
from dataclasses import astuple, dataclass, field
from pathlib import Path

import pytest

from pdserve.sim import instance
from pdserve.router.core.spec import RoutingSpec
from pdserve.sim.autoscale import PoolSizes, WindowMetrics
from pdserve.sim.config import SimConfig, parse_layout
from pdserve.sim.metrics import sorted_samples
from pdserve.sim.simulator import Simulation
from pdserve.sim.traces import Trace, from_rows, load_trace, synthetic_trace
from pdserve.worker.perf import PerfModel, PerfProfile

MOONCAKE = Path(__file__).resolve().parents[2] / "bench/sim/data/mooncake_conv_excerpt.jsonl"


@dataclass
class Scripted:
    plan: dict[int, PoolSizes]
    interval_s: float = 5.0
    ticks: int = field(default=0)

    def on_tick(self, now: float, window: WindowMetrics, current: PoolSizes) -> PoolSizes:
        self.ticks += 1
        return self.plan.get(self.ticks, current)


def _gridded(n: int, seed: int) -> Trace:
    """Arrivals on the 0.5 s scrape grid, several at once, identical lengths: many exact ties."""
    rnd = random.Random(seed)
    rows = [(0.5 * rnd.randrange(0, 40), rnd.randint(500, 700), rnd.choice((37, 83)), ()) for _ in range(n)]
    return from_rows(rows, format="synthetic", source=f"gridded {n} {seed}")


def _digest(trace: Trace, cfg: SimConfig, *, coast: bool, autoscale: bool = False) -> tuple[object, int]:
    auto = Scripted({2: PoolSizes(2, 3), 5: PoolSizes(1, 1)} if cfg.topology == "disagg" else
                    {2: PoolSizes(0, 3), 5: PoolSizes(0, 1)}) if autoscale else None
    sim = Simulation(trace, cfg, autoscaler=auto, coast_decode=coast)
    res = sim.run()
    return (
        [astuple(r) for r in res.records], res.summary.as_dict(), res.steps, res.preemptions, res.end_time_s,
        res.gpu_seconds, res.kv_recomputes, res.rejected, res.instances,
        [(e.time_s, e.before, e.after, e.note) for e in res.scaling_events], sorted_samples(sim.itl, sim.itl_repeats).tolist(),
    ), sim.coasted_steps


CASES: dict[str, tuple[str, dict[str, object], str]] = {
    "chunked2": ("chunked:2", {"policy": "kv_aware"}, "synthetic"),
    "colocated3-least-loaded": ("colocated:3", {"policy": "least_loaded"}, "synthetic"),
    "chunked4-mooncake": ("chunked:4", {"policy": "kv_aware", "block_size": 512}, "mooncake"),
    "2p2d-mooncake": ("2p2d", {"policy": "kv_aware", "block_size": 512}, "mooncake"),
    "1p2d-hops": ("1p2d", {"ingress_s": 0.003, "pd_handoff_s": 0.002, "step_host_s": 0.0004}, "synthetic"),
    "2p1d-exact-views": ("2p1d", {"exact_views": True}, "synthetic"),
    "chunked3-no-scrape-no-lag": ("chunked:3", {"view_refresh_s": 0.0, "kv_event_lag_s": 0.0}, "synthetic"),
    "chunked3-clock-limit": ("chunked:3", {"max_sim_time_s": 7.3}, "synthetic"),
    "chunked2-gridded": ("chunked:2", {"policy": "round_robin", "block_size": 16}, "gridded"),
    "1p1d-gridded": ("1p1d", {"block_size": 16}, "gridded"),
    "chunked2-short-context": ("chunked:2", {"max_model_len": 1024, "block_size": 16}, "synthetic"),
}


def _trace(kind: str) -> Trace:
    if kind == "mooncake":
        return load_trace(MOONCAKE).head(150)
    if kind == "gridded":
        return _gridded(120, 3)
    return synthetic_trace(150, 8.0, (50, 900), (2, 300), seed=5)


@pytest.mark.parametrize("case", sorted(CASES))
def test_coasting_changes_no_result(case: str) -> None:
    layout, extra, kind = CASES[case]
    trace = _trace(kind)
    cfg = SimConfig(**parse_layout(layout), profile="llama-3.1-8b-h100", **extra)  # type: ignore[arg-type]
    slow, none = _digest(trace, cfg, coast=False)
    fast, coasted = _digest(trace, cfg, coast=True)
    assert none == 0
    assert coasted > 0.1 * slow[2]  # type: ignore[index,operator]  # the fast path ran, on many steps
    assert fast == slow


@pytest.mark.parametrize("layout", ["chunked:2", "1p2d"])
def test_coasting_with_an_autoscaler_changes_no_result(layout: str) -> None:
    trace = synthetic_trace(200, 6.0, (100, 900), (20, 200), seed=9)
    cfg = SimConfig(**parse_layout(layout), profile="llama-3.1-8b-h100", startup_delay_s=3.0)
    slow, _ = _digest(trace, cfg, coast=False, autoscale=True)
    fast, coasted = _digest(trace, cfg, coast=True, autoscale=True)
    assert coasted > 0
    assert fast == slow


class _GridPerf(PerfModel):
    """Every step lasts 1/16 s: step ends fall on arrivals (0.5 s grid), scrapes and each other."""

    def step_time_aggregate(self, new_tokens: int, attn_pairs: float, kv_read_tokens: int, n_seqs: int) -> float:
        return 0.0625 if new_tokens else 0.0


# layout, config, the engines' front-end latency: 0 (requests start on the grid too) or a whole number of steps
# (a request reaching a coasting engine waits in the front-end until exactly the end of one of its steps)
SAME_INSTANT: dict[str, tuple[str, dict[str, object], float]] = {
    "chunked3": ("chunked:3", {}, 0.0),
    "colocated2-hop": ("colocated:2", {"ingress_s": 0.125}, 0.0),  # dispatches in the middle of a plan
    "1p2d": ("1p2d", {}, 0.0),
    "1p2d-local": ("1p2d", {"routing": RoutingSpec(disagg_threshold_tokens=10**6)}, 0.0),  # arrivals go to decode
    "chunked3-frontend": ("chunked:3", {}, 0.125),
    "1p2d-frontend": ("1p2d", {}, 0.1875),
    "1p2d-local-frontend": ("1p2d", {"routing": RoutingSpec(disagg_threshold_tokens=10**6)}, 0.0625),
}


@pytest.mark.parametrize("case", sorted(SAME_INSTANT))
def test_coasting_keeps_the_order_of_events_at_the_same_instant(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    layout, extra, frontend_s = SAME_INSTANT[case]
    monkeypatch.setattr("pdserve.sim.instance.PerfModel", _GridPerf)
    real = instance.resolve_profile

    def on_grid(name: str, tp: int | None) -> PerfProfile:
        p = real(name, tp)
        return p.model_copy(update={"efficiency": p.efficiency.model_copy(update={"frontend_latency_s": frontend_s})})

    monkeypatch.setattr(instance, "resolve_profile", on_grid)
    trace = _gridded(150, 7)
    cfg = SimConfig(**parse_layout(layout), profile="llama-3.1-8b-h100", block_size=16, kv_event_lag_s=0.125,
                    max_num_seqs=6, **extra)  # type: ignore[arg-type]
    slow, _ = _digest(trace, cfg, coast=False)
    fast, coasted = _digest(trace, cfg, coast=True)
    assert coasted > 0
    assert fast == slow
