"""What the HA test records from the API server's watches, and which planner decision each replicas write was.

The hosted planner writes a decision in two patches: the spec's replica counts, then status.planner
with the decision's own time (the planner's clock at the tick's start). So a replicas write is the
decision of the first status.planner write that follows it, provided the same leader wrote both.

The HA test kills the leader the moment its replicas write shows, which is often before that leader's
status write (a few ms later, after it posts a "Scaled" Event). The old attribution, "the first status
write after it", then gave the killed leader's write the new leader's first decision; when that
decision also changed the replicas, two writes 10 s apart looked like one decision written twice
(session 4: replicas writes at -0.1 s and +10.5 s around the kill, decision gaps [5.01, 15.74, ...]).
Attributing within one leader's term (between Lease hand-overs) removes that, and keeps the check
that matters: a second writer in the same term would still map two writes to one decision.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field


@dataclass
class Audit:
    """Every change the API server reports, stamped on arrival (monotonic)."""

    replicas: list[tuple[float, int, int]] = field(default_factory=list)  # spec writes that changed replicas
    # status.planner writes: arrival, and the decision's own time (the planner's clock at the tick's start)
    planner: list[tuple[float, float]] = field(default_factory=list)
    deployments: dict[str, list[int]] = field(default_factory=dict)  # spec.replicas per Deployment, in order
    holders: list[tuple[float, str, int]] = field(default_factory=list)  # Lease holder changes
    errors: list[str] = field(default_factory=list)
    # The planner's clock is this machine's wall clock: arrival (monotonic) + offset is the same clock.
    wall_offset: float = field(default_factory=lambda: time.time() - time.monotonic())


@dataclass(frozen=True)
class WriteDecision:
    arrival: float  # monotonic
    decided: float  # the decision's time on the planner's clock
    own_status: bool  # False: its leader never wrote the status of this decision (killed in between)


def decisions_of_replica_writes(writes: list[float], planner: list[tuple[float, float]], handovers: list[float],
                                wall_offset: float) -> list[WriteDecision]:
    """For each replicas write (arrival, monotonic): the decision it belongs to.

    ``planner``: (arrival, decision time) of each status.planner write; ``handovers``: arrivals of
    the Lease's holder changes. A write whose leader wrote no status before its term ended gets its
    own arrival, on the planner's clock, as the decision time: the decision was made before it, so
    against the next decision this is the strict side of the bound."""
    out = []
    for w in writes:
        term_end = min((h for h in handovers if h > w), default=math.inf)
        decided = next((d for t, d in planner if w <= t < term_end), None)
        out.append(WriteDecision(w, decided if decided is not None else w + wall_offset, decided is not None))
    return out
