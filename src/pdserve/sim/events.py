"""Kinds of the simulator's heap events (pdserve.sim.simulator), shared with pdserve.sim.coast."""

KICK, STEP_DONE, KV_DONE, READY, TICK, SCRAPE, DISPATCH, HANDOFF, KV_EVENTS = range(9)

# Events whose handling can add work to a decode-capable engine (a dispatch, a KV transfer landing, a new
# instance, an autoscaler tick) or lead to one (a hand-off) whatever engine they concern. A prefill
# engine's STEP_DONE and KICK lead to one too (a finished prefill hands its request to a decode engine).
REACHES_ENGINES = frozenset({KV_DONE, READY, TICK, DISPATCH, HANDOFF})
