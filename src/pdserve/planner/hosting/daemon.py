"""The planner as the operator hosts it: one loop per DisaggregatedService.

    await run_hosted(namespace, name, stopped=stopped, logger=logger, api_client=None, options=HostOptions())

The only way pdserve plans a resource on Kubernetes: the operator runs it in a kopf
daemon per DisaggregatedService (kopf starts and stops it with the resource, and only
the replica that holds the operator's Lease runs kopf at all). Each interval it re-reads the resource (so edits to
spec.slo / spec.autoscaling apply on the next interval), decides with a policy whose
history survives those edits, and patches the resource. A new policy (the daemon's start, after an operator
restart or a lost Lease, or a changed profile) first replays its memory span from Prometheus
(``loop.warm_up``), so a restart neither drops a burst reserve nor skips the stabilisation. It returns when ``stopped``
is set (kopf's DaemonStopped, or any object with ``is_set()`` and ``wait(timeout)``)
or when the resource is deleted. While autoscaling is disabled it idles.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

from pdserve.common.clock import WALL, Clock
from pdserve.kube import events
from pdserve.planner.hosting.actuator import KubernetesActuator
from pdserve.planner.hosting.options import HostOptions
from pdserve.planner.shell.loop import is_stopped, sleep_unless_stopped, start_warm, tick
from pdserve.planner.shell.metrics import PlannerMetrics
from pdserve.planner.core.policy import PlannerPolicy
from pdserve.planner.core.predictors import make_predictor
from pdserve.planner.shell.source_prometheus import PrometheusSource, PromQL
from pdserve.planner.core.spec_config import (
    load_profile_for,
    rate_window,
    settings_from_body,
)

METRICS = PlannerMetrics()  # one registry per process; the operator serves it with --metrics-port


async def run_hosted(namespace: str, name: str, *, stopped: Any, logger: logging.Logger | Any,
                     api_client: Any = None, options: HostOptions = HostOptions(),
                     clock: Clock = WALL, post_event: events.Poster = events.post) -> None:
    from kubernetes.client.exceptions import ApiException

    retry_s = options.retry_s
    actuator = KubernetesActuator(namespace, name, api_client, dry_run=options.dry_run, clock=clock, post_event=post_event)
    policy: PlannerPolicy | None = None
    profile_key: tuple | None = None
    source: PrometheusSource | None = None
    while not is_stopped(stopped):
        try:
            body = await asyncio.to_thread(actuator.read)
        except ApiException as exc:
            if exc.status == 404:
                logger.info(f"planner {namespace}/{name}: resource gone, stopping")
                return
            logger.warning(f"planner {namespace}/{name}: cannot read the resource: {exc.reason}")
            await sleep_unless_stopped(stopped, retry_s)
            continue
        try:
            settings = settings_from_body(body, default_prometheus_url=options.prometheus_url,
                                          default_interval_s=options.interval_s)
        except ValueError as exc:
            logger.error(f"planner {namespace}/{name}: {exc}")
            await sleep_unless_stopped(stopped, retry_s)
            continue
        if not settings.enabled:
            await sleep_unless_stopped(stopped, settings.config.interval_s)
            continue
        query = PromQL(f'namespace="{namespace}",pdserve_service="{name}"',
                       window=rate_window(settings.config.interval_s, options.scrape_interval_s),
                       quantile=min(max(settings.config.attainment, 0.5), 0.99),
                       burst_budget_s=settings.config.burst_budget_s,
                       burst_fit_budget_s=settings.config.burst_fit_budget_s)
        if source is None or source.url != settings.prometheus_url:
            source = PrometheusSource(settings.prometheus_url, query)
        source.query = query
        key = (settings.profile_configmap, settings.perf_profile, settings.config.prefill_tp, settings.config.decode_tp)
        if policy is None or key != profile_key:
            try:
                profile = await asyncio.to_thread(load_profile_for, settings, namespace, actuator.core)
            except Exception as exc:
                logger.error(f"planner {namespace}/{name}: no capacity profile: {exc}")
                await sleep_unless_stopped(stopped, retry_s)
                continue
            policy, profile_key = PlannerPolicy(settings.config, profile), key
            if options.warm_start:  # start where the planner before this one was (core.warm_start)
                how = await start_warm(policy, source, actuator, now=clock.now(), label=f"{namespace}/{name}",
                                       logger=logger)
                # seen with kubectl describe; a Warning where the store, the pools or the replay failed
                actuator.event("PlannerStarted", how.line, warning=how.failed)
        elif dataclasses.asdict(policy.config) != dataclasses.asdict(settings.config):
            # Keep the history; the new bounds / SLOs apply from this interval.
            if settings.config.predictor != policy.config.predictor:
                policy.predictor = make_predictor(settings.config.predictor, explode_ratio=settings.config.explode_ratio)
            policy.config = settings.config
        started = clock.monotonic()
        try:
            out = await tick(policy, source, actuator, now=clock.now(), logger=logger)
        except Exception as exc:  # a bug must not end the service's planning for good
            logger.exception(f"planner {namespace}/{name}: interval failed: {exc!r}")
            out = None
        if out is not None:
            obs, d = out
            METRICS.record(name, namespace, obs, d, settings.config.ttft_slo_ms, settings.config.itl_slo_ms)
            (logger.warning if d.held else logger.info)(f"planner {namespace}/{name}: {d.reason}")
        await sleep_unless_stopped(stopped, max(0.0, settings.config.interval_s - (clock.monotonic() - started)))
