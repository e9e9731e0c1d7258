"""KV-cache transfer between a prefill and a decode instance over their links (pure: the caller gives the times).

One model for both sides: the simulator schedules every P/D hand-off with ``schedule_transfer``, and the
mock worker's NIXL side channel (``pdserve.worker.nixl``) books each pull with the same function, so the
same transfers end at the same times in a simulation and on live mock workers
(``tests/worker/test_kvlink_live.py``).

Each instance has one link of ``gbps`` (its NIC / NVLink share). A transfer holds
the sender's and the receiver's link for its whole duration, so concurrent
transfers through one instance queue behind each other (FIFO in request order).
This is coarser than fair sharing but has the same throughput bound and the same
queueing growth near saturation, which is what decides goodput.

* ``serial``: the transfer starts when the prefill has finished (vLLM
  NixlConnector: the decode worker pulls the blocks after the prefill response).
* ``layerwise``: layer i's KV is sent while layer i+1 computes (Mooncake / LMCache
  layer-wise store), so transfer overlaps the prefill step; only what the link
  could not move during the step, and at least the last layer, is exposed after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(slots=True)
class Link:
    gbps: float
    free_at: float = 0.0
    bytes_moved: int = 0
    busy_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.gbps > 0:
            raise ValueError(f"link bandwidth must be positive, got {self.gbps} Gbit/s")

    @property
    def bytes_per_s(self) -> float:
        return self.gbps * 1e9 / 8

    def book(self, end_s: float, nbytes: int, duration_s: float) -> None:
        """Hold the link until ``end_s`` for a transfer of ``nbytes`` that moves for ``duration_s``."""
        self.free_at = max(self.free_at, end_s)
        self.bytes_moved += nbytes
        self.busy_s += duration_s


@dataclass(frozen=True, slots=True)
class Transfer:
    start_s: float
    end_s: float
    nbytes: int


def schedule_transfer(
    src: Link,
    dst: Link,
    nbytes: int,
    *,
    prefill_start_s: float,
    prefill_end_s: float,
    num_layers: int,
    mode: Literal["serial", "layerwise"],
) -> Transfer:
    """Reserve both links for one request's KV and return when it has arrived."""
    if nbytes <= 0:
        return Transfer(prefill_end_s, prefill_end_s, 0)
    rate = min(src.bytes_per_s, dst.bytes_per_s)
    duration = nbytes / rate
    if mode == "serial":
        start = max(prefill_end_s, src.free_at, dst.free_at)
        end = start + duration
    else:
        start = max(prefill_start_s, src.free_at, dst.free_at)
        end = max(start + duration, prefill_end_s + duration / max(num_layers, 1))
    src.book(end, nbytes, duration)
    dst.book(end, nbytes, duration)
    return Transfer(start, end, nbytes)


def serve_pull(src: Link, nbytes: int, now: float, *, receiver_gbps: float, receiver_free_in_s: float) -> Transfer:
    """The sender's half of a pull that reaches it at ``now`` (a NIXL READ: serial, the prefill is done).

    The receiver's link lives in another process: it says how long until that link is free and how fast
    it is, and books its own link from the answer (``Link.book``). ``src`` is booked here."""
    receiver = Link(receiver_gbps, free_at=now + max(0.0, receiver_free_in_s))
    return schedule_transfer(src, receiver, nbytes, prefill_start_s=now, prefill_end_s=now, num_layers=1,
                             mode="serial")
