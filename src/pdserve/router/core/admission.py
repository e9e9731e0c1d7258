"""Admission control: refuse early when the predicted TTFT breaks the SLO (pure).

Predicted TTFT on a prefill worker = (prompt tokens already queued there + this
request's uncached tokens) / prefill throughput. Throughput is learned from the
prefill responses the router times itself (EWMA), starting from a configured guess.
Refusing fast (503 + Retry-After) lets a client or an upstream balancer go elsewhere
instead of queueing for a first token that would arrive too late anyway.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Verdict:
    admit: bool
    predicted_ttft_s: float
    retry_after_s: int = 0


class AdmissionControl:
    def __init__(self, ttft_slo_ms: float | None, factor: float = 3.0, prefill_tokens_per_s: float = 20000.0,
                 alpha: float = 0.2) -> None:
        if ttft_slo_ms is not None and ttft_slo_ms <= 0:
            raise ValueError(f"ttft_slo_ms must be positive, got {ttft_slo_ms}")
        if factor <= 0:
            raise ValueError(f"admission factor must be positive, got {factor}")
        if prefill_tokens_per_s <= 0:
            raise ValueError(f"prefill_tokens_per_s must be positive, got {prefill_tokens_per_s}")
        self.slo_s = None if ttft_slo_ms is None else ttft_slo_ms / 1000.0
        self.factor = factor
        self.tokens_per_s = prefill_tokens_per_s
        self.alpha = alpha

    def observe_prefill(self, tokens: int, seconds: float) -> None:
        # Tiny prefills are dominated by fixed overheads and would understate throughput.
        if tokens >= 64 and seconds > 0:
            self.tokens_per_s += self.alpha * (tokens / seconds - self.tokens_per_s)

    def predict(self, queued_tokens: int, new_tokens: int) -> float:
        return (queued_tokens + new_tokens) / self.tokens_per_s

    def check(self, queued_tokens: int, new_tokens: int) -> Verdict:
        predicted = self.predict(queued_tokens, new_tokens)
        if self.slo_s is None or predicted <= self.factor * self.slo_s:
            return Verdict(True, predicted)
        # By then the queue ahead should have drained to within the SLO.
        retry = max(1, math.ceil(predicted - self.slo_s))
        return Verdict(False, predicted, retry)
