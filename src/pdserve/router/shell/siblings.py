"""Readiness of a set of router processes (``pdserve router --processes N``), for ``/health``.

The kernel hands each connection to any of the N processes sharing the port, and each reads worker discovery on its
own (a file polled every 0.5 s, a Kubernetes watch). ``/health`` answered by one process that has decode workers
said nothing of another that had none yet, so a readiness probe (or the demo) passed while that other process still
answered requests 503 "no worker available" (fresh-clone CI, session 40). Each process therefore leaves a marker in a
folder the supervisor gives them all, holding how many decode workers its discovery lists, and ``/health`` is ok only
when every one of the N has one with at least one. Discovery-listed, not healthy: a worker's failures and cool-downs
are each process's own reading and its own ``/health`` speaks for them.

The supervisor stops the whole set when any process dies, so a marker never outlives its set.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

ENV = "PDSERVE_ROUTER_SIBLINGS"  # "<folder>:<N>", set by the supervisor for each process


@dataclass
class Siblings:
    folder: Path
    count: int
    me: str  # this process's marker name (its pid)
    # The count last written: a Kubernetes watch calls back on every pod event, most of which leave the decode
    # count as it was, and the marker is rewritten only when it changes.
    marked: int | None = field(default=None, compare=False)

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Siblings | None:
        """The set this process belongs to, or None when it runs alone."""
        value = (os.environ if environ is None else environ).get(ENV)
        if not value:
            return None
        folder, _, count = value.rpartition(":")
        if not folder or not count.isdigit() or int(count) < 1:
            raise ValueError(f"{ENV}={value!r}: expected <folder>:<process count>")
        return cls(Path(folder), int(count), str(os.getpid()))

    @staticmethod
    def env_value(folder: Path, count: int) -> str:
        return f"{folder}:{count}"

    def mark(self, decode_workers: int) -> None:
        """Record how many decode workers this process's discovery lists (atomic: a reader sees old or new)."""
        if decode_workers == self.marked:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f".{self.me}.tmp"
        tmp.write_text(str(decode_workers))
        tmp.replace(self.folder / self.me)
        self.marked = decode_workers

    def not_ready(self) -> str | None:
        """Why the set is not ready (how many of the N have a decode worker), or None when every one has."""
        ready = 0
        try:
            markers = [p for p in self.folder.iterdir() if not p.name.startswith(".")]
        except OSError:
            markers = []
        for p in markers:
            try:
                ready += int(p.read_text() or 0) > 0
            except (OSError, ValueError):
                continue  # being replaced, or gone with a stopping set: not ready
        if ready >= self.count:
            return None
        return f"{ready} of {self.count} router processes have a decode worker"
