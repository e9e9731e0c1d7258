"""Replicas each pool needs for a load: every bottleneck as its own term, the largest binds.

Pure arithmetic, no state, so the policy, its tests and the benchmark's bound read the
same terms. Each term is a fractional replica count:

* prefill compute: prompt tokens/s to prefill (after prefix-cache hits) over what one
  replica sustains within the TTFT SLO (the profile, derated by headroom);
* KV link, both ends: every prefilled token's KV crosses one prefill instance's link
  and one decode instance's link (``pdserve.common.kvlink``: a transfer holds both), so
  *each* pool needs enough instances that its links carry the KV stream;
* decode compute + KV memory: generated tokens/s over what one decode replica
  sustains within the ITL SLO (the profile's decode points stop where the KV cache
  is full, so memory caps the concurrency behind that number);
* burst reserve: bursts shorter than a replica's start-up cannot be answered by
  scaling, only absorbed by capacity already up: each pool keeps enough, at saturated
  speed (prefill) and link rate (decode), for the highest short-window prompt-token
  rate seen recently (``peak_prompt_tokens``; the policy decides how long "recently" is);
* burst drain: queued prompt tokens must be gone ``drain_s`` from now (a replica
  requested now is ready after the start-up delay, and the queue behind it must
  then clear within one TTFT budget), at *saturated* speed (a queue is drained flat
  out) on top of the arrivals; the same for KV waiting for the decode side's links.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Load:
    rate: float  # requests/s to plan for
    isl: float  # prompt tokens per request
    osl: float  # generated tokens per request
    hit: float = 0.0  # prefix-cache hit ratio, 0..1: hit tokens need neither prefill nor transfer
    prefill_queue_tokens: float = 0.0  # prompt tokens waiting for a prefill replica
    decode_queue_tokens: float = 0.0  # prompt tokens whose KV waits for a decode replica's link
    prompt_tokens_floor: float = 0.0  # arrival-time prompt tokens/s observed: never plan below it
    peak_prompt_tokens: float = 0.0  # recent short-window peak of arriving prompt tokens/s

    @property
    def prompt_tokens(self) -> float:
        return max(self.rate * self.isl, self.prompt_tokens_floor) * (1.0 - self.hit)


@dataclass(frozen=True)
class Capacity:
    """Per replica (tokens/s), already derated for headroom where the SLO needs it."""

    prefill_slo: float  # within the TTFT SLO
    prefill_saturated: float  # flat out (queue drain)
    decode_slo: float  # generated tokens/s within the ITL SLO
    link: float | None = None  # KV tokens/s one instance's link moves at saturation; None: not modelled
    link_utilization: float = 0.85  # plan links for this fraction (FIFO queueing near saturation)


@dataclass(frozen=True)
class Terms:
    prefill_compute: float
    prefill_link: float
    prefill_drain: float
    decode_compute: float
    decode_link: float
    decode_drain: float
    prefill_peak: float = 0.0
    decode_peak: float = 0.0

    def _terms(self, pool: str) -> list[tuple[str, float]]:
        return [(t, getattr(self, f"{pool}_{t}")) for t in ("compute", "link", "drain", "peak")]

    @property
    def prefill(self) -> int:
        return _ceil(max(v for _, v in self._terms("prefill")))

    @property
    def decode(self) -> int:
        return _ceil(max(v for _, v in self._terms("decode")))

    def binding(self) -> dict[str, str]:
        """Which term decided each pool (for the decision's explanation)."""
        return {pool: max(self._terms(pool), key=lambda kv: kv[1])[0] for pool in ("prefill", "decode")}

    def to_dict(self) -> dict[str, float | str]:
        return asdict(self) | {f"binding_{k}": v for k, v in self.binding().items()}


def size(load: Load, cap: Capacity, *, drain_s: float) -> Terms:
    if not (drain_s > 0):
        raise ValueError(f"drain time must be > 0, got {drain_s}")
    tokens = load.prompt_tokens  # prefilled, and their KV transferred, per second
    link_ok = cap.link * cap.link_utilization if cap.link else math.inf
    link_sat = cap.link if cap.link else math.inf
    prefill_link = tokens / link_ok
    decode_link = tokens / link_ok
    q_p = max(load.prefill_queue_tokens, 0.0) * (1.0 - load.hit)
    q_d = max(load.decode_queue_tokens, 0.0) * (1.0 - load.hit)
    prefill_drain = (q_p / drain_s + tokens) / cap.prefill_saturated if q_p > 0 else 0.0
    decode_drain = (q_d / drain_s + tokens) / link_sat if q_d > 0 else 0.0
    peak = max(load.peak_prompt_tokens, 0.0) * (1.0 - load.hit)
    return Terms(
        prefill_peak=peak / cap.prefill_saturated,
        decode_peak=peak / link_sat,
        prefill_compute=tokens / cap.prefill_slo,
        prefill_link=prefill_link,
        prefill_drain=prefill_drain,
        decode_compute=load.rate * load.osl / cap.decode_slo,
        decode_link=decode_link,
        decode_drain=decode_drain,
    )


def _ceil(x: float) -> int:
    return math.ceil(x - 1e-9) if math.isfinite(x) else 0
