"""The router's pure core: the routing spec, the policy set built from it, the route
scheduler, admission control and P/D request rewriting. No I/O and no clock reads:
callers pass ``now``. The live router (pdserve.router's I/O shell: handler, upstream,
relay) and the simulator (pdserve.sim) both call it, so they decide alike.
"""
