"""Planner for many services: one ``run_hosted`` task per DisaggregatedService found.

This is what the chart's planner container runs (``pdserve planner run
--actuator=kubernetes --namespace=...`` without ``--service``). Every ``resync_s`` it
lists the resources in its namespaces (or cluster-wide), starts a task for each new
one and stops the tasks of deleted ones. Each task idles while its service has
autoscaling disabled.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from pdserve.planner.actuator_kubernetes import GROUP, PLURAL, VERSION
from pdserve.planner.hosted import run_hosted
from pdserve.planner.loop import is_stopped, sleep_unless_stopped


async def run_manager(namespaces: list[str] | None, *, stopped: asyncio.Event, logger: logging.Logger,
                      api_client: Any = None, resync_s: float = 15.0, **hosted_kwargs: Any) -> None:
    from kubernetes import client

    api = client.CustomObjectsApi(api_client)
    tasks: dict[tuple[str, str], tuple[asyncio.Task, asyncio.Event]] = {}

    def list_services() -> set[tuple[str, str]]:
        if namespaces is None:
            items = api.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]
        else:
            items = [i for ns in namespaces for i in api.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)["items"]]
        return {(i["metadata"]["namespace"], i["metadata"]["name"]) for i in items}

    try:
        while not is_stopped(stopped):
            try:
                found = await asyncio.to_thread(list_services)
            except Exception as exc:
                logger.warning(f"planner: cannot list DisaggregatedServices: {exc}")
                found = set(tasks)  # keep what runs; retry next time
            for key in found - set(tasks):
                ev = asyncio.Event()
                task = asyncio.create_task(run_hosted(*key, stopped=ev, logger=logger, api_client=api_client, **hosted_kwargs))
                tasks[key] = (task, ev)
                logger.info(f"planner: started for {key[0]}/{key[1]}")
            for key in set(tasks) - found:
                task, ev = tasks.pop(key)
                ev.set()
                await asyncio.wait([task], timeout=10)
                logger.info(f"planner: stopped for {key[0]}/{key[1]}")
            for key, (task, _ev) in list(tasks.items()):
                if task.done():  # ended by itself (resource gone) or crashed: restart on the next pass
                    tasks.pop(key)
                    if task.exception() is not None:
                        logger.error(f"planner {key[0]}/{key[1]} crashed: {task.exception()!r}")
            await sleep_unless_stopped(stopped, resync_s)
    finally:
        for _task, ev in tasks.values():
            ev.set()
        if tasks:
            await asyncio.wait([t for t, _ in tasks.values()], timeout=10)
