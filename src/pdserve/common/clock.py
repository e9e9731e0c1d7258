"""One clock for the whole project: wall time for services, virtual time for the simulator and tests.

Pure cores take ``now`` as an argument; the shells that call them own a ``Clock`` and read it
once per step. ``now()`` is epoch seconds (what timestamps, Kubernetes conditions and
Prometheus queries need); ``monotonic()`` is for measuring intervals and deadlines, which must
not jump when the wall clock is set. A ``VirtualClock`` moves only when told to, so a
simulation or a test decides exactly what time every decision sees.
"""

from __future__ import annotations

import time
from datetime import datetime, UTC
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the Unix epoch (wall time)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards; only differences are meaningful."""
        ...


class WallClock:
    """The real clocks of the machine."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def __repr__(self) -> str:
        return "WallClock()"


class VirtualClock:
    """A clock that moves only when ``advance`` or ``set`` is called.

    ``now()`` and ``monotonic()`` move together: virtual time has no wall-clock steps, so the
    monotonic reading is the epoch reading (starting at ``start``)."""

    def __init__(self, start: float = 0.0):
        self._t = float(start)

    def now(self) -> float:
        return self._t

    def monotonic(self) -> float:
        return self._t

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError(f"a clock cannot go backwards: advance({seconds})")
        self._t += seconds
        return self._t

    def set(self, t: float) -> None:
        if t < self._t:
            raise ValueError(f"a clock cannot go backwards: set({t}) < {self._t}")
        self._t = float(t)

    def __repr__(self) -> str:
        return f"VirtualClock({self._t})"


WALL = WallClock()


def to_utc(t: float) -> datetime:
    """Epoch seconds as an aware UTC datetime."""
    return datetime.fromtimestamp(t, tz=UTC)


def utc(clock: Clock) -> datetime:
    """The clock's ``now()`` as an aware UTC datetime (for Kubernetes timestamps)."""
    return to_utc(clock.now())


def rfc3339(t: float) -> str:
    """Epoch seconds as Kubernetes writes timestamps (second precision, ``Z``)."""
    return to_utc(t).strftime("%Y-%m-%dT%H:%M:%SZ")
