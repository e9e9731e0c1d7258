"""Kubernetes actuator and the hosted loop against kmock's emulated API server (real HTTP)."""

import asyncio
import logging

import pytest
from kubernetes import client

from pdserve.kube.constants import GROUP, PLURAL, VERSION
from pdserve.planner.hosting.actuator import KubernetesActuator
from pdserve.planner.core.decision import ScalingDecision
from pdserve.planner.hosting.daemon import run_hosted

RES = f"{GROUP}/{VERSION}/{PLURAL}"


def body(prefill=1, decode=2, **auto):
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "DisaggregatedService",
        "metadata": {"name": "svc", "namespace": "ns", "uid": "u-1"},
        "spec": {"model": {"name": "m"}, "engine": {"kind": "mock"},
                 "prefill": {"replicas": prefill}, "decode": {"replicas": decode},
                 "autoscaling": {"enabled": True, "intervalSeconds": 5, "prometheusUrl": "http://127.0.0.1:9",
                                 "prefill": {"min": 1, "max": 4}, "decode": {"min": 1, "max": 4}, **auto}},
    }


def pod(name, role, phase, ready):
    return {"metadata": {"name": name, "namespace": "ns", "labels": {"pdserve.io/service": "svc", "pdserve.io/role": role}},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


@pytest.fixture
def api(kmock):
    kmock.resources[RES] = {"kind": "DisaggregatedService", "namespaced": True}
    kmock.resources["v1/pods"] = {"kind": "Pod", "namespaced": True}
    kmock.resources["v1/events"] = {"kind": "Event", "namespaced": True}
    kmock.objects[RES, "ns", "svc"] = body()
    for name, role, phase, ready in [("p0", "prefill", "Running", True), ("d0", "decode", "Running", True),
                                     ("d1", "decode", "Pending", False)]:
        kmock.objects["v1/pods", "ns", name] = pod(name, role, phase, ready)
    return client.ApiClient(client.Configuration(host=str(kmock.url)))


def read(api):
    return client.CustomObjectsApi(api).get_namespaced_custom_object(GROUP, VERSION, "ns", PLURAL, "svc")


class Events(list):
    """What the actuator hands to kopf's Event poster: (uid, reason, message, warning)."""

    def __call__(self, involved, reason, message, *, warning=False):
        self.append((involved["metadata"]["uid"], reason, message, warning))


async def test_pools_and_one_patch(api):
    evs = Events()
    act = KubernetesActuator("ns", "svc", api, post_event=evs)
    p, d = await asyncio.to_thread(act.pools)
    assert (p.replicas, p.ready, p.pending) == (1, 1, 0)
    assert (d.replicas, d.ready, d.pending) == (2, 1, 1)
    dec = ScalingDecision(3, 4, "prefill 1->3, decode 2->4", previous=(1, 2), explanation={"x": float("nan")})
    await asyncio.to_thread(act.apply, dec)
    obj = await asyncio.to_thread(read, api)
    assert obj["spec"]["prefill"]["replicas"] == 3 and obj["spec"]["decode"]["replicas"] == 4
    assert obj["spec"]["model"] == {"name": "m"}  # a merge patch: nothing else touched
    st = obj["status"]["planner"]
    assert st["prefillReplicas"] == 3 and st["reason"].startswith("prefill 1->3")
    assert st["explanation"] == {}  # NaN -> null, and null in a merge patch removes the key
    assert [(uid, reason, warning) for uid, reason, _, warning in evs] == [("u-1", "Scaled", False)]


async def test_dry_run_writes_only_status(api):
    act = KubernetesActuator("ns", "svc", api, dry_run=True, post_event=Events())
    await asyncio.to_thread(act.pools)
    await asyncio.to_thread(act.apply, ScalingDecision(4, 4, "would scale", previous=(1, 2)))
    obj = await asyncio.to_thread(read, api)
    assert obj["spec"]["prefill"]["replicas"] == 1 and obj["status"]["planner"]["prefillReplicas"] == 4


async def test_hosted_holds_when_prometheus_is_down(api):
    stopped, evs = asyncio.Event(), Events()
    lines: list[str] = []
    log = logging.getLogger("t.hosted")
    log.setLevel(logging.INFO)
    log.addHandler(type("Lines", (logging.Handler,), {"emit": lambda self, r: lines.append(r.getMessage())})())
    task = asyncio.create_task(run_hosted("ns", "svc", stopped=stopped, logger=log, api_client=api,
                                          post_event=evs))
    for _ in range(200):
        obj = await asyncio.to_thread(read, api)
        if "status" in obj:
            break
        await asyncio.sleep(0.05)
    stopped.set()
    await asyncio.wait_for(task, 10)
    st = obj["status"]["planner"]
    assert st["held"] is True and st["holdReason"] == "metrics-unavailable" and "prometheus" in st["reason"]
    assert obj["spec"]["prefill"]["replicas"] == 1 and obj["spec"]["decode"]["replicas"] == 2
    assert any(reason == "PlannerHeld" and warning for _, reason, _, warning in evs)
    # the new planner first asked Prometheus for its history (core.warm_start) and started cold, saying why
    assert any(ln.startswith("planner ns/svc: cold start: no history (") for ln in lines), lines
    # ... and an Event on the resource says so, as a Warning (the history was not readable)
    started = [(msg, warning) for _, reason, msg, warning in evs if reason == "PlannerStarted"]
    assert len(started) == 1 and started[0][0].startswith("cold start: no history (") and started[0][1], evs


async def test_hosted_stops_when_the_resource_is_gone(kmock):
    kmock.resources[RES] = {"kind": "DisaggregatedService", "namespaced": True}
    api = client.ApiClient(client.Configuration(host=str(kmock.url)))
    await asyncio.wait_for(run_hosted("ns", "nope", stopped=asyncio.Event(), logger=logging.getLogger("t"),
                                      api_client=api), 10)


def test_the_cli_refuses_a_second_kubernetes_planner_host():
    from pdserve.planner.shell.cli import main

    # One host on a cluster: the operator's kopf daemon (leader-elected), never a side process.
    assert main(["run", "--actuator", "kubernetes", "--service", "svc"]) == 2
