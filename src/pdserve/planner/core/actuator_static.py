"""Actuator for observing only: fixed pool sizes, every decision recorded, nothing changed."""

from __future__ import annotations

from dataclasses import dataclass, field

from pdserve.planner.core.decision import ScalingDecision
from pdserve.planner.core.observation import PoolState


@dataclass
class RecordingActuator:
    prefill: int = 1
    decode: int = 1
    follow: bool = False  # True: adopt each decision as the new size (a perfect, instant actuator)
    decisions: list[ScalingDecision] = field(default_factory=list)

    def pools(self) -> tuple[PoolState, PoolState]:
        return PoolState(self.prefill), PoolState(self.decode)

    def apply(self, decision: ScalingDecision) -> None:
        self.decisions.append(decision)
        if self.follow:
            self.prefill, self.decode = decision.prefill, decision.decode
