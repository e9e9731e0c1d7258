"""When a release may skip the scale-down stabilisation: the pool left carries the load with a margin.

The stabilisation (act on the highest recommendation of the last ``scale_down_stabilization_s``) insures a release
against a rise that comes back before a replacement could serve: a replica given up now and asked for again is
ready one start-up later. A release the load clears by a margin needs no such insurance. The margin is either
fixed (``PolicyConfig.scale_down_clear_fraction``: the pool's largest sizing term at most ``k x F``) or learnt from
the traffic itself (``scale_down_clear_quantile``): the q-quantile of how far the arrival rate has risen within a
start-up plus an interval of any tick of its history, so that a release clears only where the pool left would
still carry the load after such a rise, and (``scale_down_clear_after_burst`` off) only where no burst reserve
asked for replicas in the window. What the stabilisation remembers may also leave out what a queue alone asked for
(``stabilize_drain`` off). The same margin may also bound how far a release the window lets through goes
(``release_only_cleared``, ``cleared_floor``): no lower than the fewest replicas the load clears it on. Pure
arithmetic over the policy's own rate history and terms; no state.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

# Rises seen before a learnt margin is trusted (fewer: every release is stabilised).
MIN_RISES = 10


def rise_quantile(rates: Iterable[float], ahead: int, q: float) -> float | None:
    """The q-quantile over ticks ``i`` of ``max(rates[i+1 .. i+ahead]) / rates[i]`` (1 where the rate fell), over
    ticks with a positive rate; None with fewer than ``MIN_RISES`` such ticks."""
    if ahead < 1:
        raise ValueError(f"ticks ahead must be >= 1, got {ahead}")
    rates = list(rates)  # the policy's history is a deque, which does not slice
    rises = sorted(max(max(rates[i + 1:i + 1 + ahead]) / rates[i], 1.0)
                   for i in range(len(rates) - ahead) if rates[i] > 0 and math.isfinite(rates[i]))
    if len(rises) < MIN_RISES:
        return None
    return rises[min(math.ceil(q * len(rises)) - 1, len(rises) - 1)] if q > 0 else rises[0]


def clear_fraction(fixed: float | None, q: float | None, rates: Iterable[float], ahead: int) -> float | None:
    """The fraction of ``k`` a pool's largest term may reach for a release to ``k`` to skip the stabilisation:
    ``fixed``, or ``1 / rise`` with ``q`` set (at most ``fixed`` where both are); None: every release stabilised."""
    if q is None:
        return fixed
    rise = rise_quantile(rates, ahead, q)
    if rise is None:
        return None
    return min(1.0 / rise, fixed if fixed is not None else 1.0)


def _pool_terms(terms: dict, pool: str, *, drain: bool = True) -> list[float]:
    """The pool's sizing terms (replicas) in ``terms`` as a decision explains them (``prefill_compute``, ...; the
    ``binding_*`` names are not terms), its drain term left out with ``drain`` False."""
    return [v for t, v in terms.items()
            if t.startswith(f"{pool}_") and (drain or t != f"{pool}_drain") and isinstance(v, (int, float))]


def is_clear(terms: dict, pool: str, k: int, fraction: float | None) -> bool:
    """The pool's largest sizing term is at most ``k x fraction``. False without a fraction or without terms."""
    need = _pool_terms(terms, pool)
    return fraction is not None and bool(need) and max(need) <= k * fraction


def cleared_floor(terms: dict, pool: str, fraction: float) -> int | None:
    """The fewest replicas whose ``fraction`` the pool's largest sizing term fits in (``is_clear`` at that size):
    how far ``PolicyConfig.release_only_cleared`` lets a release go. None without terms."""
    need = _pool_terms(terms, pool)
    return max(math.ceil(max(need) / fraction - 1e-9), 1) if need else None


def undrained(terms: dict, p: int, d: int, prefill_min: int, decode_min: int) -> tuple[int, int]:
    """The recommendation (``p``, ``d``) without what each pool's drain term alone asked for (a queue worked off asks
    for nothing a minute later): what the stabilisation remembers where ``PolicyConfig.stabilize_drain`` is off.
    Each pool at least its minimum, at most its recommendation; a pool without terms keeps its recommendation."""
    out = []
    for pool, n, low in (("prefill", p, prefill_min), ("decode", d, decode_min)):
        need = _pool_terms(terms, pool, drain=False)
        out.append(min(n, max(math.ceil(max(need) - 1e-9), low)) if need else n)
    return out[0], out[1]


def reserved(terms: dict, pool: str) -> bool:
    """The pool's burst reserve (its peak term) asked for replicas at this tick."""
    v = terms.get(f"{pool}_peak")
    return isinstance(v, (int, float)) and v > 0
