"""Coasting: an engine's plain decode steps run inside one event instead of one event each.

Most engine steps of a replay are *plain* decode steps (pdserve.worker.decode_run): they
change only their own requests' progress, which no other part of the simulation reads
(the router's views, its index and the policies' ledgers see queue lengths, KV usage
and cached blocks, which a plain step leaves as they were). Handled one event at a
time, each costs a heap push and pop, a StepOutput and a TokenEvent per request.

When an engine's step ends at ``t0`` and its next steps are plain, the simulator runs
here, at once, every one of them that ends before anything could reach this engine:
the next arrival and the earliest pending event that can add work to an engine (see
pdserve.sim.events.REACHES_ENGINES; in P/D also any prefill engine's next step, whose
finished prefill moves a request to a decode engine). Nothing that happens before that
bound touches this engine or reads what these steps change, so running them early gives
the state, inter-token gaps and step count the one-event-per-step loop gives. The step
after the run is kept plain as well and goes to the heap as usual (``Simulation._step``),
so the engine's pool changes (allocations, cached blocks, KV events) and finishes still
happen at their own events, in the loop's order.

That last step's heap entry is pushed earlier than the step-by-step loop would push it,
so among events at the very same instant it may sort before events pushed meanwhile.
The only such event that can observe the step is a /metrics scrape (it reads KV usage,
which the step after it may change): a run whose last step would end exactly at the
instant of a scrape pushed during the run is not taken. ``Simulation(coast_decode=False)``
turns coasting off; tests/sim/test_coast.py checks that both give identical results.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from pdserve.sim.events import KICK, REACHES_ENGINES, SCRAPE, STEP_DONE
from pdserve.worker.decode_run import advance, plan

if TYPE_CHECKING:
    from pdserve.sim.instance import Instance
    from pdserve.sim.simulator import Simulation


def _bound(sim: Simulation) -> float:
    """Earliest time at which anything can add work to an engine or read its requests' progress."""
    b = sim.next_arrival_s
    for t, _, kind, obj in sim.heap:
        if t < b and (kind in REACHES_ENGINES or (
                (kind == STEP_DONE or kind == KICK) and obj.pool == "prefill")):  # type: ignore[attr-defined]
            b = t
    limit = sim.cfg.max_sim_time_s
    if limit is not None and limit < b:
        b = limit  # a step past the limit is never handled
    return b


def _scrape_at(sim: Simulation, last: float, t: float) -> bool:
    """Whether a scrape handled before ``last`` schedules the next one exactly at ``t``."""
    if not sim.router_view.scraping:
        return False
    refresh = sim.cfg.view_refresh_s
    s = min((e[0] for e in sim.heap if e[2] == SCRAPE), default=math.inf)
    while s <= last:
        s = s + refresh  # as Simulation._on_scrape schedules it
        if s == t:
            return True
    return False


def coast(sim: Simulation, inst: Instance, k: int) -> float:
    """Run the engine's next plain steps (``k > 1`` of them are plain) that end before anything can reach
    it, leaving the last plain one to the heap. Returns when the engine's next step starts."""
    now = sim.now
    eng = inst.engine
    bound = _bound(sim)
    ends = plan(eng, now, k, bound, sim.step_host_s)
    # every end but possibly the last is before the bound; the step after the run must be plain too
    ran = min(len(ends) - 1 if not ends[-1] < bound else len(ends), k - 1)
    if ran == 0:
        return now
    last = ends[ran - 1]
    if _scrape_at(sim, last, ends[ran]):
        return now
    running = eng.running
    states = sim.states
    itl = sim.itl
    first = ends[0]
    for req in running:
        st = states[req.request_id]
        itl.append(first - st.last_token_s)  # as Simulation._on_step_done measures a gap
        st.last_token_s = last
    prev = first
    n = len(running)
    for t in ends[1:ran]:
        itl.fromlist([t - prev] * n)
        prev = t
    advance(eng, ran)
    sim.steps += ran
    sim.coasted_steps += ran
    if last > sim.coasted_until:
        sim.coasted_until = last
    return last
