"""`pdserve demo`: the whole loop on one machine, no cluster.

Mock prefill and decode workers run as processes in a pool the planner sizes, the
router finds them through its discovery file, and an excerpt of a public trace is
replayed in compressed time against the router. A live view shows load, latency
against the SLOs and the pools; a report folder keeps the summary and the plots.
"""
