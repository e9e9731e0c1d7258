"""When the autoscaler ticks, and applying its decision to the simulated pools (see pdserve.sim.autoscale)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pdserve.sim.autoscale import PoolSizes, ScalingEvent
from pdserve.sim.config import SimConfigError
from pdserve.sim.instance import State

if TYPE_CHECKING:
    from pdserve.sim.simulator import Simulation


def first_tick(sim: Simulation) -> tuple[float, float | None]:
    """When the autoscaler first ticks (then every interval), and the planner's metric-scrape grid origin to go with
    it: ``SimConfig.first_tick_s`` with the origin one interval before it (so that a set first tick keeps the
    scrapes' phase to the ticks as the default one does to the first arrival), else one interval after the first
    arrival with the windows' origin as it is (set by the first arrival). Reads the simulation, changes nothing:
    the caller sets the origin."""
    assert sim.autoscaler is not None
    interval = sim.autoscaler.interval_s
    if not (interval > 0):
        raise SimConfigError(f"autoscaler.interval_s must be > 0, got {interval!r}")
    first = sim.cfg.first_tick_s
    if first is None:
        reqs = sim.trace.requests
        return (reqs[0].arrival_s if reqs else 0.0) + interval, sim.windows.origin
    return first, first - interval


def apply_tick(sim: Simulation) -> None:
    """Call the autoscaler with the last window and start / remove instances."""
    assert sim.autoscaler is not None
    now = sim.now
    current = sim.windows.pool_sizes()
    window = sim.windows.snapshot(now, sim.autoscaler.interval_s)
    want = sim.autoscaler.on_tick(now, window, current)
    if not isinstance(want, PoolSizes):
        raise TypeError(f"autoscaler.on_tick must return PoolSizes, got {type(want).__name__}")
    notes: list[str] = []
    pools = ("prefill", "decode") if sim.disagg else ("colocated",)
    for pool in pools:
        have = current.prefill if pool == "prefill" else current.decode
        target = want.prefill if pool == "prefill" else want.decode
        if target > have:
            for _ in range(target - have):
                inst = sim.new_instance(pool, now + sim.cfg.startup_delay_s)
                notes.append(f"+{inst.instance_id} (ready at {inst.ready_at:.1f} s)")
        elif target < have:
            notes += remove_instances(sim, pool, have - target)
    applied = want if sim.disagg else PoolSizes(0, want.decode)
    sim.scaling_events.append(ScalingEvent(now, current, applied, ", ".join(notes)))


def remove_instances(sim: Simulation, pool: str, n: int) -> list[str]:
    """Starting instances go first (nothing to drain), then the newest ready ones drain."""
    live = [i for i in sim.instances[pool] if i.state in (State.STARTING, State.READY)]
    order = [i for i in reversed(live) if i.state is State.STARTING]
    order += [i for i in reversed(live) if i.state is State.READY]
    notes = []
    for inst in order[:n]:
        if inst.state is State.STARTING:
            inst.state = State.RELEASED
            inst.released_at = sim.now
        else:
            inst.state = State.DRAINING
            sim.maybe_release(inst)
        notes.append(f"-{inst.instance_id}")
    return notes
