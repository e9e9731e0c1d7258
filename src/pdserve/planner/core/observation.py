"""What the planner sees each interval: workload metrics plus the pools' state.

Sources fill what they can; anything unknown is NaN (never 0, which would read as
"no load" and trigger a scale-down). A source that failed entirely sets ``error``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

NAN = math.nan



def finite(x: float) -> bool:
    """A real number (not NaN, not infinite): what a missing Prometheus series reads as is not."""
    return isinstance(x, (int, float)) and math.isfinite(x)

@dataclass(frozen=True)
class PoolState:
    replicas: int  # desired replicas currently written (spec)
    ready: int | None = None  # None: unknown, treat as == replicas
    pending: int = 0  # pods that exist but cannot start (unschedulable, image pull, ...)

    @property
    def effective_ready(self) -> int:
        return self.replicas if self.ready is None else self.ready


@dataclass(frozen=True)
class Observation:
    timestamp: float  # when the metrics were read, on the planner's clock
    prefill: PoolState
    decode: PoolState
    window_s: float = NAN
    request_rate: float = NAN  # requests/s arriving
    mean_isl: float = NAN  # prompt tokens per request
    mean_osl: float = NAN  # generated tokens per request
    ttft_mean_s: float = NAN
    ttft_tail_s: float = NAN
    # The prefill engines' own TTFT (disaggregated; NaN: unknown): what the prefill profile models, without
    # the KV transfer, the hand-off and the decode side's first step that the client's TTFT also holds.
    prefill_ttft_mean_s: float = NAN
    prefill_ttft_tail_s: float = NAN
    itl_mean_s: float = NAN
    itl_tail_s: float = NAN
    running: float = NAN
    waiting: float = NAN  # in the engines' queues
    prefill_waiting: float = NAN  # of which in the prefill pool's queues (the TTFT backlog)
    decode_waiting: float = NAN  # of which in the decode pool's (KV transfers not landed, admission)
    kv_usage: float = NAN  # 0..1
    prefix_hit_ratio: float = NAN  # 0..1, prompt tokens served from the prefix cache
    # The router sees requests even while no worker runs: the wake-up signal at zero.
    router_request_rate: float = NAN
    router_inflight: float = NAN
    # Prompt tokens/s as the router routes them: the one arrival-time load signal (vLLM's
    # prompt-token histograms are observed only when a request finishes).
    router_prompt_tokens_rate: float = NAN
    # The burst since the last tick: the router's burst gauge at the planner's budget
    # (pdserve.common.burst: the rate that would have kept every wait within the budget,
    # at 1 s resolution), else the highest per-scrape prompt-token rate (irate). Bursts
    # shorter than the rate window show here, not in the window's mean.
    router_prompt_tokens_peak: float = NAN
    # The same gauge at the planner's second, larger budget (``burst_fit_budget_s``): with both,
    # the policy fits the burst's arrival rate (pdserve.planner.core.burst_fit). NaN: not read.
    router_prompt_tokens_peak_wide: float = NAN
    error: str | None = None
    extra: dict[str, float] = field(default_factory=dict)

    @classmethod
    def failed(cls, timestamp: float, prefill: PoolState, decode: PoolState, error: str) -> Observation:
        return cls(timestamp=timestamp, prefill=prefill, decode=decode, error=error)

    def waiting_in(self, pool: str) -> float:
        """Requests queued in ``pool`` ("prefill" or "decode"): its own gauge, else the unlabelled total (NaN: neither
        is known)."""
        own = self.prefill_waiting if pool == "prefill" else self.decode_waiting
        return own if finite(own) else self.waiting

    def metrics_dict(self) -> dict[str, float | None]:
        """Numeric inputs, NaN as None so the dict is JSON-safe."""
        out: dict[str, float | None] = {}
        for k, v in asdict(self).items():
            if isinstance(v, float):
                out[k] = v if math.isfinite(v) else None
        return out
