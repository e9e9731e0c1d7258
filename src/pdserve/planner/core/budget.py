"""Fit both pools into a GPU budget together (prefill*tp_p + decode*tp_d <= budget)."""

from __future__ import annotations


def gpus(prefill: int, decode: int, tp_prefill: int, tp_decode: int) -> int:
    return prefill * tp_prefill + decode * tp_decode


def fit_budget(
    prefill: int,
    decode: int,
    *,
    tp_prefill: int,
    tp_decode: int,
    budget: int | None,
    min_prefill: int,
    min_decode: int,
    want_prefill: int | None = None,
    want_decode: int | None = None,
) -> tuple[int, int]:
    """Shrink (prefill, decode) until they fit, keeping their shares of the demand even.

    Each step removes a replica from the pool that is best served relative to what
    it wants (``want_*``, default the inputs), so a budget cut hurts both pools alike
    instead of starving whichever was sized last. Pools never go below their minimum;
    the caller must have checked that the minimums themselves fit.
    """
    if budget is None or gpus(prefill, decode, tp_prefill, tp_decode) <= budget:
        return prefill, decode
    want_p = max(want_prefill if want_prefill is not None else prefill, 1)
    want_d = max(want_decode if want_decode is not None else decode, 1)
    p, d = prefill, decode
    while gpus(p, d, tp_prefill, tp_decode) > budget:
        can_p, can_d = p > min_prefill, d > min_decode
        if not (can_p or can_d):
            break  # minimums exceed the budget: the caller reports it
        if can_p and (not can_d or p / want_p >= d / want_d):
            p -= 1
        else:
            d -= 1
    return p, d
