"""A prefill pool queues less than its replicas would alone: the profile's one-replica latency read for a pool.

A capacity profile is one replica's (a sweep against one endpoint, or the engine model's M/M/1 wait), and a pool
of ``c`` replicas was sized as ``c`` of those. But the router sends each request to the replica with the least
queued work, so a pool behaves more like one queue served by ``c`` replicas (M/M/c) than like ``c`` independent
queues: at the same per-replica load its waits are shorter, and the more replicas the shorter. Measured in
``pdserve.sim`` (70B TP4, one pool under Poisson arrivals with Azure 2023 conversation's prompt lengths, p99 of the
prefill wait at 85 % of the replicas' flat-out rate): 2 replicas 0.70x the lone replica's wait, 3 replicas 0.42x,
5 replicas 0.30x; M/M/c (a central queue, what routing on perfect knowledge could reach) says 0.49x, 0.32x,
0.19x. The router routes on estimates, one request at a time and into batches, so it falls between the two:
the pool's wait here is M/M/c's ratio to M/M/1 raised to ``DAMPING`` (0.5: 0.70x, 0.57x, 0.44x at 85 %), on the
conservative side of every measured pool size and load but one (``bench/planner/pool_queueing.py`` replays the
comparison and records it).

The ratio is applied to the profile's own curve, not to a formula's: a pool of ``c`` at per-replica utilisation
``rho`` is read off the one-replica curve at the *equivalent* utilisation ``rho'`` whose M/M/1 wait equals the
pool's. The profile's measured shape (its front end, its prefill-alone time, its batching) is kept; only where on
it the pool sits moves. Pure arithmetic, no state.
"""

from __future__ import annotations

import math

# The pool's wait over the lone replica's is M/M/c's ratio to the power DAMPING: 1 would be M/M/c itself (a
# central queue), 0 the independent replicas the planner assumed before.
DAMPING = 0.5


def erlang_c(c: int, rho: float) -> float:
    """P(wait > 0) in M/M/c with each server at utilisation ``rho`` (< 1), by Erlang B's stable recursion."""
    if c < 1:
        raise ValueError(f"servers must be >= 1, got {c}")
    if not (0 <= rho < 1):
        raise ValueError(f"utilisation must be in [0, 1), got {rho}")
    a = c * rho
    b = 1.0
    for k in range(1, c + 1):
        b = a * b / (k + a * b)
    return b / (1 - rho * (1 - b))


def _tail_wait(c: int, rho: float, q: float) -> float:
    """M/M/c's q-quantile wait in units of the mean service time: ln(C / (1 - q)) / (c (1 - rho)), 0 below it."""
    p_wait = erlang_c(c, rho) if rho > 0 else 0.0
    return max(math.log(p_wait / (1 - q)), 0.0) / (c * (1 - rho)) if p_wait > 0 else 0.0  # (C underflows to 0)


def tail_utilization(c: int, rho: float, q: float, damping: float = DAMPING) -> float:
    """The lone replica's utilisation whose q-quantile wait is what a pool of ``c`` at ``rho`` waits (damped)."""
    if c == 1 or rho <= 0:
        return rho
    lone = _tail_wait(1, rho, q)
    if lone <= 0:
        return rho  # no tail wait even alone: nothing to shorten
    want = lone * (_tail_wait(c, rho, q) / lone) ** damping
    lo, hi = 0.0, rho  # _tail_wait(1, .) rises with the utilisation: bisect
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _tail_wait(1, mid, q) < want else (lo, mid)
    return hi


def mean_utilization(c: int, rho: float, damping: float = DAMPING) -> float:
    """The lone replica's utilisation whose mean wait is what a pool of ``c`` at ``rho`` waits on average (damped):
    M/M/c's mean wait over M/M/1's is C / (c rho), and M/M/1's mean wait rho / (1 - rho) inverts in closed form."""
    if c == 1 or rho <= 0:
        return rho
    y = rho / (1 - rho) * (erlang_c(c, rho) / (c * rho)) ** damping
    return y / (1 + y)
