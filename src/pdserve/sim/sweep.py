"""Goodput of several configurations on one workload (the DistServe comparison)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pdserve.sim.config import SimConfig
from pdserve.sim.goodput import GoodputResult, search_goodput
from pdserve.sim.instance import pool_spec
from pdserve.sim.simulator import run_simulation
from pdserve.sim.traces import Trace


def gpu_count(config: SimConfig) -> int:
    if config.topology == "disagg":
        return (
            config.prefill_instances * pool_spec(config, "prefill").tp
            + config.decode_instances * pool_spec(config, "decode").tp
        )
    return config.instances * pool_spec(config, "colocated").tp


@dataclass(slots=True)
class Compared:
    config: SimConfig
    gpus: int
    goodput: GoodputResult

    @property
    def per_gpu(self) -> float:
        return self.goodput.goodput_rps / self.gpus if self.gpus else 0.0


def probe_window(trace: Trace, scale: float, duration_s: float, min_requests: int, max_requests: int) -> Trace:
    """The trace's first ``duration_s`` seconds *at the probed rate* (bounded in requests).

    A fixed request count would shrink to a burst of a few seconds at high rate
    scales, where queues never reach steady state and goodput is overstated.
    """
    horizon = duration_s * scale
    n = sum(1 for r in trace.requests if r.arrival_s <= horizon)
    return trace.head(min(max(n, min_requests), max_requests))


def goodput_of(
    trace: Trace,
    config: SimConfig,
    *,
    rel_tol: float = 0.03,
    max_probes: int = 16,
    start: float = 1.0,
    probe_duration_s: float = 60.0,
    min_requests: int = 200,
    max_requests: int = 5000,
    on_probe: Callable[[str, float, float], None] | None = None,
) -> Compared:
    """Binary-search ``config``'s goodput on ``trace`` at ``config.slo``.

    Each probe replays the trace's first ``probe_duration_s`` seconds at the probed
    rate (between ``min_requests`` and ``max_requests`` requests). Goodput is the
    rate scale found x the mean rate of the whole ``trace``.
    """

    def attainment(scale: float) -> float:
        window = probe_window(trace, scale, probe_duration_s, min_requests, max_requests)
        a = run_simulation(window, config, rate_scale=scale).summary.attainment
        if on_probe is not None:
            on_probe(config.label, scale, a)
        return a

    res = search_goodput(
        attainment, trace.mean_rate, config.slo.target, start=start, rel_tol=rel_tol, max_probes=max_probes
    )
    return Compared(config, gpu_count(config), res)


def compare(
    trace: Trace,
    configs: Sequence[SimConfig],
    *,
    on_probe: Callable[[str, float, float], None] | None = None,
    **search: float,
) -> list[Compared]:
    return [goodput_of(trace, c, on_probe=on_probe, **search) for c in configs]  # type: ignore[arg-type]


def same_gpus_baselines(config: SimConfig) -> list[SimConfig]:
    """Colocated, chunked and a disaggregated split with the GPUs of ``config``.

    ``config`` itself is one of them: a disagg ``config`` is the split; for a
    colocated / chunked one the split is half prefill, half decode.
    """
    gpus = gpu_count(config)
    tp = pool_spec(config, "decode" if config.topology == "disagg" else "colocated").tp
    n = max(1, gpus // tp)
    base = {
        k: v for k, v in config.model_dump().items()
        if k not in ("topology", "instances", "prefill_instances", "decode_instances")
    }
    out = [
        config if config.topology == "colocated" else SimConfig(**base, topology="colocated", instances=n),
        config if config.topology == "chunked" else SimConfig(**base, topology="chunked", instances=n),
    ]
    if config.topology == "disagg":
        out.append(config)
    elif n >= 2:
        p = n // 2
        out.append(SimConfig(**base, topology="disagg", prefill_instances=p, decode_instances=n - p))
    return out
