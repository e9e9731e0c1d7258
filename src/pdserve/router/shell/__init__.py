"""The router's I/O shell around the pure core (pdserve.router.core): the aiohttp app,
one request's HTTP flow (handler, upstream retries, relay, the HTTP/1.1 client, SSE),
the live worker pool (workers, discovery, KV-event subscribers), start-up (cli, config,
tokenizer loading, supervisor for --processes) and metrics. No routing decision is made here.
"""
