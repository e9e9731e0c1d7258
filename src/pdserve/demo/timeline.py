"""Windowed statistics of the replay, sampled once per tick (pure: no I/O, no clock)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from pdserve.demo.replay import RequestResult


@dataclass(frozen=True, slots=True)
class Slo:
    ttft_s: float
    itl_s: float
    attainment: float = 0.9


@dataclass(frozen=True, slots=True)
class Sample:
    t: float  # seconds since the replay started
    sent_rps: float  # arrivals per second over the window
    done_rps: float
    inflight: int
    errors: int  # cumulative
    prefill_replicas: int
    decode_replicas: int
    ttft_p50: float | None
    ttft_p90: float | None
    itl_p50: float | None
    itl_p90: float | None
    attainment: float | None  # share of finished requests meeting both SLOs
    hit_ratio: float | None  # prefix-cache hits / queries over the window, all workers
    predicted_rps: float | None  # the planner's forecast, when it exports one

    def as_dict(self) -> dict[str, float | int | None]:
        return asdict(self)


def quantile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolation quantile (numpy's default); None for no data."""
    if not values:
        return None
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def meets_slo(r: RequestResult, slo: Slo) -> bool:
    if not r.ok or r.ttft_s is None or r.ttft_s > slo.ttft_s:
        return False
    mean_itl = sum(r.gaps_s) / len(r.gaps_s) if r.gaps_s else 0.0
    return mean_itl <= slo.itl_s


@dataclass(frozen=True, slots=True)
class Counters:
    """Cumulative prefix-cache counters summed over the workers at one instant."""

    hits: float
    queries: float


def hit_ratio(before: Counters | None, after: Counters | None) -> float | None:
    if before is None or after is None:
        return None
    dq = after.queries - before.queries
    dh = after.hits - before.hits
    # Counters drop when a worker leaves the pool; such a window has no clean ratio.
    if dq <= 0 or dh < 0:
        return None
    return min(1.0, dh / dq)


def sample(
    now: float,
    window_s: float,
    sent_times: Sequence[float],
    finished: Sequence[tuple[float, RequestResult]],
    inflight: int,
    pools: tuple[int, int],
    slo: Slo,
    ratio: float | None,
    predicted_rps: float | None,
) -> Sample:
    """Statistics of the last ``window_s`` seconds; ``finished`` pairs finish time and result."""
    lo = now - window_s
    recent = [r for t, r in finished if t > lo]
    ok = [r for r in recent if r.ok]
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    gaps = [g for r in ok for g in r.gaps_s]
    return Sample(
        t=now,
        sent_rps=sum(1 for t in sent_times if t > lo) / window_s,
        done_rps=len(recent) / window_s,
        inflight=inflight,
        errors=sum(1 for _, r in finished if not r.ok),
        prefill_replicas=pools[0],
        decode_replicas=pools[1],
        ttft_p50=quantile(ttfts, 0.5),
        ttft_p90=quantile(ttfts, 0.9),
        itl_p50=quantile(gaps, 0.5),
        itl_p90=quantile(gaps, 0.9),
        attainment=(sum(1 for r in recent if meets_slo(r, slo)) / len(recent)) if recent else None,
        hit_ratio=ratio,
        predicted_rps=predicted_rps,
    )


def resample(
    samples: Sequence[Sample],
    sent_times: Sequence[float],
    finished: Sequence[tuple[float, RequestResult]],
    window_s: float,
    slo: Slo,
    shift: float = 0.0,
) -> list[Sample]:
    """The live samples again, their request statistics recomputed from the complete record.

    A load engine may hand a request over after the tick that should have counted it
    (aiperf flushes its records once a second), so each tick is recomputed from the events
    up to it. Times move by ``shift`` (when the load itself started: aiperf configures
    itself for tens of seconds first) and ticks before it are dropped. Pool sizes, hit
    ratio and forecast stay as they were read live."""
    out = []
    sent = sorted(t - shift for t in sent_times)
    done = sorted(((t - shift, r) for t, r in finished), key=lambda p: p[0])
    for s in samples:
        now = s.t - shift
        if now < 0:
            continue
        sent_now = [t for t in sent if t <= now]
        done_now = [p for p in done if p[0] <= now]
        out.append(sample(now, window_s, sent_now, done_now, inflight=len(sent_now) - len(done_now),
                          pools=(s.prefill_replicas, s.decode_replicas), slo=slo, ratio=s.hit_ratio,
                          predicted_rps=s.predicted_rps))
    return out


@dataclass(frozen=True, slots=True)
class Summary:
    requests: int
    succeeded: int
    failed: int
    ttft_p50: float | None
    ttft_p90: float | None
    ttft_p99: float | None
    itl_p50: float | None
    itl_p90: float | None
    itl_p99: float | None
    attainment: float | None
    max_prefill: int
    max_decode: int
    min_prefill: int
    min_decode: int
    mean_hit_ratio: float | None


def summarize(results: Sequence[RequestResult], samples: Sequence[Sample], slo: Slo) -> Summary:
    ok = [r for r in results if r.ok]
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    gaps = [g for r in ok for g in r.gaps_s]
    ratios = [s.hit_ratio for s in samples if s.hit_ratio is not None]
    return Summary(
        requests=len(results),
        succeeded=len(ok),
        failed=len(results) - len(ok),
        ttft_p50=quantile(ttfts, 0.5),
        ttft_p90=quantile(ttfts, 0.9),
        ttft_p99=quantile(ttfts, 0.99),
        itl_p50=quantile(gaps, 0.5),
        itl_p90=quantile(gaps, 0.9),
        itl_p99=quantile(gaps, 0.99),
        attainment=(sum(1 for r in results if meets_slo(r, slo)) / len(results)) if results else None,
        max_prefill=max((s.prefill_replicas for s in samples), default=0),
        max_decode=max((s.decode_replicas for s in samples), default=0),
        min_prefill=min((s.prefill_replicas for s in samples), default=0),
        min_decode=min((s.decode_replicas for s in samples), default=0),
        mean_hit_ratio=(sum(ratios) / len(ratios)) if ratios else None,
    )
