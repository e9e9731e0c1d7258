"""Two operator replicas on a real API server: the leader is SIGKILLed mid-reconcile, the other takes over.

Real parts throughout: kube-apiserver (Lease, watches, RBAC exactly as the chart grants),
two `pdserve operator` processes sharing one Lease, a real Prometheus scraping
vLLM-named metrics, and the planner hosted in the operator. The load ramps, so the
planner raises replicas step by step; the first replicas write triggers a reconcile
and the leader is killed right then. An audit of every change the API server
reports (watches on the resource, its Deployments and the Lease) must show one
writer at a time: at most one replicas write and one status.planner write per planner
interval, no replica count ever going back (no flapping), Deployments matching
the spec, and exactly one Lease hand-over.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ha_audit import Audit, decisions_of_replica_writes
from kubernetes import client, watch
from leftovers import remove_services
from operator_harness import (
    GROUP,
    LEASE_NAMESPACE,
    PLURAL,
    VERSION,
    OperatorProcess,
    Ticker,
    eventually,
    load_example,
)
from prometheus_server import PrometheusServer, available

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "planner"))
from fake_vllm_metrics import FakeVllm

pytestmark = [pytest.mark.controlplane, pytest.mark.prometheus]
ROOT = Path(__file__).resolve().parents[2]
NAME = "ha"
INTERVAL_S = 5.0
LEASE_TIMINGS = (6.0, 4.0, 1.0)  # duration, renew deadline, retry
ISL, OSL = 256, 16
LOW, HIGH = 0.5, 8.0  # req/s


def _profile() -> dict[str, Any]:
    """Prompt tokens/s per prefill replica and generated tokens/s per decode replica, by latency."""
    pre = [{"isl": isl, "throughputTokensPerS": thr, "ttftMeanMs": lat, "ttftTailMs": lat}
           for isl in (16, 4096) for thr, lat in ((300, 100), (600, 900), (900, 5000))]
    dec = [{"context": c, "concurrency": n, "throughputTokensPerS": thr, "itlMeanMs": lat, "itlTailMs": lat}
           for c in (16, 4096) for n, thr, lat in ((1, 30, 10), (2, 60, 40), (4, 90, 200))]
    return {"prefill": {"points": pre}, "decode": {"points": dec}}


class Load(Ticker):
    """Completed requests on both fake pools at ``rate`` req/s, until stopped."""

    def __init__(self, fakes: list[FakeVllm]) -> None:
        self.fakes, self.rate, self._owed = fakes, LOW, 0.0
        super().__init__()

    def tick(self) -> None:
        self._owed += self.rate * self.period_s
        n, self._owed = int(self._owed), self._owed - int(self._owed)
        for f in self.fakes:
            f.finish(n, ISL, OSL, ttft=0.3, itl=0.03)


def _watch(stop: threading.Event, audit: Audit, what: str, list_fn: Any, *args: Any, **kw: Any) -> None:
    last: dict[str, Any] = {}
    w = watch.Watch()
    while not stop.is_set():
        try:
            for ev in w.stream(list_fn, *args, timeout_seconds=5, **kw):
                obj = ev["object"]
                obj = obj if isinstance(obj, dict) else client.ApiClient().sanitize_for_serialization(obj)
                now = time.monotonic()
                name = obj["metadata"]["name"]
                spec, status = obj.get("spec") or {}, obj.get("status") or {}
                if what == "dsvc":
                    reps = (spec["prefill"]["replicas"], spec["decode"]["replicas"])
                    if last.get("reps") != reps:
                        audit.replicas.append((now, *reps))
                        last["reps"] = reps
                    planner = status.get("planner") or {}
                    stamp = json.dumps(planner, sort_keys=True)
                    if planner and last.get("planner") != stamp:
                        audit.planner.append((now, float(planner["explanation"]["inputs"]["timestamp"])))
                        last["planner"] = stamp
                elif what == "deployments":
                    seq = audit.deployments.setdefault(name, [])
                    if not seq or seq[-1] != spec.get("replicas"):
                        seq.append(spec.get("replicas"))
                elif what == "lease" and name == kw.get("field_selector", "").split("=")[-1]:
                    holder = spec.get("holderIdentity") or ""
                    if not audit.holders or audit.holders[-1][1] != holder:
                        audit.holders.append((now, holder, int(spec.get("leaseTransitions") or 0)))
                if stop.is_set():
                    w.stop()
                    break
        except Exception as e:  # a watch may expire; keep auditing
            audit.errors.append(repr(e))
            time.sleep(0.2)


@pytest.fixture
def prom_and_fakes(namespace: str) -> Iterator[tuple[PrometheusServer, list[FakeVllm]]]:
    if not available():
        pytest.fail("Debian's prometheus binary is needed (make system-deps)", pytrace=False)
    fakes = [FakeVllm(), FakeVllm()]
    # prometheus_client >= 0.22 answers Prometheus 2.42's OpenMetrics request with escaping=underscores
    # (vllm:x -> vllm_x); this Prometheus cannot ask otherwise (no scrape_protocols), so put the colon back.
    restore = [{"source_labels": ["__name__"], "regex": "vllm_(.+)", "target_label": "__name__", "replacement": "vllm:${1}"}]
    scrape = [{"job_name": f"fake-{role}", "metric_relabel_configs": restore, "static_configs": [{"targets": [f.url.removeprefix("http://")],
               "labels": {"namespace": namespace, "pdserve_service": NAME, "pdserve_role": role}}]}
              for role, f in zip(("prefill", "decode"), fakes)]
    try:
        with PrometheusServer(scrape) as prom:
            yield prom, fakes
    finally:
        for f in fakes:
            f.close()


def test_leader_killed_mid_reconcile_the_follower_takes_over_with_one_writer(
    admin: client.ApiClient, operator_kubeconfig: Path, namespace: str, prom_and_fakes: Any, tmp_path: Path
) -> None:
    prom, fakes = prom_and_fakes
    core, custom = client.CoreV1Api(admin), client.CustomObjectsApi(admin)
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "profile"}, "data": {"profile.json": json.dumps(_profile())}})
    body = load_example(ROOT / "examples/mock-disagg.yaml", namespace, NAME)
    body["metadata"]["annotations"] = {"pdserve.io/capacity-profile": "profile"}
    body["spec"]["autoscaling"].update(intervalSeconds=int(INTERVAL_S), prometheusUrl=prom.url, predictor="constant")
    lease = f"ha-{namespace}"
    replicas = [OperatorProcess(operator_kubeconfig, tmp_path / f"{who}.log", resync_seconds=30.0, namespaces=[namespace],
                                lease=lease, identity=f"replica-{who}", lease_timings=LEASE_TIMINGS) for who in ("a", "b")]
    a, b = replicas
    audit, stop = Audit(), threading.Event()
    watchers = [
        threading.Thread(target=_watch, args=(stop, audit, "dsvc", custom.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL), daemon=True),
        threading.Thread(target=_watch, args=(stop, audit, "deployments", client.AppsV1Api(admin).list_namespaced_deployment, namespace),
                         kwargs={"label_selector": f"pdserve.io/service={NAME},pdserve.io/role in (prefill,decode)"}, daemon=True),
        threading.Thread(target=_watch, args=(stop, audit, "lease", client.CoordinationV1Api(admin).list_namespaced_lease, LEASE_NAMESPACE),
                         kwargs={"field_selector": f"metadata.name={lease}"}, daemon=True),
    ]
    for t in watchers:
        t.start()
    try:
        with Load(fakes) as load:
            a.start()
            eventually("replica a leads", lambda: audit.holders and audit.holders[-1][1] == "replica-a", 30)
            b.start()  # answers its health check while it waits for the Lease
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
            eventually("a first planner decision", lambda: audit.planner, 60)
            assert audit.holders[-1][1] == "replica-a", "the follower must not have taken the Lease"
            # Load ramps up: the planner raises replicas; the first write starts a reconcile in a.
            load.rate = HIGH
            first = len(audit.replicas)
            try:
                eventually("the planner's first replicas write", lambda: len(audit.replicas) > first, 90, interval_s=0.02)
            except AssertionError as e:
                planner = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, NAME).get("status", {}).get("planner")
                raise AssertionError(f"{e}\nstatus.planner: {planner}\n{a.log_tail(20)}") from None
            a.stop(signal.SIGKILL)  # mid-reconcile: its kopf is applying the new replica counts
            killed = time.monotonic()
            eventually("replica b takes the Lease", lambda: audit.holders[-1][1] == "replica-b", 30)
            took_over = audit.holders[-1][0] - killed

            def converged() -> bool:
                obj = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, NAME)
                deps = {d.metadata.name: d.spec.replicas for d in client.AppsV1Api(admin).list_namespaced_deployment(namespace).items}
                spec = obj["spec"]
                return (obj.get("status", {}).get("observedGeneration") == obj["metadata"]["generation"]
                        and deps.get(f"{NAME}-prefill") == spec["prefill"]["replicas"] and deps.get(f"{NAME}-decode") == spec["decode"]["replicas"])

            eventually("b reconciles the Deployments to the spec", converged, 60)
            # b plans on under the load: at least five more decisions.
            eventually("five decisions by b", lambda: sum(1 for t, _ in audit.planner if t > audit.holders[-1][0]) >= 5, 20 * INTERVAL_S)
    finally:
        stop.set()
        try:
            remove_services(custom, namespace, grace_s=30.0)  # the leader releases its finalizer itself if it can
        finally:
            for p in replicas:
                p.stop()
            for t in watchers:
                t.join(10)

    # --- the audit ---------------------------------------------------------------------------
    summary = {
        "takeover_s": round(took_over, 1),
        "lease_holders": [h for _, h, _ in audit.holders],
        "replicas_writes": [(round(t - killed, 1), p, d) for t, p, d in audit.replicas],
        "planner_writes_at": [round(t - killed, 1) for t, _ in audit.planner],
        "handovers_at": [round(t - killed, 1) for t, _, _ in audit.holders[1:]],
        "decision_gaps_s": [round(later - earlier, 2) for (_, earlier), (_, later) in itertools.pairwise(audit.planner)],
        "deployments": audit.deployments,
    }
    # Each replicas write's decision ([0] is the initial state, no write): (arrival, decided, own status write).
    writes = decisions_of_replica_writes([w for w, _, _ in audit.replicas[1:]], audit.planner,
                                         [t for t, _, _ in audit.holders[1:]], audit.wall_offset)
    summary["write_decisions"] = [(round(w.arrival - killed, 1), round(w.decided - audit.wall_offset - killed, 1), w.own_status)
                                  for w in writes]
    print("HA audit:", json.dumps(summary))
    # One hand-over, to the follower, within a lease duration plus a few retries.
    assert [h for _, h, _ in audit.holders] == ["replica-a", "replica-b"], audit.holders
    # b's planner started where a's was: it replayed a's decisions' inputs from Prometheus (planner core.warm_start)
    assert f"planner {namespace}/{NAME}: warm start: " in b.log_path.read_text(errors="replace"), b.log_tail(40)
    assert audit.holders[1][2] == audit.holders[0][2] + 1
    assert took_over < LEASE_TIMINGS[0] + 4 * LEASE_TIMINGS[2] + 3.0, summary
    # The planner's replica writes: never back down under a rising load (no flapping) ...
    series = [(p, d) for _, p, d in audit.replicas]
    for pool in (0, 1):
        values = [s[pool] for s in series]
        assert values == sorted(values), f"replicas flapped: {series}"
    assert series[-1] != series[0], "the planner never scaled"
    # status.planner: one writer at a time, so one decision per interval, across the hand-over
    # too (a second planner would decide in between). The gaps are the decisions' own times
    # (each tick's start), so Prometheus query latency does not blur them.
    gaps = summary["decision_gaps_s"]
    assert len(gaps) >= 6 and min(gaps) >= 0.95 * INTERVAL_S, summary
    # ... and each replicas write belongs to one of those decisions (the status write that follows
    # it in the same leader's term: see ha_audit), so replicas too are written at most once per
    # planner interval.
    decided = [w.decided for w in writes]
    assert all(later - earlier >= 0.95 * INTERVAL_S for earlier, later in itertools.pairwise(decided)), summary
    # Only a killed leader may leave a replicas write without its status write, as its term's last write.
    for w, nxt in itertools.pairwise(writes):
        assert w.own_status or any(w.arrival < t <= nxt.arrival for t, _, _ in audit.holders[1:]), summary
    # Deployments only ever took replica counts the spec had, in the same order (no conflicting patches).
    for role, pool in (("prefill", 0), ("decode", 1)):
        seen = audit.deployments.get(f"{NAME}-{role}", [])
        spec_values = [s[pool] for s in series]
        assert seen == sorted(seen) and set(seen) <= set(spec_values), (role, seen, series)
    assert "leading as replica-b" in b.log_path.read_text() and "leading as replica-b" not in a.log_path.read_text()


@contextlib.contextmanager
def _two_replicas(admin: client.ApiClient, kubeconfigs: tuple[Path, Path], namespace: str, lease: str, logs: Path) -> Iterator[tuple[OperatorProcess, OperatorProcess, Audit]]:
    """Replicas a and b on one Lease, a leading and b waiting, with a watch on the Lease's holders."""
    a, b = (OperatorProcess(cfg, logs / f"{who}.log", namespaces=[namespace], lease=lease, identity=f"replica-{who}",
                            lease_timings=LEASE_TIMINGS) for who, cfg in zip(("a", "b"), kubeconfigs))
    audit, stop = Audit(), threading.Event()
    watcher = threading.Thread(target=_watch, args=(stop, audit, "lease", client.CoordinationV1Api(admin).list_namespaced_lease, LEASE_NAMESPACE),
                               kwargs={"field_selector": f"metadata.name={lease}"}, daemon=True)
    watcher.start()
    try:
        a.start()
        eventually("replica a leads", lambda: audit.holders and audit.holders[-1][1] == "replica-a", 30)
        b.start()
        yield a, b, audit
    finally:
        stop.set()
        a.stop()
        b.stop()
        watcher.join(10)


def _log_time(path: Path, needle: str) -> float:
    """When the operator logged ``needle`` (its asctime, wall clock of this machine)."""
    from datetime import datetime

    line = next(line for line in path.read_text().splitlines() if needle in line)
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def test_a_clean_stop_hands_the_lease_over_at_once(operator_kubeconfig: Path, admin: client.ApiClient, namespace: str, tmp_path: Path) -> None:
    with _two_replicas(admin, (operator_kubeconfig, operator_kubeconfig), namespace, f"handover-{namespace}", tmp_path) as (a, _, audit):
        a.stop(signal.SIGTERM)  # a rollout or a drained node: kopf stops, the Lease is released
        stopped = time.monotonic()
        eventually("replica b leads", lambda: audit.holders[-1][1] == "replica-b", 30)
    assert a.proc is not None and a.proc.returncode == 0, a.log_tail()
    assert "released the Lease" in a.log_path.read_text()
    # Released, not expired: b starts within a retry or two, well inside the lease duration.
    assert audit.holders[-1][0] - stopped < LEASE_TIMINGS[0] - 1.0, audit.holders
    assert [h for _, h, _ in audit.holders] == ["replica-a", "", "replica-b"], audit.holders


def test_a_leader_that_cannot_renew_stops_before_the_follower_takes_over(admin: client.ApiClient, kube_cluster: Any, namespace: str, tmp_path: Path) -> None:
    from operator_harness import CLUSTER_ROLE, bind_lease_role

    rbac = client.RbacAuthorizationV1Api(admin)
    users = {who: f"pdserve-operator-{who}-{namespace}" for who in ("a", "b")}
    for user in users.values():
        rbac.create_cluster_role_binding({"metadata": {"name": user}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": CLUSTER_ROLE},
                                          "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}]})
        bind_lease_role(admin, user)
    kubeconfigs = (Path(kube_cluster.kubeconfig_for(users["a"])), Path(kube_cluster.kubeconfig_for(users["b"])))
    try:
        with _two_replicas(admin, kubeconfigs, namespace, f"lost-{namespace}", tmp_path) as (a, b, audit):
            # The leader can no longer renew (as if cut off from the API server); the follower can.
            rbac.delete_namespaced_role_binding(f"{users['a']}-leader-election", LEASE_NAMESPACE)
            eventually("replica a exits", lambda: a.proc is not None and a.proc.poll() is not None, 30)
            eventually("replica b leads", lambda: audit.holders[-1][1] == "replica-b", 30)
    finally:
        for user in users.values():
            rbac.delete_cluster_role_binding(user)
    assert a.proc is not None and a.proc.returncode == 1, a.log_tail()  # restart and re-enter the election
    lost, led = _log_time(a.log_path, "lost the Lease"), _log_time(b.log_path, "leading as replica-b")
    # a stopped leading (and stopped kopf) before b could start: the renew deadline (4 s) is
    # below the lease duration (6 s), so there is never a moment with two writers.
    assert lost < led, (lost, led)
    assert [h for _, h, _ in audit.holders] == ["replica-a", "replica-b"], audit.holders
