"""Deterministic discrete-event simulator of pdserve deployments.

It drives the production cores on a virtual clock: the worker's engine model
(``pdserve.worker.engine`` / ``perf``) for every instance and the router's
policies (``pdserve.router.policies``) for every placement.

Entry points (import from the submodules; this package imports nothing eagerly):

* ``pdserve.sim.traces.load_trace(path, ...) -> Trace`` — Azure CSV, Mooncake
  JSONL, length CSV + seeded arrivals; ``Trace.scaled(rate_scale, time_scale)``,
  ``Trace.head(n)``; ``synthetic_trace(...)``.
* ``pdserve.sim.config.SimConfig`` — topology (colocated / chunked / disagg xPyD),
  profiles and TP per pool, policies, KV link, SLOs; ``parse_layout("2p1d")``.
* ``pdserve.sim.simulator.run_simulation(trace, config, *, rate_scale=1.0,
  autoscaler=None, progress=None) -> SimResult`` (``pdserve.sim.outcome``).
* ``pdserve.sim.autoscale`` — the autoscaler hook: ``Autoscaler``,
  ``WindowMetrics``, ``PoolMetrics``, ``PoolSizes``, ``ScalingEvent``.
* ``pdserve.sim.sweep.goodput_of(trace, config) -> Compared`` and
  ``pdserve.sim.goodput.search_goodput`` — DistServe-style goodput.
* ``pdserve.sim.advise.advise(trace, base, gpus) -> Advice`` — the advisor.
* CLIs: ``pdserve sim`` (``pdserve.sim.cli``), ``pdserve advise`` (``pdserve.sim.advise_cli``).
"""
