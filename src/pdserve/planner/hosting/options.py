"""The operator-wide settings of the hosted planner (light: the operator imports it at start)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HostOptions:
    """Operator-wide planner settings; a resource's own spec.autoscaling wins over them."""

    prometheus_url: str | None = None  # for resources whose spec names none
    interval_s: float | None = None  # for resources whose spec names none
    dry_run: bool = False  # decide and write status.planner, never the replicas
    scrape_interval_s: float = 15.0  # Prometheus's, to size rate() windows
    retry_s: float = 10.0  # after a failed read of the resource or its profile
    warm_start: bool = True  # a new policy first replays its history from Prometheus (planner core.warm_start)
