"""The simulator's autoscaler hook: what an autoscaler sees and what it returns.

The planner (``pdserve.planner``) drives the simulator through this hook with the
very same policy code it runs live. The contract, stable from now on:

```python
class Autoscaler(Protocol):
    interval_s: float                      # virtual seconds between ticks (> 0)
    def on_tick(self, now: float, window: WindowMetrics,
                current: PoolSizes) -> PoolSizes: ...

result = run_simulation(trace, config, autoscaler=my_autoscaler)
result.gpu_seconds          # GPU-seconds over every instance's lifetime
result.scaling_events       # list[ScalingEvent], one per tick
```

Semantics (all times are virtual seconds on the simulator's clock):

* The first tick is at ``interval_s`` after the first arrival, then every
  ``interval_s`` until the trace is replayed and every request has finished.
* ``window`` is what Prometheus would answer at ``now`` (see
  :mod:`pdserve.sim.windows`): counters as of the last scrape (every 15 s), rates
  over the 60 s before it. Requests that *completed* in it give ``request_rate``,
  ``mean_isl``, ``mean_osl`` and the TTFT / ITL quantiles (``None`` when nothing
  completed); the router's arrival-time counter gives ``prompt_tokens_rate`` and
  ``arrivals``. No output length is known before its request has finished.
  Pool gauges (running, waiting, KV usage) and ``inflight`` are sampled at ``now``;
  the prefix hit ratio is the pool's prefix-cache hits / queries (tokens) since the
  previous tick.
* ``current`` is the number of instances per pool that are *requested*: ready or
  still starting, not draining. For the colocated and chunked topologies there is
  one pool, reported as ``decode``; ``prefill`` is 0 and is ignored on return.
* Returning a larger count starts new instances at ``now``; each takes
  ``SimConfig.startup_delay_s`` before it takes requests. Returning a smaller count
  removes instances (those still starting first, then the newest ready ones):
  a removed instance takes no new requests, finishes what it has, and releases
  its GPUs when empty. A pool may go to 0 (scale to zero): requests for it wait
  at the router until an instance of the pool is ready, and count in that
  pool's ``waiting``; requests still waiting when the run ends are unfinished.
* GPU-seconds: every instance accrues ``tensor_parallel_size`` x (its release
  time - the time it was requested), start-up delay included, because a pod
  that is loading weights holds its GPUs too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class PoolSizes:
    """Instances per pool (requested: ready + starting, excluding draining)."""

    prefill: int
    decode: int

    def __post_init__(self) -> None:
        for name in ("prefill", "decode"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"PoolSizes.{name} must be an int >= 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class PoolMetrics:
    """One pool's state at the tick (gauges) and over the window (hit ratio)."""

    ready: int  # instances taking requests
    starting: int  # requested, not yet ready
    draining: int  # removed, still finishing requests
    running: int  # requests in the running queues of ready + draining instances
    waiting: int  # waiting in the engines' queues + at the router for this pool
    #               (+ decode requests whose KV transfer has not finished)
    kv_usage: float  # mean KV-cache usage over ready instances, 0..1 (0 with none ready)
    prefix_hit_ratio: float | None  # prefix-cache hit tokens / query tokens in window


@dataclass(frozen=True, slots=True)
class WindowMetrics:
    """What a Prometheus query at the tick would show (rate windows end at the last scrape)."""

    start_s: float
    end_s: float
    arrivals: int  # requests the router routed in the window
    request_rate: float  # completions / window length, req/s (rate of vllm:request_success_total)
    mean_isl: float | None  # mean prompt tokens of the completions
    mean_osl: float | None  # mean output tokens of the completions
    completions: int  # requests that finished in the window
    ttft_p50: float | None  # seconds, over completions in the window
    ttft_p90: float | None
    itl_p50: float | None  # seconds; per request mean inter-token latency (TPOT)
    itl_p90: float | None
    prefill: PoolMetrics  # all zeros for colocated / chunked topologies
    decode: PoolMetrics  # the decode pool, or the single colocated pool
    # Arrival-time signals (the router counts prompt tokens as it routes, NaN: unknown)
    prompt_tokens_rate: float = float("nan")  # prompt tokens/s routed in the window
    inflight: int = 0  # requests in the router at the tick (arrived, not finished)
    # Highest per-scrape prompt-token rate among the scrapes since the previous tick
    # (PromQL: max_over_time(sum(irate(pdserve_router_prompt_tokens_total[1m]))[30s:15s]))
    prompt_tokens_peak_rate: float = float("nan")
    # The router's burst gauge (pdserve.common.burst), budget s -> tokens/s, highest among the
    # scrapes since the previous tick (max_over_time(pdserve_router_prompt_tokens_burst_rate[30s]))
    prompt_tokens_burst: dict[float, float] = field(default_factory=dict)
    # The prefill engines' own TTFT (disagg; None: no prefill completed in the window or not disagg):
    # from the request reaching a prefill engine to its one token, over the prefills that completed
    # in the window, as the prefill pods' vllm:time_to_first_token_seconds histogram observes it
    # (front end, queue, prefill steps; not the KV transfer, the hand-off or the decode side's first step).
    # The mean, as the histogram's _sum / _count gives it live (a p50 reads a skewed queueing wait low).
    prefill_ttft_mean: float | None = None
    prefill_ttft_p90: float | None = None


@runtime_checkable
class Autoscaler(Protocol):
    """Anything with ``interval_s`` and ``on_tick`` can scale the simulated pools."""

    interval_s: float

    def on_tick(self, now: float, window: WindowMetrics, current: PoolSizes) -> PoolSizes: ...


@dataclass(frozen=True, slots=True)
class ScalingEvent:
    """One autoscaler tick as recorded in the result."""

    time_s: float
    before: PoolSizes
    after: PoolSizes  # what on_tick returned, as applied
    note: str  # e.g. "+1 prefill (ready at 123.0 s)", "" when unchanged
