"""The router's I/O shell around the pure core (pdserve.router.core): the aiohttp app,
one request's HTTP flow (handler, upstream retries), and the long-lived state that joins
the scheduler to the live worker pool. No routing decision is made here.
"""
