"""Chaos on the real control plane: a GPU node hosting a decode worker is deleted, with traffic.

The machine dies (its worker process SIGKILLed) and its Node object is deleted, as a cloud
controller does for a vanished instance. Kubernetes keeps counting the pod as Ready until its
pod GC deletes it (a 40 s quarantine, then its next pass: ~40-80 s), then the ReplicaSet's
replacement lands on the spare GPU node. The resource's status must say so at once (Ready
False, Degraded NodeLost naming the node), the router must keep the clients' requests
whole, and everything converges back. Prints one ``CHAOS gpu-node-deleted: {json}`` line.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from chaos_harness import StatusLog, Traffic, service_body, start_stack, wait
from controlplane.nodes import KWOK_TAINT
from kubernetes import client
from operator_harness import GROUP, PLURAL, VERSION

pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(300)]
# Kubernetes' pod GC: 40 s quarantine for pods of a deleted node, checked every 20 s.
POD_GC_S = 40.0


def test_gpu_node_deleted_pods_rescheduled_status_says_so(
    kube_cluster: Any, admin: client.ApiClient, operator_kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    # Three dedicated 1-GPU nodes for the decode pool (tainted: nothing else lands there): two
    # host the decode workers, one is spare for the replacement.
    label = {"pdserve.io/chaos-pool": namespace}
    nodes = kube_cluster.add_gpu_nodes(3, gpus=1, prefix=f"gpu-{namespace}", labels=label, taint=True)
    core = client.CoreV1Api(admin)
    stacks = start_stack(kube_cluster, admin, operator_kubeconfig, namespace, tmp_path)
    stack = next(stacks)
    try:
        body = service_body(namespace)
        toleration = {"key": KWOK_TAINT["key"], "operator": "Equal", "value": KWOK_TAINT["value"], "effect": KWOK_TAINT["effect"]}
        body["spec"]["decode"].update(replicas=2, nodeSelector=label, tolerations=[toleration])
        stack.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
        wait("the service serving", lambda: stack.converged(), 120, stack)
        stack.wait_serving()
        placed = {p.spec.node_name: p.metadata.name for p in stack.pods("decode")}
        assert len(placed) == 2 and set(placed) < set(nodes), placed
        victim = sorted(placed)[0]
        survivor = next(n for n in placed if n != victim)
        spare = next(n for n in nodes if n not in placed)

        with StatusLog(stack.custom, namespace) as status, Traffic(stack.router_url()) as traffic:
            wait("traffic flowing", lambda: traffic.completed() >= 10, 30, stack)
            # The machine dies, then its Node object goes.
            doomed = [r for r in stack.runner.processes() if r.pod == placed[victim]]
            for r in doomed:
                stack.runner.kill(r.key)
            core.delete_node(victim)
            t0 = time.monotonic()

            def says_node_lost() -> bool:
                conds = {c["type"]: c for c in (stack.dsvc().get("status") or {}).get("conditions") or []}
                return conds["Degraded"]["reason"] == "NodeLost" and victim in conds["Degraded"]["message"] and conds["Ready"]["status"] == "False"

            wait("the status to report the lost node", says_node_lost, 30, stack)
            status_after_s = time.monotonic() - t0
            replaced_status = stack.dsvc()["status"]["decode"]

            def rescheduled() -> bool:
                live = {p.spec.node_name for p in stack.pods("decode") if not p.metadata.deletion_timestamp}
                return live == {survivor, spare} and stack.converged()

            wait("the decode pod rescheduled onto the spare node and the service converged", rescheduled, POD_GC_S + 80, stack)
            rescheduled_s = time.monotonic() - t0
            at = traffic.completed()
            wait("requests completing after the reschedule", lambda: traffic.completed() >= at + 10, 30, stack)
        summary = {**traffic.counts.as_dict(), "status_seen": status.seen, "node_lost_message": status.messages.get("Degraded=True/NodeLost"),
                   "decode_status_while_lost": replaced_status, "status_said_node_lost_after_s": round(status_after_s, 1),
                   "rescheduled_after_s": round(rescheduled_s, 1), "killed": [r.pod for r in doomed]}
        print(f"CHAOS gpu-node-deleted: {json.dumps(summary)}")
        assert doomed, "no process ran on the deleted node"
        assert not traffic.counts.failed, summary
        assert replaced_status["ready"] == 1 and replaced_status["desired"] == 2, summary
        final = status.seen[-1][2]
        assert final.get("Ready") == "True/AllReplicasReady" and final.get("Degraded") == "False/AsExpected", summary
    finally:
        next(stacks, None)
        for n in nodes:
            try:
                core.delete_node(n)
            except client.ApiException:
                pass
