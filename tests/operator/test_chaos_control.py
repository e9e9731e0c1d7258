"""Chaos on the real control plane, with traffic through the router all along.

- kube-apiserver SIGKILLed right after a spec change reached the first Deployment, down for
  a few seconds, started again on the same etcd: kopf's watches reconnect, the change
  converges, nothing is duplicated, and the data path never needed the API server.
- the operator SIGKILLed mid-reconcile and started again (as the kubelet restarts its pod):
  the change converges with one spec write per Deployment and one field manager.

Each test prints one ``CHAOS <scenario>: {json}`` line with the request counts (sent,
completed, failed) and the statuses seen, for the closing note.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chaos_harness import NAME, Stack, StatusLog, Traffic, diagnostics, service_body, start_stack, wait
from kubernetes import client
from operator_harness import GROUP, PLURAL, VERSION

pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(240)]
APISERVER_DOWN_S = 6.0  # plus the API server's own start-up (4-12 s on this machine)
# The API server test gives the operator a renew deadline longer than any outage here, so that
# it keeps leading and kopf's watches must reconnect. (With the chart's 10 s the operator exits
# when it cannot renew, and the kubelet restarts it: the restart path is the SIGKILL test's.)
RIDE_OUT_LEASE = (40.0, 30.0, 2.0)
MANAGERS = {"pdserve-operator", "kube-controller-manager"}


@pytest.fixture
def stack(request: pytest.FixtureRequest, kube_cluster: Any, admin: client.ApiClient, operator_kubeconfig: Path, namespace: str,
          tmp_path: Path) -> Iterator[Stack]:
    timings = RIDE_OUT_LEASE if request.node.name.startswith("test_apiserver") else (15.0, 10.0, 2.0)
    with start_stack(kube_cluster, admin, operator_kubeconfig, namespace, tmp_path, lease_timings=timings) as s:
        s.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, service_body(namespace))
        try:
            s.wait_serving()
        except AssertionError as e:
            raise AssertionError(f"{e}\n{diagnostics(s)}") from None
        yield s


def _first_deployment_write(stack: Stack, role: str, replicas: int, timeout_s: float = 20) -> None:
    """Returns as soon as the operator's write of the new replicas reached ``role``'s Deployment."""
    deadline = time.monotonic() + timeout_s
    while stack.apps.read_namespaced_deployment(f"{NAME}-{role}", stack.namespace).spec.replicas != replicas:
        assert time.monotonic() < deadline, f"the operator never wrote {role} replicas={replicas}\n{diagnostics(stack)}"
        time.sleep(0.01)


def _report(scenario: str, traffic: Traffic, status: StatusLog, **extra: Any) -> dict[str, Any]:
    summary = {**traffic.counts.as_dict(), "status_seen": status.seen, "status_polls_failed": status.api_errors, **extra}
    print(f"CHAOS {scenario}: {json.dumps(summary)}")
    return summary


def _assert_one_clean_change(stack: Stack, before: dict[str, list[str]], summary: dict[str, Any]) -> None:
    """The scale change was written once per worker Deployment, by the operator alone, and
    nothing was duplicated: same objects, one ReplicaSet per Deployment (no rollout)."""
    assert stack.objects() == before, (stack.objects(), before)
    writers = stack.spec_writers()
    assert {n: w["generation"] for n, w in writers.items()} == {f"{NAME}-prefill": 2, f"{NAME}-decode": 2, f"{NAME}-router": 1}, summary
    for name, w in writers.items():
        assert {m for m, _ in w["managers"]} <= MANAGERS, (name, w)
        assert ("pdserve-operator", "Apply") in w["managers"], (name, w)


def test_apiserver_restart_during_reconcile(stack: Stack, kube_cluster: Any) -> None:
    before = stack.objects()
    with StatusLog(stack.custom, stack.namespace) as status, Traffic(stack.router_url()) as traffic:
        wait("traffic flowing", lambda: traffic.completed() >= 10, 30, stack)
        stack.patch_spec({"prefill": {"replicas": 2}, "decode": {"replicas": 2}})
        _first_deployment_write(stack, "prefill", 2)
        kube_cluster.kill_apiserver()
        killed = time.monotonic()
        at_kill = traffic.completed()
        # The data path (router -> workers) does not need the API server.
        wait("requests completing while the API server is down", lambda: traffic.completed() >= at_kill + 10, APISERVER_DOWN_S + 20, stack)
        time.sleep(max(0.0, APISERVER_DOWN_S - (time.monotonic() - killed)))  # the outage's length, not a synchronisation
        during = traffic.completed() - at_kill
        kube_cluster.start_apiserver()
        down_s = time.monotonic() - killed
        wait("the change converged after the restart", stack.converged, 90, stack)
        converged_s = time.monotonic() - killed
        # New workers serve too: traffic keeps completing once they are in.
        at_converged = traffic.completed()
        wait("requests completing after convergence", lambda: traffic.completed() >= at_converged + 10, 30, stack)
    interrupted = [line[24:160] for line in stack.operator.log_path.read_text().splitlines() if "no answer from the API server" in line
                   and ("apply" in line or "reconcile" in line)]
    summary = _report("apiserver-restart", traffic, status, apiserver_down_s=round(down_s, 1), completed_while_down=during,
                      reconcile_steps_interrupted=interrupted[:3],
                      converged_after_kill_s=round(converged_s, 1), writers=stack.spec_writers())
    assert not traffic.counts.failed, summary
    assert status.api_errors > 0, "the status poller never saw the outage: was the API server down?"
    _assert_one_clean_change(stack, before, summary)
    # The operator kept its Lease through the outage (shorter than its renew deadline): one process.
    assert stack.operator.proc is not None and stack.operator.proc.poll() is None, stack.operator.log_tail()
    final = status.seen[-1]
    assert final[2].get("Ready") == "True/AllReplicasReady" and final[2].get("Degraded") == "False/AsExpected", summary


def test_operator_sigkilled_mid_reconcile_and_restarted(stack: Stack) -> None:
    before = stack.objects()
    with StatusLog(stack.custom, stack.namespace) as status, Traffic(stack.router_url()) as traffic:
        wait("traffic flowing", lambda: traffic.completed() >= 10, 30, stack)
        generation = stack.dsvc()["metadata"]["generation"]
        stack.patch_spec({"prefill": {"replicas": 2}, "decode": {"replicas": 2}})
        _first_deployment_write(stack, "prefill", 2)
        stack.operator.stop(signal.SIGKILL)
        killed = time.monotonic()
        # Where the kill landed: the status not yet written for the new generation means mid-reconcile.
        at_kill = stack.dsvc().get("status", {}).get("observedGeneration")
        decode_at_kill = stack.apps.read_namespaced_deployment(f"{NAME}-decode", stack.namespace).spec.replicas
        stack.operator.start()  # the kubelet restarts the container; same pod name, same Lease identity
        wait("the change converged after the restart", stack.converged, 90, stack)
        converged_s = time.monotonic() - killed
        at_converged = traffic.completed()
        wait("requests completing after convergence", lambda: traffic.completed() >= at_converged + 10, 30, stack)
    summary = _report("operator-sigkill", traffic, status, status_generation_at_kill=at_kill, new_generation=generation + 1,
                      decode_replicas_at_kill=decode_at_kill, converged_after_kill_s=round(converged_s, 1), writers=stack.spec_writers())
    assert not traffic.counts.failed, summary
    _assert_one_clean_change(stack, before, summary)
    final = status.seen[-1]
    assert final[1] == generation + 1 and final[2].get("Ready") == "True/AllReplicasReady", summary
