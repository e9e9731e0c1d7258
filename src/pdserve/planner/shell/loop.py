"""The planner loop shell: read pools, observe, decide, actuate, every interval.

Sources and actuators are blocking (HTTP clients) and run in a worker thread so the
loop stays responsive to ``stopped``. A failure to read the pools skips the tick
(nothing sensible can be decided without knowing the current sizes); a failing
source becomes a held decision inside the policy; a failing actuator is logged and
retried on the next tick. Before its first tick a fresh policy is warmed up from the source's
history where the source keeps one (``warm_up``: Prometheus does, a direct scrape does not).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from pdserve.common.clock import WALL, Clock
from pdserve.planner.core.decision import ScalingDecision
from pdserve.planner.shell.metrics import PlannerMetrics
from pdserve.planner.core.observation import Observation, PoolState
from pdserve.planner.core.policy import PlannerPolicy
from pdserve.planner.core.warm_start import history_ticks, warm_start


class MetricSource(Protocol):
    def observe(self, now: float, prefill: PoolState, decode: PoolState) -> Observation: ...


class Actuator(Protocol):
    def pools(self) -> tuple[PoolState, PoolState]: ...

    def apply(self, decision: ScalingDecision) -> None: ...


@dataclass(frozen=True)
class Started:
    """How a policy started: the line for the log, and whether something failed on the way (the store, the
    pools or the replay), which the hosted planner posts as a Warning. A cold start by design (a source that
    keeps no history, a store with nothing yet) is not a failure."""

    line: str
    failed: bool = False


def warm_up(policy: PlannerPolicy, source: Any, prefill: PoolState, decode: PoolState, now: float) -> Started:
    """Replay the source's history of the policy's memory span into a fresh ``policy`` (``core.warm_start``)
    and say what happened. A source without history, or one that cannot answer, leaves the policy cold (as
    every planner before this started) and says why."""
    history = getattr(source, "history", None)
    if history is None:
        return Started("cold start: the metric source keeps no history")
    try:
        observations = history(history_ticks(policy.config, now), prefill, decode)
    except Exception as exc:  # an unreachable or failing store: start cold, as without one
        from pdserve.planner.shell.source_prometheus import failure_reason

        return Started(f"cold start: no history ({failure_reason(exc)})", failed=True)
    return Started(warm_start(policy, observations).describe())


async def start_warm(policy: PlannerPolicy, source: Any, actuator: Actuator, *, now: float, label: str,
                     logger: logging.Logger | Any) -> Started:
    """``warm_up`` off the event loop, with the pools as the actuator reads them now; logged either way (the
    operator's daemon and ``run_loop`` both start a policy through here), a failure as a warning."""
    try:
        prefill, decode = await asyncio.to_thread(actuator.pools)
    except Exception as exc:
        started = Started(f"cold start: cannot read the pools ({exc})", failed=True)
        logger.warning(f"planner {label}: {started.line}")
        return started
    try:
        started = await asyncio.to_thread(warm_up, policy, source, prefill, decode, now)
    except Exception as exc:  # a replay that fails must not keep the service from being planned
        started = Started(f"cold start: the replay failed ({exc!r})", failed=True)
        logger.exception(f"planner {label}: {started.line}")
        return started
    (logger.warning if started.failed else logger.info)(f"planner {label}: {started.line}")
    return started


async def sleep_unless_stopped(stopped: Any, seconds: float) -> None:
    """Sleep, waking early when ``stopped`` is set (kopf's DaemonStopped or an asyncio.Event)."""
    if stopped is None:
        await asyncio.sleep(seconds)
        return
    if isinstance(stopped, asyncio.Event):
        try:
            await asyncio.wait_for(stopped.wait(), timeout=seconds)
        except TimeoutError:
            pass
        return
    waiter = stopped.wait(seconds)  # kopf: `await stopped.wait(timeout)`
    if inspect.isawaitable(waiter):
        await waiter


def is_stopped(stopped: Any) -> bool:
    return bool(stopped is not None and stopped.is_set())


async def tick(policy: PlannerPolicy, source: MetricSource, actuator: Actuator, *, now: float,
               dry_run: bool = False, logger: logging.Logger | Any = None) -> tuple[Observation, ScalingDecision] | None:
    log = logger or logging.getLogger("pdserve.planner")
    try:
        prefill, decode = await asyncio.to_thread(actuator.pools)
    except Exception as exc:
        log.warning(f"planner: cannot read the pools, skipping this interval: {exc}")
        return None
    obs = await asyncio.to_thread(source.observe, now, prefill, decode)
    decision = policy.decide(obs, now)
    if not dry_run:
        try:
            await asyncio.to_thread(actuator.apply, decision)
        except Exception as exc:
            log.error(f"planner: applying {decision.prefill}P/{decision.decode}D failed: {exc}")
    return obs, decision


async def run_loop(policy: PlannerPolicy, source: MetricSource, actuator: Actuator, *, stopped: Any = None,
                   clock: Clock = WALL, metrics: PlannerMetrics | None = None,
                   service: str = "", namespace: str = "", dry_run: bool = False,
                   on_decision: Callable[[Observation, ScalingDecision], None] | None = None,
                   max_ticks: int | None = None, logger: logging.Logger | Any = None,
                   warm: bool = False) -> None:
    log = logger or logging.getLogger("pdserve.planner")
    if warm:
        await start_warm(policy, source, actuator, now=clock.now(), label=f"{namespace}/{service}", logger=log)
    n = 0
    while not is_stopped(stopped) and (max_ticks is None or n < max_ticks):
        # Decisions see wall time (metrics are timestamped with it); the interval is paced
        # on the monotonic clock so a wall-clock step neither skips nor doubles a tick.
        started = clock.monotonic()
        out = await tick(policy, source, actuator, now=clock.now(), dry_run=dry_run, logger=log)
        if out is not None:
            obs, d = out
            if metrics is not None:
                metrics.record(service, namespace, obs, d, policy.config.ttft_slo_ms, policy.config.itl_slo_ms)
            (log.warning if d.held else log.info)(f"planner {namespace}/{service}: {d.reason}")
            if on_decision is not None:
                on_decision(obs, d)
        n += 1
        if max_ticks is not None and n >= max_ticks:
            break
        await sleep_unless_stopped(stopped, max(0.0, policy.interval_s - (clock.monotonic() - started)))
