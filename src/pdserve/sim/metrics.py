"""Per-request latency records and the summary a run reports (SLO attainment etc.)."""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from pydantic import BaseModel, ConfigDict, Field


class Slo(BaseModel):
    """Latency objectives; a request attains when *both* are met (DistServe's definition)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    ttft_s: float = Field(1.0, gt=0, description="time-to-first-token objective, seconds")
    tpot_s: float = Field(0.1, gt=0, description="time per output token (mean inter-token latency), seconds")
    target: float = Field(0.9, gt=0, le=1, description="attainment target for goodput")


@dataclass(slots=True)
class RequestRecord:
    """One request's life in the simulator. Times are virtual seconds; -1 = never."""

    index: int
    arrival_s: float
    input_tokens: int
    output_tokens: int
    prefill_instance: str = ""
    decode_instance: str = ""
    first_token_s: float = -1.0
    finish_s: float = -1.0
    prefill_done_s: float = -1.0  # disaggregated: prompt KV ready on the prefill side
    transfer_s: float = 0.0  # disaggregated: KV transfer time after prefill (exposed part)
    kv_bytes: int = 0  # KV bytes moved prefill -> decode
    cached_tokens: int = 0  # prompt tokens served from the prefix cache
    error: str = ""  # why an engine refused the request (counts as a miss)

    @property
    def finished(self) -> bool:
        return self.finish_s >= 0

    @property
    def ttft(self) -> float:
        return self.first_token_s - self.arrival_s if self.first_token_s >= 0 else math.inf

    @property
    def tpot(self) -> float:
        if self.finish_s < 0:
            return math.inf
        if self.output_tokens <= 1:
            return 0.0
        return (self.finish_s - self.first_token_s) / (self.output_tokens - 1)

    @property
    def e2e(self) -> float:
        return self.finish_s - self.arrival_s if self.finish_s >= 0 else math.inf

    def attains(self, slo: Slo) -> bool:
        return self.finish_s >= 0 and self.ttft <= slo.ttft_s and self.tpot <= slo.tpot_s


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between order statistics (numpy's default); None if empty."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    frac = pos - lo
    return xs[lo] + (xs[hi] - xs[lo]) * frac


def _r(x: float | None, nd: int = 6) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x, nd)


@dataclass(slots=True)
class Summary:
    requests: int
    finished: int
    attainment: float  # both SLOs, unfinished requests count as misses
    attainment_ttft: float
    attainment_tpot: float
    ttft: dict[str, float | None] = field(default_factory=dict)
    tpot: dict[str, float | None] = field(default_factory=dict)
    itl: dict[str, float | None] = field(default_factory=dict)  # over all inter-token gaps
    e2e: dict[str, float | None] = field(default_factory=dict)
    throughput_rps: float = 0.0
    output_tokens_per_s: float = 0.0
    kv_bytes_moved: int = 0
    prefix_hit_ratio: float | None = None
    makespan_s: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "requests": self.requests,
            "finished": self.finished,
            "attainment": _r(self.attainment),
            "attainment_ttft": _r(self.attainment_ttft),
            "attainment_tpot": _r(self.attainment_tpot),
            "ttft_s": self.ttft,
            "tpot_s": self.tpot,
            "itl_s": self.itl,
            "e2e_s": self.e2e,
            "throughput_rps": _r(self.throughput_rps),
            "output_tokens_per_s": _r(self.output_tokens_per_s, 3),
            "kv_bytes_moved": self.kv_bytes_moved,
            "prefix_hit_ratio": _r(self.prefix_hit_ratio),
            "makespan_s": _r(self.makespan_s),
        }


def _dist(values: Sequence[float] | np.ndarray) -> dict[str, float | None]:
    # One sort for all quantiles: the ITL list holds one sample per generated token.
    # stable (timsort): the simulator hands in its inter-token gaps as a few sorted runs (merged in linear
    # time); equal floats are indistinguishable, so the sorted array is what any sort gives
    xs = np.sort(np.asarray(values, dtype=np.float64), kind="stable")
    xs = xs[np.isfinite(xs)]
    if xs.size == 0:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    p50, p90, p99 = np.percentile(xs, [50, 90, 99])  # linear interpolation, like percentile()
    return {"mean": _r(float(xs.mean())), "p50": _r(float(p50)), "p90": _r(float(p90)), "p99": _r(float(p99))}


def sorted_samples(single: Sequence[float], repeats: dict[int, list[float]]) -> np.ndarray:
    """``single`` once each and ``repeats[k]`` k times each, sorted (the simulator's inter-token gaps). Each
    part is sorted before it is repeated, so the whole is a few sorted runs that a stable sort (timsort)
    merges in linear time; equal floats are indistinguishable, so this is the array any sort of all the
    samples gives."""
    parts = [np.sort(np.fromiter(single, np.float64, len(single)))]
    for k, gaps in sorted(repeats.items()):
        parts.append(np.repeat(np.sort(np.fromiter(gaps, np.float64, len(gaps))), k))
    return np.sort(np.concatenate(parts), kind="stable")


def summarize(
    records: Sequence[RequestRecord],
    slo: Slo,
    *,
    itl_samples: Iterable[float] = (),
    prefix_hits: int = 0,
    prefix_queries: int = 0,
) -> Summary:
    n = len(records)
    done = [r for r in records if r.finished]
    ok_t = sum(1 for r in done if r.ttft <= slo.ttft_s)
    ok_p = sum(1 for r in done if r.tpot <= slo.tpot_s)
    ok = sum(1 for r in done if r.ttft <= slo.ttft_s and r.tpot <= slo.tpot_s)
    start = min((r.arrival_s for r in records), default=0.0)
    end = max((r.finish_s for r in done), default=start)
    span = end - start
    return Summary(
        requests=n,
        finished=len(done),
        attainment=ok / n if n else 0.0,
        attainment_ttft=ok_t / n if n else 0.0,
        attainment_tpot=ok_p / n if n else 0.0,
        ttft=_dist([r.ttft for r in done]),
        tpot=_dist([r.tpot for r in done if r.output_tokens > 1]),
        itl=_dist(itl_samples if isinstance(itl_samples, (array, list, np.ndarray)) else list(itl_samples)),
        e2e=_dist([r.e2e for r in done]),
        throughput_rps=len(done) / span if span > 0 else 0.0,
        output_tokens_per_s=sum(r.output_tokens for r in done) / span if span > 0 else 0.0,
        kv_bytes_moved=sum(r.kv_bytes for r in records),
        prefix_hit_ratio=prefix_hits / prefix_queries if prefix_queries else None,
        makespan_s=span,
    )


CSV_COLUMNS = (
    "index", "arrival_s", "input_tokens", "output_tokens", "prefill_instance", "decode_instance",
    "first_token_s", "finish_s", "ttft_s", "tpot_s", "e2e_s", "transfer_s", "kv_bytes", "cached_tokens", "attained", "error",
)


def csv_rows(records: Sequence[RequestRecord], slo: Slo) -> Iterable[list[str]]:
    def f(x: float) -> str:
        return "" if not math.isfinite(x) or x < 0 else f"{x:.6f}"

    for r in records:
        yield [
            str(r.index), f(r.arrival_s), str(r.input_tokens), str(r.output_tokens), r.prefill_instance,
            r.decode_instance, f(r.first_token_s), f(r.finish_s), f(r.ttft), f(r.tpot), f(r.e2e),
            f(r.transfer_s), str(r.kv_bytes), str(r.cached_tokens), "1" if r.attains(slo) else "0", r.error,
        ]
