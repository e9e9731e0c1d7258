"""Which requests no schedule can serve within the SLO: a property of request + hardware.

A request is judged *alone*: on an idle, warm prefill replica and an idle decode replica,
with the best prefix-cache hit it could ever have (an infinite shared cache, on both
sides), its KV crossing one free link. Its latencies then are the simulator's own
arithmetic, with nothing queued ahead of it:

* TTFT = front-end hold on the prefill engine + its prefill, chunk by chunk at the P/D
  ``max_num_batched_tokens`` (8192) from the cached offset + host time per step
  + hand-off + KV transfer of the uncached tokens at the link's rate + front-end hold on
  the decode engine + the decode engine's first step (which emits the first token);
* TPOT = the mean of the remaining decode steps of a batch of one, whose context grows by
  one token a step (the step time is affine in the context on each side of the roofline
  kink, so the mean is taken from the two end steps and the middle one);
* a request longer than ``max_model_len`` or than one decode engine's KV memory is
  refused by the engine (vLLM answers 400).

If that misses the SLO, no number of replicas helps: more replicas only remove queueing,
and a request alone has none. ``tests/bench/test_planner_feasibility.py`` checks the
arithmetic against the simulator on single requests and on hand-computed cases.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pdserve.sim.config import SimConfig
from pdserve.sim.instance import PD_BATCHED_TOKENS, pool_spec
from pdserve.sim.metrics import Slo
from pdserve.worker.perf import PerfModel

FEASIBLE, TTFT, TPOT, TOO_LONG = "feasible", "ttft", "tpot", "too_long"
VERDICTS = (FEASIBLE, TTFT, TPOT, TOO_LONG)


@dataclass(frozen=True, slots=True)
class Alone:
    """One request's latencies on idle replicas (seconds)."""

    prefill_s: float  # arrival -> prompt KV ready on the prefill side
    transfer_s: float
    ttft_s: float
    tpot_s: float
    refused: str = ""  # why an engine would refuse it outright


@dataclass(frozen=True)
class Hardware:
    """What decides a request's latency when nothing else runs (the simulator's knobs)."""

    prefill: PerfModel
    decode: PerfModel
    link_gbps: float
    chunk_tokens: int = PD_BATCHED_TOKENS
    max_model_len: int = 131072
    decode_kv_tokens: int = 1 << 62
    ingress_s: float = 0.0
    handoff_s: float = 0.0
    step_host_s: float = 0.0

    @classmethod
    def of(cls, cfg: SimConfig) -> Hardware:
        p, d = pool_spec(cfg, "prefill"), pool_spec(cfg, "decode")
        block = d.engine_config.block_size
        return cls(prefill=p.perf, decode=d.perf, link_gbps=cfg.kv_link_gbps,
                   chunk_tokens=p.engine_config.max_num_batched_tokens, max_model_len=cfg.max_model_len,
                   decode_kv_tokens=d.engine_config.num_blocks * block, ingress_s=cfg.ingress_s,
                   handoff_s=cfg.pd_handoff_s, step_host_s=cfg.step_host_s)

    def ttft_path_s(self, context: int = 1024) -> float:
        """The TTFT beyond prefill steps and KV transfer on an idle pair (what ``alone`` adds around them
        for a prompt of one chunk): ingress, both front ends, hand-off, the decode side's first step."""
        first = self.decode.step_time(decode_contexts=[context + 1]) + self.step_host_s
        return (self.ingress_s + self.prefill.profile.efficiency.frontend_latency_s + self.step_host_s
                + self.handoff_s + self.decode.profile.efficiency.frontend_latency_s + first)

    def alone(self, input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> Alone:
        refused = ""
        if input_tokens >= self.max_model_len:
            refused = f"prompt of {input_tokens} tokens >= max_model_len {self.max_model_len}"
        elif min(input_tokens + output_tokens, self.max_model_len) > self.decode_kv_tokens:
            refused = f"{input_tokens + output_tokens} tokens > one decode engine's KV ({self.decode_kv_tokens})"
        # The engine always computes at least the prompt's last token (vLLM recomputes it on a full hit).
        done = min(max(cached_tokens, 0), input_tokens - 1)
        fresh = input_tokens - done
        pre = self.ingress_s + self.prefill.profile.efficiency.frontend_latency_s
        while done < input_tokens:
            n = min(self.chunk_tokens, input_tokens - done)
            pre += self.prefill.step_time([(n, done)]) + self.step_host_s
            done += n
        transfer = fresh * self.prefill.kv_bytes_per_token / (self.link_gbps * 1e9 / 8)
        step = self.decode.step_time
        first = step(decode_contexts=[input_tokens + 1]) + self.step_host_s
        ttft = pre + self.handoff_s + transfer + self.decode.profile.efficiency.frontend_latency_s + first
        # The engine stops a sequence at max_model_len; TPOT still divides by the tokens asked for.
        produced = min(output_tokens, self.max_model_len - input_tokens)
        if output_tokens <= 1 or produced <= 1:
            tpot = 0.0
        else:
            lo, hi = input_tokens + 2, input_tokens + produced
            mid = (lo + hi) // 2
            # Simpson's rule over an affine-by-parts curve: exact on either side of the kink.
            mean = (step(decode_contexts=[lo]) + 4 * step(decode_contexts=[mid]) + step(decode_contexts=[hi])) / 6
            tpot = (mean + self.step_host_s) * (produced - 1) / (output_tokens - 1)
        return Alone(prefill_s=pre, transfer_s=transfer, ttft_s=ttft, tpot_s=tpot, refused=refused)

    def verdict(self, input_tokens: int, output_tokens: int, slo: Slo, cached_tokens: int = 0) -> str:
        a = self.alone(input_tokens, output_tokens, cached_tokens)
        if a.refused:
            return TOO_LONG
        if a.ttft_s > slo.ttft_s:
            return TTFT
        if a.tpot_s > slo.tpot_s:
            return TPOT
        return FEASIBLE


def classify(requests: Sequence[tuple[int, int, int]], hw: Hardware, slo: Slo) -> list[str]:
    """Verdict per (input_tokens, output_tokens, best-case cached tokens)."""
    return [hw.verdict(i, o, slo, c) for i, o, c in requests]


def summary(verdicts: Sequence[str], arrivals: Sequence[float] | None = None, after_s: float = 0.0) -> dict:
    """Counts per verdict and the feasible fraction (of all, and of arrivals at or after ``after_s``)."""
    out: dict = {"requests": len(verdicts), "counts": {v: sum(x == v for x in verdicts) for v in VERDICTS}}
    out["feasible_fraction"] = out["counts"][FEASIBLE] / len(verdicts) if verdicts else None
    if arrivals is not None:
        late = [v for v, a in zip(verdicts, arrivals) if a >= after_s]
        out["feasible_fraction_after_warmup"] = sum(v == FEASIBLE for v in late) / len(late) if late else None
    return out


def attainment_among_feasible(hits: Sequence[bool], verdicts: Sequence[str]) -> float | None:
    """Share of the feasible requests that met the SLO (infeasible ones are left out, not counted as met)."""
    ok = [h for h, v in zip(hits, verdicts) if v == FEASIBLE]
    return sum(ok) / len(ok) if ok else None


def miss_breakdown(hits: Sequence[bool], verdicts: Sequence[str], records: Sequence, alone: Sequence[Alone],
                   slo: Slo, hw: Hardware | None = None) -> dict[str, int]:
    """Why each missed request missed: infeasible alone (by verdict), or, for a feasible one, its
    prefix-cache hit in this run too small to be feasible even alone (``prefix_miss``: the prefix
    was evicted or the request went to a replica without it; needs ``hw``), else where its time
    beyond the alone latency went (``records``: the simulator's per-request records)."""
    out = {f"infeasible_{v}": 0 for v in VERDICTS if v != FEASIBLE}
    out |= {"prefix_miss": 0, "prefill_wait": 0, "link_decode_wait": 0, "tpot": 0, "unfinished": 0}
    for i, (h, v) in enumerate(zip(hits, verdicts)):
        if h:
            continue
        if v != FEASIBLE:
            out[f"infeasible_{v}"] += 1
            continue
        r = records[i] if records else None
        if r is None or r.finish_s < 0 or r.first_token_s < 0:
            out["unfinished"] += 1
        elif hw is not None and hw.verdict(r.input_tokens, r.output_tokens, slo, r.cached_tokens) != FEASIBLE:
            out["prefix_miss"] += 1
        elif r.first_token_s - r.arrival_s <= slo.ttft_s:
            out["tpot"] += 1
        else:
            a = alone[i]
            pre = (r.prefill_done_s - r.arrival_s - a.prefill_s) if r.prefill_done_s >= 0 else 0.0
            rest = (r.first_token_s - r.arrival_s) - a.ttft_s - pre
            out["prefill_wait" if pre >= rest else "link_decode_wait"] += 1
    return out


@dataclass
class TraceFeasibility:
    """Verdicts and alone latencies of one trace's requests (in trace order), and the scoring of a run."""

    verdicts: list[str]
    alone: list[Alone]
    arrivals: list[float]
    warm_from_s: float
    slo: Slo
    hw: Hardware | None = None
    cold: list[str] | None = None  # verdicts with no prefix-cache hit at all
    # Requests arriving before this are replayed history (evaluate.py --history): not scored at all,
    # so "attainment among the feasible" (what the references search for) is the scored window's.
    scored_from_s: float = 0.0

    @classmethod
    def of(cls, requests: Sequence[tuple[float, int, int, int]], hw: Hardware, slo: Slo,
           warm_from_s: float) -> TraceFeasibility:
        """``requests``: (arrival, input tokens, output tokens, best-case cached tokens) per request."""
        alone = [hw.alone(i, o, c) for _, i, o, c in requests]
        verdicts = [hw.verdict(i, o, slo, c) for _, i, o, c in requests]
        cold = [hw.verdict(i, o, slo) if c else v for (_, i, o, c), v in zip(requests, verdicts)]
        return cls(verdicts, alone, [a for a, *_ in requests], warm_from_s, slo, hw, cold)

    def summary(self) -> dict:
        out = summary(self.verdicts, self.arrivals, self.warm_from_s)
        if self.cold is not None:
            # Feasible only with (part of) their prefix cached: a cold cache or a replica without
            # the prefix makes them miss at any pool size.
            out["feasible_only_with_prefix_hit"] = sum(v == FEASIBLE and c != FEASIBLE
                                                       for v, c in zip(self.verdicts, self.cold))
        return out

    def scored_feasible(self) -> list[bool]:
        """Per request: feasible and in the scored window (what "99 % of the feasible requests" counts)."""
        return [v == FEASIBLE and a >= self.scored_from_s for v, a in zip(self.verdicts, self.arrivals)]

    def score(self, hits: Sequence[bool], records: Sequence | None = None) -> dict:
        """Attainment among the feasible requests (all, after warm-up) and why each miss missed."""
        warm = [i for i, a in enumerate(self.arrivals) if a >= self.warm_from_s]
        scored = [i for i, a in enumerate(self.arrivals) if a >= self.scored_from_s]
        out = {
            "attainment_feasible": attainment_among_feasible([hits[i] for i in scored],
                                                             [self.verdicts[i] for i in scored]),
            "attainment_feasible_after_warmup": attainment_among_feasible(
                [hits[i] for i in warm], [self.verdicts[i] for i in warm]),
        }
        if records is not None:
            out["misses"] = miss_breakdown(hits, self.verdicts, records, self.alone, self.slo, self.hw)
        return out
