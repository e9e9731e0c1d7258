"""The engine's per-step cost call, with the perf model's coefficients read once.

``PerfModel.step_time_aggregate`` builds a frozen ``StepBreakdown`` through two
method calls on every step; the simulator makes millions of steps, so the engine
uses this closure instead. It evaluates the very same float expressions in the same
order as ``PerfModel._breakdown`` (so results are bit-identical; a test checks
that), and defers to the model's own method for anything that is not exactly a
``PerfModel`` (a subclass may override the cost).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from itertools import accumulate

import numpy as np

from pdserve.worker.perf import PerfModel

StepCostFn = Callable[[int, float, int, int], float]

# "far more than rounding": a few ulps of relative error against this factor
_MARGIN = 1.0 + 1e-9
# From this many steps on, a run's step costs are computed in numpy: fewer instructions than the list
# comprehension's float objects from ~40 steps (valgrind: 49 k vs 35 k at 24 steps, 51 k vs 62 k at 48)
_NUMPY_STEPS = 40
_EXACT = 2.0**53


def _coefficients(perf: PerfModel) -> tuple[float, float, float, float, float, float, float, float]:
    """The perf model's terms both closures bind to locals (the same objects, so the same floats)."""
    return (perf._flops_per_token, perf._attn_flops, perf._flops_rate, perf.weight_bytes, perf.kv_bytes_per_token,
            perf._byte_rate, perf._eff.step_overhead_s, perf._eff.per_seq_overhead_s)


def step_cost_fn(perf: PerfModel) -> StepCostFn:
    """``f(new_tokens, attn_pairs, kv_read_tokens, n_seqs) -> seconds``, same as ``perf.step_time_aggregate``."""
    if type(perf) is not PerfModel:
        return perf.step_time_aggregate
    (flops_per_token, attn_flops, flops_rate, weight_bytes, kv_bytes, byte_rate, step_overhead,
     per_seq_overhead) = _coefficients(perf)
    tp = perf.tp

    if tp == 1:
        def cost(new_tokens: int, attn_pairs: float, kv_read_tokens: int, n_seqs: int) -> float:
            if new_tokens == 0:
                return 0.0
            compute = (flops_per_token * new_tokens + attn_flops * attn_pairs) / flops_rate
            memory = (weight_bytes + kv_bytes * (kv_read_tokens + new_tokens)) / byte_rate
            # written out like `max(compute, memory)`; the breakdown's `+ 0.0` comm term is exact, so dropped
            return (memory if memory > compute else compute) + (step_overhead + per_seq_overhead * n_seqs)

        return cost

    act_bytes = perf._act_bytes_per_token
    allreduces = perf._allreduces
    ar_latency = perf._eff.allreduce_latency_s
    ar_bw = perf._ar_bw

    def cost_tp(new_tokens: int, attn_pairs: float, kv_read_tokens: int, n_seqs: int) -> float:
        if new_tokens == 0:
            return 0.0
        compute = (flops_per_token * new_tokens + attn_flops * attn_pairs) / flops_rate
        memory = (weight_bytes + kv_bytes * (kv_read_tokens + new_tokens)) / byte_rate
        ar_bytes = act_bytes * new_tokens * 2 * (tp - 1) / tp
        comm = allreduces * (ar_latency + ar_bytes / ar_bw)
        return (memory if memory > compute else compute) + comm + (step_overhead + per_seq_overhead * n_seqs)

    return cost_tp


# ends(now, n, seqs, attn_pairs, kv_read, until, gap_s) -> end times of up to n decode steps of `seqs`
# requests run back to back from `now` (step j reads attn_pairs + j * seqs pairs and kv_read + j * seqs
# tokens), up to and including the first that does not end before `until`
StepEndsFn = Callable[[float, int, int, int, int, float, float], list[float]]


def step_ends_fn(perf: PerfModel) -> StepEndsFn:
    """Runs of decode steps (pdserve.worker.decode_run.plan) with ``step_cost_fn``'s expression inlined in
    the loop: the same floats, without a call per step (a test checks it against ``step_cost_fn``)."""
    cost = step_cost_fn(perf)
    if type(perf) is not PerfModel or perf.tp != 1:
        def ends_by_call(now: float, n: int, seqs: int, attn_pairs: int, kv_read: int, until: float,
                         gap_s: float) -> list[float]:
            out: list[float] = []
            t = now
            for _ in range(n):
                t = t + cost(seqs, float(attn_pairs), kv_read, seqs) + gap_s
                out.append(t)
                if not t < until:
                    break
                attn_pairs += seqs
                kv_read += seqs
            return out

        return ends_by_call
    (flops_per_token, attn_flops, flops_rate, weight_bytes, kv_bytes, byte_rate, step_overhead,
     per_seq_overhead) = _coefficients(perf)
    # kv_bytes is an int (bytes per token): `kv_bytes * tokens` would be a big-int product that `weight_bytes + ...`
    # converts back to a float. A float product is the same float: IEEE multiplication rounds the exact product
    # once, as the int-to-float conversion does, and both factors are exact as floats (below 2**53).
    kv_f = float(kv_bytes)
    # Long runs (see _NUMPY_STEPS) compute `weight_bytes + kv_f * r` as a0 + j * (kv_f * seqs) in numpy: the same
    # float while every term is an integer below 2**53 (then all of it is exact), which holds for whole weight
    # bytes and is checked per run against the largest term.
    whole_weights = float(weight_bytes).is_integer()

    def ends(now: float, n: int, seqs: int, attn_pairs: int, kv_read: int, until: float, gap_s: float) -> list[float]:
        out: list[float] = []
        t = now
        token_flops = flops_per_token * seqs  # the same products and sums as cost(), in the same order
        overhead = step_overhead + per_seq_overhead * seqs
        # Decode steps are memory-bound: compute and memory time are both affine in the step number, so if
        # memory exceeds compute by far more than rounding at the first and the last step it does at every
        # step, and the step time is the memory term alone (the very same float expression as below).
        last = n - 1
        if (((token_flops + attn_flops * float(attn_pairs)) / flops_rate) * _MARGIN
                < (weight_bytes + kv_bytes * (kv_read + seqs)) / byte_rate
                and ((token_flops + attn_flops * float(attn_pairs + last * seqs)) / flops_rate) * _MARGIN
                < (weight_bytes + kv_bytes * (kv_read + last * seqs + seqs)) / byte_rate):
            if gap_s == 0.0:
                # t + cost + 0.0 is t + cost: the ends are the running sum of the step costs, summed left to
                # right in C (accumulate), then cut after the first not before ``until`` (ends only grow).
                # Costs grow with the step number, so the first bounds how many steps fit before ``until``:
                # computing only those (+ 2 for rounding) wastes nothing when a gate cuts the run short.
                first = (weight_bytes + kv_bytes * (kv_read + seqs)) / byte_rate + overhead
                if until - now < first * n:
                    n = min(n, int((until - now) / first) + 2)
                a0 = weight_bytes + kv_f * (kv_read + seqs)
                step = kv_f * seqs
                if n >= _NUMPY_STEPS and whole_weights and a0 + step * n < _EXACT:
                    x = np.arange(n, dtype=np.float64)
                    x *= step
                    x += a0  # = weight_bytes + kv_f * r, exactly (integers below 2**53)
                    x /= byte_rate  # one IEEE operation per element, as below: the same floats
                    x += overhead
                    x[0] += now
                    out = np.cumsum(x, out=x).tolist()  # add.accumulate sums left to right, as accumulate()
                else:
                    out = list(accumulate([(weight_bytes + kv_f * r) / byte_rate + overhead
                                           for r in range(kv_read + seqs, kv_read + seqs * (n + 1), seqs)],
                                          initial=now))
                    del out[0]
                cut = bisect_left(out, until) + 1
                if cut < n:
                    del out[cut:]
                return out
            for _ in range(n):
                t = t + ((weight_bytes + kv_bytes * (kv_read + seqs)) / byte_rate + overhead) + gap_s
                out.append(t)
                if not t < until:
                    break
                kv_read += seqs
            return out
        for _ in range(n):
            compute = (token_flops + attn_flops * float(attn_pairs)) / flops_rate
            memory = (weight_bytes + kv_bytes * (kv_read + seqs)) / byte_rate
            t = t + ((memory if memory > compute else compute) + overhead) + gap_s
            out.append(t)
            if not t < until:
                break
            attn_pairs += seqs
            kv_read += seqs
        return out

    return ends
