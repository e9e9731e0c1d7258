"""A scaling decision and its explanation (what the planner saw, predicted and chose)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

# Reasons for a held decision, as short stable keys (used as a metric label).
HOLD_ERROR = "metrics-unavailable"
HOLD_STALE = "stale-metrics"
HOLD_MISSING = "missing-data"
HOLD_INVALID = "invalid-config"
HOLD_UNCOVERED = "profile-not-covering"
HOLD_UNATTAINABLE = "slo-unattainable"
HOLD_EXPLODED = "forecast-exploded"


def _safe(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_safe(x) for x in v]
    return v


@dataclass(frozen=True)
class ScalingDecision:
    prefill: int
    decode: int
    reason: str
    held: bool = False
    hold_key: str | None = None  # one of HOLD_*, when held
    limited: bool = False  # ScalingLimited: min/max, budget or pending pods capped the result
    previous: tuple[int, int] = (0, 0)
    timestamp: float = math.nan
    explanation: dict[str, Any] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return (self.prefill, self.decode) != self.previous

    def to_status(self) -> dict[str, Any]:
        """status.planner of the DisaggregatedService (camelCase, JSON-safe)."""
        return _safe(
            {
                "prefillReplicas": self.prefill,
                "decodeReplicas": self.decode,
                "previousPrefillReplicas": self.previous[0],
                "previousDecodeReplicas": self.previous[1],
                "held": self.held,
                "holdReason": self.hold_key,
                "scalingLimited": self.limited,
                "reason": self.reason,
                "explanation": self.explanation,
            }
        )
