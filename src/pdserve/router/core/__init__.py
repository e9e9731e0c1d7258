"""The router's pure core: the routing spec, the policy set built from it, the route
scheduler, admission control, P/D request rewriting, the KV and approximate prefix
indexes with their block keys, and front-door request validation. No I/O and no clock
reads: callers pass ``now``. The live router (pdserve.router.shell: handler, upstream,
relay) and the simulator (pdserve.sim) both call it, so they decide alike.
"""
