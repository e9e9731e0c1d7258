"""Chaos on the real control plane: a GPU node hosting a decode worker is deleted, with traffic.

The machine dies (its worker process SIGKILLed) and its Node object is deleted, as a cloud
controller does for a vanished instance. Kubernetes keeps counting the pod as Ready until its
pod GC deletes it (a 40 s quarantine, then its next pass: ~40-80 s), then the ReplicaSet's
replacement lands on the spare GPU node. The resource's status must say so at once (Ready
False, Degraded NodeLost naming the node), the router must keep the clients' requests
whole, and everything converges back. Prints one ``CHAOS gpu-node-deleted: {json}`` line.

The planner runs (hosted in the operator, a real Prometheus scraping the pods as the chart's
PodMonitors would): while the node is lost and after, it must not flap (each pool's replicas
move one way, at most one write per planner interval) and the decode pool must not shrink.
Its minimum is the decode pool's size (2): a scale-down below it is refused by the
configuration, not by the planner's judgement; what the planner decides is printed.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import e2e_env
import pytest
from chaos_harness import (StatusLog, Traffic, assert_recovered, decode_placement, kill_pod_processes, moved_off, pin_decode,
                           service_body, start_stack, wait)
from kubernetes import client
from operator_harness import GROUP, PLURAL, VERSION
from prometheus_server import PrometheusServer, available

pytestmark = [pytest.mark.controlplane, pytest.mark.prometheus, pytest.mark.timeout(300)]
# Kubernetes' pod GC: 40 s quarantine for pods of a deleted node, checked every 20 s.
POD_GC_S = 40.0
INTERVAL_S = 5


@contextlib.contextmanager
def _prometheus(core: client.CoreV1Api, namespace: str, work: Path) -> Iterator[PrometheusServer]:
    """A real Prometheus scraping the namespace's pods with the chart's PodMonitor relabelings
    (file SD written from the pod list, as Kubernetes SD would find them)."""
    if not available():
        pytest.fail("Debian's prometheus binary is needed (make system-deps)", pytrace=False)
    sd_file = work / "kubernetes_sd.json"
    with e2e_env.kubernetes_sd(sd_file, e2e_env.pod_lister(core, [namespace])):
        with PrometheusServer(e2e_env.podmonitor_scrape_configs(sd_file, namespace)) as prom:
            yield prom


def test_gpu_node_deleted_pods_rescheduled_status_says_so(
    kube_cluster: Any, admin: client.ApiClient, operator_kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    # Four dedicated 1-GPU nodes for the decode pool (tainted: nothing else lands there): two
    # host the decode workers, two are spare (the replacement, and a third replica should the
    # planner add one).
    label = {"pdserve.io/chaos-pool": namespace}
    nodes = kube_cluster.add_gpu_nodes(4, gpus=1, prefix=f"gpu-{namespace}", labels=label, taint=True)
    core = client.CoreV1Api(admin)
    exit_stack = contextlib.ExitStack()
    try:
        prom = exit_stack.enter_context(_prometheus(core, namespace, tmp_path))
        stack = exit_stack.enter_context(start_stack(kube_cluster, admin, operator_kubeconfig, namespace, tmp_path))
        body = service_body(namespace)
        body["spec"]["autoscaling"].update(enabled=True, intervalSeconds=INTERVAL_S, prometheusUrl=prom.url,
                                           prefill={"min": 1, "max": 2}, decode={"min": 2, "max": 3})
        pin_decode(body, label, [])
        stack.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
        wait("the service serving", lambda: stack.converged(), 120, stack)
        stack.wait_serving()
        placed = decode_placement(stack, nodes)
        victim = sorted(placed)[0]

        with StatusLog(stack.custom, namespace) as status, Traffic(stack.router_url()) as traffic:
            wait("traffic flowing", lambda: traffic.completed() >= 10, 30, stack)
            wait("two planner decisions on metrics", lambda: len([d for d in status.decisions if not d["held"]]) >= 2, 12 * INTERVAL_S, stack)
            # The machine dies, then its Node object goes.
            doomed = kill_pod_processes(stack, placed[victim])
            core.delete_node(victim)
            t0 = time.monotonic()

            def says_node_lost() -> bool:
                conds = {c["type"]: c for c in (stack.dsvc().get("status") or {}).get("conditions") or []}
                return conds["Degraded"]["reason"] == "NodeLost" and victim in conds["Degraded"]["message"] and conds["Ready"]["status"] == "False"

            wait("the status to report the lost node", says_node_lost, 30, stack)
            status_after_s = time.monotonic() - t0
            replaced_status = stack.dsvc()["status"]["decode"]

            wait("the decode pod rescheduled onto a spare node and the service converged", lambda: moved_off(stack, victim), POD_GC_S + 80, stack)
            rescheduled_s = time.monotonic() - t0
            back_s = round(time.monotonic() - status.t0, 1)
            at = traffic.completed()
            wait("requests completing after the reschedule", lambda: traffic.completed() >= at + 10, 30, stack)
            lost_s = round(t0 - status.t0, 1)  # StatusLog's times are seconds since it started
            n = len(status.decisions)
            wait("two more planner decisions after the reschedule", lambda: len(status.decisions) >= n + 2, 6 * INTERVAL_S, stack)
        window = [d for d in status.decisions if d["at"] >= lost_s]
        # What the planner saw (decode pods' request rate, sum(rate(...[1m]))) against what the
        # clients completed over the same minute, for the decisions while a decode pod was lost.
        seen_vs_clients = [(d["at"], d["requestRate"], round(traffic.rate(status.t0 + d["at"] - 60, status.t0 + d["at"]), 2))
                           for d in window if d["at"] <= back_s and not d["held"]]
        summary = {**traffic.counts.as_dict(), "status_seen": status.seen, "node_deleted_at_s": lost_s, "rescheduled_at_s": back_s,
                   "spec_replicas_seen": status.replicas,
                   "planner_decisions_since_deletion": [(d["at"], "held:" + d["holdReason"] if d["held"] else "decided", d["prefill"], d["decode"])
                                                        for d in window],
                   "planner_rate_vs_clients_while_lost": seen_vs_clients, "node_lost_message": status.messages.get("Degraded=True/NodeLost"),
                   "decode_status_while_lost": replaced_status, "status_said_node_lost_after_s": round(status_after_s, 1),
                   "rescheduled_after_s": round(rescheduled_s, 1), "killed": [r.pod for r in doomed]}
        print(f"CHAOS gpu-node-deleted: {json.dumps(summary)}")
        assert doomed, "no process ran on the deleted node"
        assert not traffic.counts.failed, summary
        assert replaced_status["ready"] == 1 and replaced_status["desired"] == 2, summary
        assert_recovered(status, summary)
        # The planner kept deciding through the loss, and did not flap: per pool one direction,
        # and replica writes at least one interval apart (decision times, not arrival times).
        assert len(window) >= 8, summary
        for pool in (1, 2):
            values = [r[pool] for r in status.replicas]
            assert values == sorted(values) or values == sorted(values, reverse=True), f"replicas flapped: {status.replicas}"
        assert min(r[2] for r in status.replicas) >= 2, summary
        # The missing pod's metrics did not hide the load: the rate the planner sized from stayed
        # at least half of what the clients completed (a held decision writes nothing, also fine).
        assert seen_vs_clients and all(r is not None and r >= 0.5 * c for _, r, c in seen_vs_clients), summary
        changes = [d["decided"] for prev, d in itertools.pairwise(status.decisions) if (prev["prefill"], prev["decode"]) != (d["prefill"], d["decode"])]
        assert all(b - a >= 0.95 * INTERVAL_S for a, b in itertools.pairwise(changes)), summary
    finally:
        exit_stack.close()
        for n in nodes:
            try:
                core.delete_node(n)
            except client.ApiException:
                pass
