"""Kubernetes discovery against kmock's emulated API server (real HTTP)."""

from __future__ import annotations

import asyncio

from kubernetes import client

from pdserve.router.shell.discovery import Endpoints, KubernetesWatcher
from tests.router.test_discovery import pod


async def test_watcher_tracks_ready_pods_and_drops_terminating_ones(kmock) -> None:
    kmock.resources["v1/pods"] = {"kind": "Pod", "namespaced": True}
    kmock.objects["v1/pods", "ns", "p0"] = pod("p0", "prefill", "10.0.0.1")
    kmock.objects["v1/pods", "ns", "d0"] = pod("d0", "decode", "10.0.0.2")
    kmock.objects["v1/pods", "ns", "d1"] = pod("d1", "decode", "10.0.0.3", ready=False)
    other = pod("x0", "decode", "10.0.0.9")
    other["metadata"]["labels"]["pdserve.io/service"] = "another"
    kmock.objects["v1/pods", "ns", "x0"] = other
    seen: list[Endpoints] = []
    api = client.ApiClient(client.Configuration(host=str(kmock.url)))
    # kmock streams the initial ADDED events but not later changes, so a short read
    # timeout makes the watcher relist (its recovery path) about every second.
    w = KubernetesWatcher("svc", "ns", seen.append, asyncio.get_running_loop(), api_client=api, read_timeout_s=1.0)
    w.start()
    try:
        async def until(pred, what: str) -> Endpoints:
            for _ in range(200):
                if seen and pred(seen[-1]):
                    return seen[-1]
                await asyncio.sleep(0.05)
            raise AssertionError(f"timed out waiting for {what}; last: {seen[-1] if seen else None}")

        eps = await until(lambda e: len(e.decode) == 1, "the first listing")
        assert [e.url for e in eps.prefill] == ["http://10.0.0.1:8000"]
        assert [e.url for e in eps.decode] == ["http://10.0.0.2:8000"]
        assert eps.decode[0].kv_events == "tcp://10.0.0.2:5557"
        core = client.CoreV1Api(api)
        ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
        await asyncio.to_thread(core.patch_namespaced_pod, "d1", "ns", ready)  # becomes Ready
        await until(lambda e: len(e.decode) == 2, "the pod turning Ready")
        terminating = {"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}
        await asyncio.to_thread(core.patch_namespaced_pod, "d0", "ns", terminating)
        await until(lambda e: [x.url for x in e.decode] == ["http://10.0.0.3:8000"], "the terminating pod")
    finally:
        w.stop()
