"""A seeded family of bursty traces: Poisson background plus on/off bursts of heavy-tailed size.

Bursts start as a Poisson process (mean gap ``burst_gap_s``); each carries N requests
with N ~ Pareto(``alpha``, scale ``burst_min``) capped at ``burst_max`` (a few bursts
are very large, most are small), sent at ``burst_rate`` req/s, so a burst lasts
N / burst_rate seconds (40 requests: 2.4 s; 500: 30 s). Burst prompts are long (the
shape that hurt the old planner: one 30 s interval at ~16.8 req/s, seconds at
~100k+ prompt tokens/s). Prompt and output lengths are log-normal (sigma 0.8),
clipped to [16, 32000] / [1, 4000]. Everything derives from ``seed``.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, replace

from pdserve.sim.traces import Trace, from_rows


@dataclass(frozen=True)
class BurstySpec:
    duration_s: float = 900.0
    base_rate: float = 2.0  # req/s between bursts
    base_isl: float = 1500.0  # mean prompt tokens, background
    burst_gap_s: float = 150.0  # mean time between burst starts
    burst_rate: float = 16.8  # req/s inside a burst
    burst_min: int = 40
    burst_max: int = 800
    alpha: float = 1.3  # Pareto shape of the burst size (heavy tail: finite mean, infinite variance)
    burst_isl: float = 6000.0  # mean prompt tokens inside bursts
    osl: float = 250.0  # mean output tokens
    sigma: float = 0.8  # log-normal spread of lengths


def _lognormal(rng: random.Random, mean: float, sigma: float, lo: int, hi: int) -> int:
    mu = math.log(mean) - sigma * sigma / 2
    return int(min(max(rng.lognormvariate(mu, sigma), lo), hi))


def bursty_trace(seed: int, spec: BurstySpec = BurstySpec()) -> Trace:
    return from_rows(_rows(seed, spec)[0], format="synthetic",
                     source=f"bursty seed={seed} " + " ".join(f"{k}={v}" for k, v in asdict(spec).items()))


def with_history(seed: int, history_s: float, spec: BurstySpec = BurstySpec()) -> tuple[Trace, int]:
    """``history_s`` seconds of the same generator (its own stream, seeded ``"<seed>/history"``, so
    no tuning or held-out seed's requests are reused) followed by seed ``seed``'s trace, unchanged
    but for the shift: what a planner in service has seen before the scored window. Returns the
    trace and how many of its first requests are history (all of them arrive before the window)."""
    if not history_s > 0:
        raise ValueError(f"history must be > 0 s, got {history_s}")
    hist = _rows(f"{seed}/history", replace(spec, duration_s=history_s))[0]
    scored = [(history_s + t, i, o, h) for t, i, o, h in _rows(seed, spec)[0]]
    source = (f"bursty seed={seed} history_s={history_s:g} history_seed={seed}/history "
              + " ".join(f"{k}={v}" for k, v in asdict(spec).items()))
    return from_rows(hist + scored, format="synthetic", source=source), len(hist)


def bursts(seed: int, spec: BurstySpec = BurstySpec()) -> list[dict[str, float]]:
    """The bursts of a seed's trace: start (s), requests, duration (s)."""
    return _rows(seed, spec)[1]


def _rows(seed: int | str, spec: BurstySpec) -> tuple[list[tuple[float, int, int, tuple[int, ...]]], list[dict[str, float]]]:
    rng = random.Random(seed)
    found: list[dict[str, float]] = []
    rows: list[tuple[float, int, int, tuple[int, ...]]] = []
    t = 0.0
    while True:
        t += rng.expovariate(spec.base_rate)
        if t >= spec.duration_s:
            break
        rows.append((t, _lognormal(rng, spec.base_isl, spec.sigma, 16, 32000),
                     _lognormal(rng, spec.osl, spec.sigma, 1, 4000), ()))
    start = rng.expovariate(1 / spec.burst_gap_s)
    while start < spec.duration_s:
        n = min(spec.burst_max, int(spec.burst_min * rng.paretovariate(spec.alpha)))
        at, sent = start, 0
        for _ in range(n):
            at += rng.expovariate(spec.burst_rate)
            if at >= spec.duration_s:
                break
            sent += 1
            rows.append((at, _lognormal(rng, spec.burst_isl, spec.sigma, 16, 32000),
                         _lognormal(rng, spec.osl, spec.sigma, 1, 4000), ()))
        found.append({"start_s": round(start, 1), "requests": sent, "duration_s": round(at - start, 1)})
        start = at + rng.expovariate(1 / spec.burst_gap_s)
    return rows, found


if __name__ == "__main__":
    import argparse
    import json

    ap = argparse.ArgumentParser(description="Print a seed's bursts (start, requests, duration) as JSON.")
    ap.add_argument("--seed", type=int, nargs="+", default=[0])
    args = ap.parse_args()
    for seed in args.seed:
        b = bursts(seed)
        total = len(bursty_trace(seed).requests)
        print(json.dumps({"seed": seed, "requests": total, "burst_requests": sum(x["requests"] for x in b),
                          "bursts": b}))
