"""Kinds of the simulator's heap events (pdserve.sim.simulator), shared with pdserve.sim.coast."""

KICK, STEP_DONE, KV_DONE, READY, TICK, SCRAPE, DISPATCH, HANDOFF, KV_EVENTS, COAST_DONE = range(10)
