"""How many router processes a container's CPU allows (``pdserve router --processes``).

One router process is one event loop on one core: at 256 simultaneous streams it is the
bottleneck (issue 14 measured TTFT p99 1.4 s with one process, 0.36 s with two). The
default is therefore one process per whole CPU the container may use: its cgroup quota
(v2 ``cpu.max``, v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``), else the CPUs the
process may run on. The operator passes ``--processes`` from the router's CPU request
(:func:`processes_for_cpu`), since a pod with a request but no limit has no quota.
Pure functions over file contents; the caller reads the files.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def quota_v2(cpu_max: str) -> float | None:
    """CPUs from cgroup v2 ``cpu.max`` ("<quota> <period>", quota "max" = unlimited)."""
    parts = cpu_max.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    quota, period = int(parts[0]), int(parts[1])
    return quota / period if quota > 0 and period > 0 else None


def quota_v1(cfs_quota_us: str, cfs_period_us: str) -> float | None:
    """CPUs from cgroup v1 CFS files (quota -1 = unlimited)."""
    quota, period = int(cfs_quota_us.strip()), int(cfs_period_us.strip())
    return quota / period if quota > 0 and period > 0 else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def cgroup_cpus(root: Path = CGROUP_ROOT, read: Callable[[Path], str | None] = _read) -> float | None:
    """The container's CPU quota in CPUs, or None when it has none (or no cgroup is visible)."""
    v2 = read(root / "cpu.max")
    if v2 is not None:
        try:
            return quota_v2(v2)
        except ValueError:
            return None
    for base in (root / "cpu", root / "cpu,cpuacct", root):  # v1 mount layouts
        q, p = read(base / "cpu.cfs_quota_us"), read(base / "cpu.cfs_period_us")
        if q is not None and p is not None:
            try:
                return quota_v1(q, p)
            except ValueError:
                return None
    return None


def host_cpus() -> int:
    """CPUs this process may run on (its affinity mask, e.g. a cpuset), else the host's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def default_processes(root: Path = CGROUP_ROOT, read: Callable[[Path], str | None] = _read,
                      host: Callable[[], int] = host_cpus) -> tuple[int, str]:
    """(processes, why): whole CPUs of the cgroup quota (at least 1), capped by the CPUs the
    process may use; without a quota, those CPUs."""
    cpus = cgroup_cpus(root, read)
    n_host = max(1, host())
    if cpus is None:
        return n_host, f"{n_host} usable CPUs (no cgroup CPU quota)"
    n = max(1, min(n_host, math.floor(cpus)))
    return n, f"cgroup CPU quota {cpus:g}"


def parse_cpu_quantity(q: int | float | str) -> float:
    """A Kubernetes CPU quantity in cores: 2, "1.5", "250m"."""
    s = str(q).strip()
    if s.endswith("m"):
        return int(s[:-1]) / 1000
    value = float(s)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"not a CPU quantity: {q!r}")
    return value


def processes_for_cpu(request: int | float | str | None) -> int:
    """Router processes for a container with this CPU request: one per whole core, at least 1."""
    if request is None:
        return 1
    return max(1, math.floor(parse_cpu_quantity(request) + 1e-9))
