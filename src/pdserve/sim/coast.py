"""Coasting: an engine's plain decode steps in flight as one event instead of one event each.

Most engine steps of a replay are *plain* decode steps (pdserve.worker.decode_run): they
change only their own requests' progress, which no other part of the simulation reads
(the router's views, its index and the policies' ledgers see queue lengths, KV usage
and cached blocks, which a plain step leaves as they were). Handled one event at a
time, each costs a heap push and pop, a StepOutput and a TokenEvent per request.

When an engine is about to start a step and its next ``k`` steps are plain, the
simulator plans them (their end times; pdserve.worker.decode_run.plan; at most
``MAX_STEPS``, up to the first that ends at or after the gate of a request waiting in the
engine's modelled front-end, and for a colocated engine up to the first that ends at or
after the next arrival, which may be routed to it) and pushes one ``COAST_DONE`` event at
the end of the last. Until then nothing about the engine that
anyone reads changes, so nothing needs its steps done, except:

* a request reaching the engine (a dispatch, a KV transfer landing; ``reach``): when the
  engine models a front-end, the request waits there past the steps in flight, so the coast
  only gets cut at the first step that ends at or after its gate; otherwise ``materialize``
  first does the steps that end before that event (in the loop's order: an arrival goes
  before a step ending at its instant; heap events compare (time, time pushed, seq), and
  a planned step counts as pushed when the step before it ended), then starts the one in
  flight at that instant as an ordinary step with its own heap event, as the
  step-by-step loop would have it;
* the end of the coast (``end_coast``): its steps are done and the last is handled as an
  ordinary step end (its tokens, the next step);
* the end of the run at ``max_sim_time_s`` (``settle_coasts``): steps started by then
  have run, those ended by then count.

The inter-token gaps of the coasted steps are the same differences of the same times,
appended in another order (the summary sorts them). The heap entry of a coast's last
step, and of a step started by ``materialize``, carries the push time the step-by-step
loop would give it (the end of the step before), so it sorts among same-instant events as
it would there; only an event pushed at exactly that instant and due at exactly the same
instant sorts by sequence number instead. ``Simulation(coast_decode=False)`` turns
coasting off; tests/sim/test_coast.py checks that both give identical results.
"""

from __future__ import annotations

import heapq
import math
from operator import sub
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING

from pdserve.sim.events import COAST_DONE, STEP_DONE
from pdserve.worker.decode_run import advance, plan

if TYPE_CHECKING:
    from pdserve.sim.instance import Instance
    from pdserve.sim.simulator import Simulation

# Steps planned at once: a request reaching the engine cancels the rest of the plan, so a long plan
# wastes its cost computations; a short one costs an event per MAX_STEPS steps.
MAX_STEPS = 128


@dataclass(slots=True)
class Coast:
    inst: Instance
    start: float  # when its first step started
    ends: list[float]  # end of each planned step
    entry: tuple[float, float, int, int, object]  # its COAST_DONE heap entry


def start_coast(sim: Simulation, inst: Instance, k: int) -> None:
    """Plan the engine's next ``k`` (> 1) plain steps from now and push the end of the last."""
    now = sim.now
    # The next arrival may well be routed here: a plan past it would likely be cut short there. (Where
    # the plan ends changes nothing but how many steps one event carries.)
    until = sim.next_arrival_s if inst.pool == "colocated" else math.inf
    ends = plan(inst.engine, now, min(k, MAX_STEPS), until, sim.step_host_s)
    sim.seq += 1
    c = Coast(inst, now, ends, (0.0, 0.0, 0, 0, None))
    # pushed, in the step-by-step loop, when the step before it ended
    c.entry = (ends[-1], ends[-2] if len(ends) > 1 else now, sim.seq, COAST_DONE, c)
    heapq.heappush(sim.heap, c.entry)
    inst.coast = c
    inst.busy = True


def _run(sim: Simulation, c: Coast, n: int) -> float:
    """Do the first ``n`` planned steps (their gaps, the engine's state); returns when the next starts."""
    if n == 0:
        return c.start
    ends = c.ends
    last = ends[n - 1]
    eng = c.inst.engine
    states = sim.states
    itl = sim.itl
    first = ends[0]
    for req in eng.running:
        st = states[req.request_id]
        itl.append(first - st.last_token_s)  # as Simulation._on_step_done measures a gap
        st.last_token_s = last
    if n > 1:
        # every request of the batch has the same gap at each later step (the summary sorts the samples):
        # recorded once, counted len(eng.running) times (Simulation.itl_repeats)
        seqs = len(eng.running)
        if seqs == 1:
            itl.extend(map(sub, islice(ends, 1, n), ends))
        else:
            rep = sim.itl_repeats.get(seqs)
            if rep is None:
                rep = sim.itl_repeats[seqs] = []
            rep.extend(map(sub, islice(ends, 1, n), ends))
    advance(eng, n)
    sim.coasted_steps += n
    if last > sim.coasted_until:
        sim.coasted_until = last
    return last


def end_coast(sim: Simulation, c: Coast) -> None:
    """The coast's last step has ended (``sim.now``): all its steps are done, and the engine goes on as
    ``Simulation._on_step_done`` would after a plain step (which has no KV events, first tokens or finishes:
    only the gaps that ``_run`` records)."""
    inst = c.inst
    inst.coast = None
    k = len(c.ends)
    inst.step_start = c.ends[-2] if k > 1 else c.start
    _run(sim, c, k)
    sim.steps += k
    sim.coasted_steps -= 1  # the last one is this event's own step
    inst.busy = False
    if not inst.kicked:  # a plain step leaves its requests running: the engine has work
        sim._step(inst)


def materialize(sim: Simulation, inst: Instance) -> None:
    """Something is about to reach the engine: do the planned steps that end before the current event and
    start the one in flight then as an ordinary step."""
    c = inst.coast
    assert c is not None
    ends = c.ends
    k = len(ends)
    cur = sim.current
    t = sim.now
    if cur is None:  # an arrival goes before any event at its instant
        done = bisect_left(ends, t, 0, k - 1)
    else:
        done = bisect_left(ends, t, 0, k - 1)
        _, pushed, seq = cur[0], cur[1], cur[2]
        while done < k - 1 and ends[done] == t and ((ends[done - 1] if done else c.start), c.entry[2]) < (pushed, seq):
            done += 1
    inst.coast = None
    sim.heap.remove(c.entry)
    heapq.heapify(sim.heap)
    start = _run(sim, c, done)
    out = inst.engine.step(start)  # the step in flight (plain, as planned)
    sim.steps += done + 1
    inst.step_start = start
    inst.step_out = out
    sim.seq += 1
    heapq.heappush(sim.heap, (start + out.duration + sim.step_host_s, start, sim.seq, STEP_DONE, inst))


def reach(sim: Simulation, inst: Instance) -> None:
    """A request is about to reach the coasting engine (``Instance.add`` at ``sim.now``).

    With a modelled front-end it waits there until ``now + frontend_latency_s`` (the gate, later than now),
    so the planned steps that start before the gate stay plain (admission skips a gated request, as
    ``plain_steps`` allows): the coast goes on, cut at the first step that ends at or after the gate (the
    step after it may admit the request), instead of being turned back into ordinary steps now. Without
    one, ``materialize``."""
    now = sim.now
    gate = now + inst.engine.config.frontend_latency_s  # as Engine.add_request computes it
    if not gate > now:
        materialize(sim, inst)
        return
    c = inst.coast
    assert c is not None
    ends = c.ends
    k = len(ends)
    cut = bisect_left(ends, gate, 0, k - 1)
    if cut == k - 1:
        return  # the plan already ends there or before
    del ends[cut + 1:]
    sim.heap.remove(c.entry)
    heapq.heapify(sim.heap)
    sim.seq += 1
    c.entry = (ends[-1], ends[-2] if cut else c.start, sim.seq, COAST_DONE, c)
    heapq.heappush(sim.heap, c.entry)


def settle_coasts(sim: Simulation, limit: float) -> None:
    """The run stopped with coasts in flight (only at ``max_sim_time_s``): steps that had started by the
    limit have run, the gaps of those that had ended count."""
    for inst in sim.all_instances:
        c = inst.coast
        if c is None:
            continue
        inst.coast = None
        sim.heap.remove(c.entry)
        done = bisect_right(c.ends, limit, 0, len(c.ends) - 1)
        start = _run(sim, c, done)
        inst.engine.step(start)
        sim.steps += done + 1
    heapq.heapify(sim.heap)
