"""What a start-up from now looks like, read from this tick's observation (pure, no clock of its own): the prefill
replicas that will have moved tokens by then (``moving_replicas``, ``PolicyConfig.drain_starting``) and how far a
rising prompt-token rate will have risen (``Ramp``, ``PolicyConfig.ramp_projection_s``). The first is the default
since session 32, the second opt-in; the evidence for and against each is in bench/planner's README (sessions 31-32)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from pdserve.planner.core.observation import PoolState
from pdserve.planner.core.observation import finite as _finite


def moving_replicas(state: PoolState, raised_at: float | None, now: float, startup_s: float) -> float:
    """Replica-equivalents moving tokens over the next ``startup_s``: the ready ones all of it, those still starting
    (neither ready nor pending) for the part after they are ready, which is ``startup_s`` after the pool was last
    raised (``raised_at``; unknown: now, so they move nothing until a whole start-up has passed)."""
    starting = max(state.replicas - state.effective_ready - state.pending, 0)
    if starting == 0 or startup_s <= 0:
        return float(state.effective_ready)
    since = max(now - (raised_at if raised_at is not None else now), 0.0)
    return state.effective_ready + starting * min(since / startup_s, 1.0)


@dataclass
class Ramp:
    """The router's prompt-token rate at the last ``ticks + 1`` ticks; ``rise`` continues it ``projection_s`` where it
    rose at each of them."""

    ticks: int
    projection_s: float
    readings: deque = field(default_factory=deque)  # (time, prompt tokens/s)

    def record(self, now: float, tokens_per_s: float) -> None:
        """This tick's reading (once per tick); a missing one ends the ramp."""
        if not _finite(tokens_per_s):
            self.readings.clear()
            return
        self.readings.append((now, tokens_per_s))
        while len(self.readings) > self.ticks + 1:
            self.readings.popleft()

    def rise(self) -> float:
        """Prompt tokens/s the rate will have risen by ``projection_s`` from now, at its mean rise per second over the
        readings, where it rose at each tick; else 0."""
        r = list(self.readings)
        if len(r) < self.ticks + 1 or any(b[1] <= a[1] for a, b in zip(r, r[1:])):
            return 0.0
        return (r[-1][1] - r[0][1]) / max(r[-1][0] - r[0][0], 1e-9) * self.projection_s
