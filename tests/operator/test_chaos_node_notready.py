"""Chaos on the real control plane: a GPU node hosting a decode worker goes NotReady, with traffic.

The machine stops (its worker process SIGKILLed, kwok stops heartbeating it) but its Node object
stays, as when a VM hangs or is cut off. The node-lifecycle controller then marks it Ready=Unknown
after --node-monitor-grace-period (50 s by default), taints it node.kubernetes.io/unreachable, and
evicts its pods once their tolerationSeconds run out (on a real cluster they then stay Terminating
until the node is back or deleted) while their ReplicaSet's replacement lands on a spare node. Here the test writes the
Ready=Unknown condition itself instead of waiting out the grace period (what the controller would
write: NodeStatusUnknown), and the decode pool tolerates unreachable for 5 s instead of 300: the
rest, taint, eviction, rescheduling, is Kubernetes'. The status must say so at once (Degraded
NodeLost naming the node and "not ready"), the router must keep the clients' requests whole, and
everything converges back. Prints one ``CHAOS gpu-node-notready: {json}`` line.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import time
from pathlib import Path
from typing import Any

import pytest
from chaos_harness import (StatusLog, Traffic, assert_recovered, decode_placement, kill_pod_processes, moved_off, pin_decode,
                           service_body, start_stack, wait)
from controlplane.nodes import KWOK_ANNOTATION
from kubernetes import client
from operator_harness import GROUP, PLURAL, VERSION

pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(240)]
EVICT_AFTER_S = 5  # the decode pool's tolerationSeconds for an unreachable / not-ready node


def _node_unknown(core: client.CoreV1Api, name: str) -> None:
    """kwok stops managing the node (no more heartbeats), and its Ready condition turns Unknown."""
    core.patch_node(name, {"metadata": {"annotations": {KWOK_ANNOTATION: None}}})
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    node = core.read_node_status(name)
    conditions = [c for c in client.ApiClient().sanitize_for_serialization(node.status.conditions or []) if c["type"] != "Ready"]
    conditions.append({"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown", "message": "Kubelet stopped posting node status.",
                       "lastHeartbeatTime": now, "lastTransitionTime": now})
    core.patch_node_status(name, {"status": {"conditions": conditions}})


def test_gpu_node_not_ready_pods_evicted_and_rescheduled_status_says_so(
    kube_cluster: Any, admin: client.ApiClient, operator_kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    # Three dedicated 1-GPU nodes for the decode pool (tainted: nothing else lands there): two host
    # the decode workers, one is the spare.
    label = {"pdserve.io/chaos-pool": namespace}
    nodes = kube_cluster.add_gpu_nodes(3, gpus=1, prefix=f"nr-{namespace}", labels=label, taint=True)
    core = client.CoreV1Api(admin)
    exit_stack = contextlib.ExitStack()
    try:
        stack = exit_stack.enter_context(start_stack(kube_cluster, admin, operator_kubeconfig, namespace, tmp_path))
        body = service_body(namespace)
        pin_decode(body, label, [{"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": EVICT_AFTER_S}
                                 for key in ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")])
        stack.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
        wait("the service serving", stack.converged, 120, stack)
        stack.wait_serving()
        placed = decode_placement(stack, nodes)
        victim = sorted(placed)[0]

        with StatusLog(stack.custom, namespace) as status, Traffic(stack.router_url()) as traffic:
            wait("traffic flowing", lambda: traffic.completed() >= 10, 30, stack)
            doomed = kill_pod_processes(stack, placed[victim])
            _node_unknown(core, victim)
            t0 = time.monotonic()

            def says_not_ready() -> bool:
                conds = {c["type"]: c for c in (stack.dsvc().get("status") or {}).get("conditions") or []}
                degraded = conds.get("Degraded") or {}
                return (degraded.get("reason") == "NodeLost" and victim in degraded.get("message", "")
                        and "not ready" in degraded.get("message", "") and conds["Ready"]["status"] == "False")

            wait("the status to report the node not ready", says_not_ready, 30, stack)
            status_after_s = time.monotonic() - t0
            lost_status = stack.dsvc()["status"]["decode"]

            def tainted() -> bool:
                return any(t.key == "node.kubernetes.io/unreachable" for t in core.read_node(victim).spec.taints or [])

            wait("the node-lifecycle controller's unreachable taint", tainted, 30, stack)
            tainted_s = time.monotonic() - t0

            wait("the decode pod evicted, rescheduled onto the spare node and the service converged", lambda: moved_off(stack, victim), 90, stack)
            rescheduled_s = time.monotonic() - t0
            at = traffic.completed()
            wait("requests completing after the reschedule", lambda: traffic.completed() >= at + 10, 30, stack)
        stuck = [p.metadata.name for p in stack.pods("decode") if p.metadata.deletion_timestamp]
        summary = {**traffic.counts.as_dict(), "status_seen": status.seen, "node_lost_message": status.messages.get("Degraded=True/NodeLost"),
                   "decode_status_while_lost": lost_status, "status_said_not_ready_after_s": round(status_after_s, 1),
                   "tainted_after_s": round(tainted_s, 1), "rescheduled_after_s": round(rescheduled_s, 1),
                   "terminating_on_the_lost_node": stuck, "killed": [r.pod for r in doomed]}
        print(f"CHAOS gpu-node-notready: {json.dumps(summary)}")
        assert doomed, "no process ran on the lost node"
        assert not traffic.counts.failed, summary
        assert lost_status["ready"] == 1 and lost_status["desired"] == 2, summary
        assert_recovered(status, summary)
    finally:
        exit_stack.close()
        for n in nodes:
            with contextlib.suppress(client.ApiException):
                core.delete_node(n)
        # The pod left Terminating on the lost node: nothing will confirm it now.
        for p in core.list_namespaced_pod(namespace).items:
            if p.metadata.deletion_timestamp:
                with contextlib.suppress(client.ApiException):
                    core.delete_namespaced_pod(p.metadata.name, namespace, grace_period_seconds=0)
