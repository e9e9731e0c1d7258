"""Chaos on the data and metrics path, on the real control plane (issue 14, part 2):

- Prometheus down for several planner intervals: the planner holds (no replica written),
  says why in status.planner, an Event and its own metrics, and plans again once it is back;
- the router killed with streams in flight: every client ends within a bound with a clean
  error (never a hang, never a silently short answer), the workers stop generating for the
  dead router, and the restarted router serves.

Each prints `sent / completed / failed` and what the status said; the lead's note quotes them.
The chart runs on the local control plane (kwok GPU nodes, the PodRunner starts the pods'
processes as a kubelet would, restarting exited containers); a real Prometheus scrapes the pods.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python as helm
import httpx
import pytest
from kubernetes import client

import e2e_env
from chaos_client import Tally, stream_completion
from leftovers import remove_services
from podrunner import PodRunner
from prometheus_server import PrometheusServer, available
from pdserve.kube.constants import GROUP, MERGE_PATCH, PLURAL, VERSION
from pdserve.planner.core.decision import HOLD_ERROR

pytestmark = [pytest.mark.controlplane, pytest.mark.prometheus, pytest.mark.timeout(300)]

NS = "chaos"
SERVICE = "chaos-llama"
INTERVAL_S = 5  # the planner's interval in this test (spec.autoscaling.intervalSeconds)
SHORT_TOKENS = 60  # a stream that ends well within the router's drain after SIGTERM
ROUTER_SHUTDOWN_TIMEOUT_S = 10.0  # pdserve router --shutdown-timeout's default, well within the pod's 30 s grace


@dataclass
class Chaos:
    core: client.CoreV1Api
    apps: client.AppsV1Api
    custom: client.CustomObjectsApi
    runner: PodRunner
    prom: PrometheusServer
    planner_port: int
    log_dir: Path

    def dsvc(self) -> dict[str, Any]:
        obj: dict[str, Any] = self.custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, SERVICE)
        return obj

    def planner_status(self) -> dict[str, Any]:
        planner: dict[str, Any] = self.dsvc().get("status", {}).get("planner") or {}
        return planner

    def spec_replicas(self) -> tuple[int, int]:
        spec = self.dsvc()["spec"]
        return spec["prefill"]["replicas"], spec["decode"]["replicas"]

    def pods(self, role: str) -> list[client.V1Pod]:
        pods = self.core.list_namespaced_pod(NS, label_selector=f"pdserve.io/service={SERVICE},pdserve.io/role={role}").items
        return [p for p in pods if p.status.phase == "Running" and p.status.pod_ip and not p.metadata.deletion_timestamp]

    def urls(self, role: str) -> list[str]:
        return [f"http://{p.status.pod_ip}:{e2e_env.HTTP_PORT}" for p in self.pods(role)]

    def serving(self, role: str, at_least: int) -> bool:
        return sum(1 for u in self.urls(role) if _ok(f"{u}/health")) >= at_least

    def planner_metrics(self) -> str:
        (op,) = [p for p in self.core.list_namespaced_pod(e2e_env.SYSTEM_NS).items
                 if p.metadata.labels.get("app.kubernetes.io/component") == "operator"]
        return httpx.get(f"http://{op.status.pod_ip}:{self.planner_port}/metrics", timeout=5).text

    def diagnostics(self) -> str:
        logs = sorted(self.log_dir.glob("*.log"))
        tails = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-800:]}" for p in logs[-6:])
        return f"\nplanner: {self.planner_status()}\n{self.runner.describe()}\n{tails}"


def _ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of one series in a Prometheus exposition, None when absent."""
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        series, value = line.rsplit(" ", 1)
        if all(f'{k}="{v}"' in series for k, v in labels.items()):
            return float(value)
    return None


@pytest.fixture(scope="module")
def chaos(kube_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chaos]:
    if not available():
        pytest.fail("Debian's prometheus binary is needed (make system-deps)", pytrace=False)
    work = tmp_path_factory.mktemp("chaos")
    kubeconfig = Path(kube_cluster.kubeconfig)
    api = e2e_env.api_client(kubeconfig)
    core, apps, custom = client.CoreV1Api(api), client.AppsV1Api(api), client.CustomObjectsApi(api)
    kubeconfig_for = e2e_env.service_account_kubeconfigs(kube_cluster)
    sd_file = work / "kubernetes_sd.json"
    list_pods = e2e_env.pod_lister(core, [e2e_env.SYSTEM_NS, NS])
    planner_port = e2e_env.free_port()
    with contextlib.ExitStack() as stack:
        stack.enter_context(e2e_env.kubernetes_sd(sd_file, list_pods))
        prom = stack.enter_context(PrometheusServer(e2e_env.podmonitor_scrape_configs(sd_file, e2e_env.SYSTEM_NS)))
        hc = stack.enter_context(helm.Config(kubeconfig_path=str(kubeconfig), namespace=e2e_env.SYSTEM_NS))
        # As a kubelet: a killed container restarts in its pod (restartPolicy Always), a deleted
        # pod's processes get SIGTERM and the pod's terminationGracePeriodSeconds.
        runner = stack.enter_context(PodRunner(list_pods, kubeconfig_for, work / "pods", restart_exited=True, pod_grace=True))
        env = Chaos(core, apps, custom, runner, prom, planner_port, work / "pods")
        values = {"planner": {"prometheusUrl": prom.url, "intervalSeconds": INTERVAL_S, "metricsPort": planner_port},
                  "monitoring": {"podMonitors": False, "prometheusRule": False}}
        try:
            hc.install(str(e2e_env.CHART), e2e_env.RELEASE, values, namespace=e2e_env.SYSTEM_NS, create_namespace=True, timeout=120)
            runner.wait_for(lambda r: any(p.subcommand == "operator" for p in r.processes()), 90, "the operator's process")
            e2e_env.wait_for("the planner's metrics endpoint", lambda: _ok_metrics(env), 90, describe=env.diagnostics)
            with contextlib.suppress(client.ApiException):
                core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NS)))
            body = e2e_env.example_service(NS, prom.url)
            body["metadata"]["name"] = SERVICE
            body["spec"]["model"]["servedName"] = SERVICE
            custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body)
            yield env
        finally:
            try:
                # Before the operator goes: it deletes the children and releases its finalizer itself.
                remove_services(custom, NS, grace_s=30.0)
                with contextlib.suppress(TimeoutError):
                    e2e_env.wait_for("the service's pods gone", lambda: not core.list_namespaced_pod(NS).items, 60)
            finally:
                with contextlib.suppress(helm.HelmError):
                    hc.uninstall(e2e_env.RELEASE, ignore_not_found=True, timeout=60)


def _ok_metrics(env: Chaos) -> bool:
    try:
        return "pdserve_planner" in env.planner_metrics()
    except (httpx.HTTPError, ValueError):
        return False


def serve_at(env: Chaos, prefill: int, decode: int, *, planner_holds: bool = False) -> None:
    """The service has these replicas in its spec and serves a completion through its router.
    ``planner_holds``: the planner must not change them meanwhile (it has no metrics)."""
    if env.spec_replicas() != (prefill, decode):
        patch = {"spec": {"prefill": {"replicas": prefill}, "decode": {"replicas": decode}}}
        env.custom.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, SERVICE, patch, _content_type=MERGE_PATCH)

    def up(role: str, n: int) -> bool:
        if planner_holds:
            assert env.spec_replicas() == (prefill, decode), f"replicas written without metrics: {env.planner_status()}"
        return env.serving(role, n)

    for role, n in (("prefill", prefill), ("decode", decode), ("router", 1)):
        e2e_env.wait_for(f"{n} {role} serving", lambda role=role, n=n: up(role, n), 120, describe=env.diagnostics)
    errors: list[str] = []

    def one() -> bool:
        r = stream_completion(env.urls("router")[0], SERVICE, 4, seed=1, read_timeout_s=20)
        errors.append(f"{r.outcome}: {r.detail}")
        return r.outcome == "completed"

    e2e_env.wait_for("a completion through the router", one, 60, interval_s=1, describe=lambda: f"{errors[-3:]} {env.diagnostics()}")


class Trickle:
    """One short streamed request per ``period_s`` through the router, counted.

    Like a Service, it sends only to router pods that are Ready (their readiness probe,
    /health, answers 200; kwok marks pods Ready without probing), and it keeps the time
    during which no router was ready: that is an outage clients of a Service would see."""

    def __init__(self, env: Chaos, period_s: float = 0.5, read_timeout_s: float = 20.0) -> None:
        self.env, self.period_s, self.read_timeout_s = env, period_s, read_timeout_s
        self.tally = Tally()
        self.no_ready_router_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            t0 = time.monotonic()
            ready = [u for u in self.env.urls("router") if _ok(f"{u}/health")]
            if ready:
                self.tally.add(stream_completion(ready[0], SERVICE, 8, seed=900_000 + i, read_timeout_s=self.read_timeout_s))
                i += 1
            self._stop.wait(self.period_s)
            if not ready:
                self.no_ready_router_s += time.monotonic() - t0

    def __enter__(self) -> Trickle:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self.read_timeout_s + 10)
        assert not self._thread.is_alive(), "a trickle request hung past its read timeout"


def test_prometheus_down_holds_the_planner_visibly_and_it_plans_again_when_back(chaos: Chaos) -> None:
    env = chaos
    serve_at(env, 1, 1)
    # Before: with metrics the planner decides (not held) on this service. It needs traffic that
    # Prometheus saw reach both pools (a decode pod first scraped after serve_at's one request shows
    # a flat counter and no OSL: the planner rightly holds on "no ISL/OSL history"), so keep some flowing.
    sent = iter(range(800_000, 900_000))

    def decided_on_traffic() -> bool:
        stream_completion(env.urls("router")[0], SERVICE, 4, seed=next(sent), read_timeout_s=20)
        s = env.planner_status()
        return bool(s and s.get("time") and not s.get("held"))

    e2e_env.wait_for("a planner decision on metrics", decided_on_traffic, 90, interval_s=2, describe=env.diagnostics)
    metrics = env.planner_metrics()
    held_before = sample(metrics, "pdserve_planner_held_decisions_total", service=SERVICE, reason=HOLD_ERROR) or 0.0

    events_before = {e.metadata.uid for e in env.core.list_namespaced_event(NS).items}
    seen: dict[str, dict[str, Any]] = {}  # status.planner by its time, once the pools are 2/2

    def held_intervals(n: int, why: str) -> bool:
        assert env.spec_replicas() == (2, 2), f"replicas written while Prometheus is down: {env.planner_status()}"
        s = env.planner_status()
        if s.get("time") and s.get("prefillReplicas") == 2 and s["time"] not in seen:
            seen[s["time"]] = s
            assert s["held"] is True and s["holdReason"] == HOLD_ERROR, s
            assert (s["prefillReplicas"], s["decodeReplicas"]) == (2, 2), s
        return sum(why in s["reason"] for s in seen.values()) >= n

    with Trickle(env) as trickle:
        # First hung (SIGSTOP: connections accepted, queries never answered), then dead.
        env.prom.freeze()
        # Pools sized up (by hand, or for a burst) just as Prometheus went away: with metrics the
        # planner would bring them back to 1/1 after the 10 s stabilisation (checked at the end);
        # without metrics it must keep them.
        serve_at(env, 2, 2, planner_holds=True)
        generation = env.dsvc()["metadata"]["generation"]
        # Each hung interval waits out the source's 2 x 5 s query timeout.
        hung = f"held: metrics unavailable: prometheus {env.prom.url}: timed out: no answer within 5 s"
        e2e_env.wait_for("2 planner intervals with Prometheus hung", lambda: held_intervals(2, hung), 60, describe=env.diagnostics)
        env.prom.kill()
        # One line a user reads in `kubectl describe`: who and why, not the failed query's URL.
        dead = (f"held: metrics unavailable: prometheus {env.prom.url}: unreachable: "
                "ConnectionRefusedError: [Errno 111] Connection refused")
        e2e_env.wait_for("3 planner intervals with Prometheus dead", lambda: held_intervals(3, dead), 6 * INTERVAL_S + 20,
                         describe=env.diagnostics)
        assert env.dsvc()["metadata"]["generation"] == generation, "the planner patched the spec while Prometheus was down"
        assert all(s["reason"] in (hung, dead) for s in seen.values()), [s["reason"] for s in seen.values()]
        events = [e for e in env.core.list_namespaced_event(NS).items
                  if e.involved_object.name == SERVICE and e.reason == "PlannerHeld" and e.metadata.uid not in events_before]
        assert events and events[-1].type == "Warning" and "metrics unavailable" in events[-1].message, events
        metrics = env.planner_metrics()
        assert sample(metrics, "pdserve_planner_held", service=SERVICE, namespace=NS) == 1.0
        held_now = sample(metrics, "pdserve_planner_held_decisions_total", service=SERVICE, reason=HOLD_ERROR) or 0.0
        assert held_now - held_before >= 5, (held_before, held_now)
    tally = trickle.tally
    print(tally.summary("prometheus down, requests through the router"))
    print(f"prometheus hung then dead: {len(seen)} intervals held at 2P/2D, status.planner.reason: "
          f"{sorted({s['reason'] for s in seen.values()})}; Event {events[-1].type} {events[-1].reason}: "
          f"{events[-1].message!r}; pdserve_planner_held=1, held_decisions_total{{reason={HOLD_ERROR!r}}} "
          f"+{held_now - held_before:.0f}")
    assert tally.sent >= 10 and not tally.failed, tally.summary("prometheus down") + f" {tally.failed[:3]}"

    env.prom.restart()
    # Back: the planner decides on metrics again, and the idle pools return to their minimum.
    e2e_env.wait_for("the planner plans again and scales down", lambda: not env.planner_status().get("held")
                     and env.spec_replicas() == (1, 1), 90, interval_s=1, describe=env.diagnostics)
    status = env.planner_status()
    print(f"prometheus back: held={status['held']} reason={status['reason']!r}")
    assert sample(env.planner_metrics(), "pdserve_planner_held", service=SERVICE, namespace=NS) == 0.0


class Streams:
    """``n`` streams of ``tokens`` tokens each through one router URL, started together."""

    def __init__(self, url: str, n: int, tokens: int, *, seed: int, read_timeout_s: float = 30.0) -> None:
        self.url, self.tokens, self.seed, self.read_timeout_s = url, tokens, seed, read_timeout_s
        self.tally = Tally()
        self.progress = [0] * n
        self.threads = [threading.Thread(target=self._client, args=(i,), daemon=True) for i in range(n)]
        for t in self.threads:
            t.start()

    def _client(self, i: int) -> None:
        def on_chunk(n: int) -> None:
            self.progress[i] = n

        self.tally.add(stream_completion(self.url, SERVICE, self.tokens, seed=self.seed + i,
                                         read_timeout_s=self.read_timeout_s, on_chunk=on_chunk))

    def under_way(self, chunks: int) -> bool:
        return min(self.progress) >= chunks

    def join(self) -> None:
        for t in self.threads:
            t.join(timeout=self.read_timeout_s + 10)
        assert not any(t.is_alive() for t in self.threads), f"a stream hangs: {self.progress}"


def decode_running(urls: list[str]) -> float:
    return sum(_gauge(u, "vllm:num_requests_running") for u in urls)


def test_router_killed_with_streams_in_flight_clients_get_a_clean_error_and_it_serves_again(chaos: Chaos) -> None:
    env = chaos
    serve_at(env, 1, 1)
    (router_pod,) = env.pods("router")
    (run,) = [r for r in env.runner.processes("router") if r.pod == router_pod.metadata.name]
    url = env.urls("router")[0]
    streams = Streams(url, 8, 2000, seed=100)  # 2000 tokens: in flight for the whole test
    e2e_env.wait_for("every stream under way", lambda: streams.under_way(5), 60,
                     describe=lambda: f"{streams.progress} {env.diagnostics()}")
    decode_urls = env.urls("decode")
    assert decode_running(decode_urls) >= 8

    killed_pid = env.runner.kill(run.key, signal.SIGKILL)
    killed_at = time.monotonic()
    streams.join()
    tally = streams.tally
    print(tally.summary("router SIGKILLed, streams in flight"))
    print(f"  outcomes: {sorted({r.detail for r in tally.results})}")
    assert tally.sent == 8 and all(r.clean for r in tally.results), tally.results
    assert tally.completed == 0, "2000-token streams cannot have finished: the kill came too late to test anything"
    # The bound: the router's death itself ends each stream (the socket closes), not the client's timer.
    assert max(r.ended for r in tally.results) - killed_at < 5.0, [r.ended - killed_at for r in tally.results]

    # The workers abort what the dead router asked for (vLLM aborts on disconnect): no orphan decoding.
    e2e_env.wait_for("decode workers idle", lambda: decode_running(decode_urls) == 0, 15, describe=env.diagnostics)

    # The container is restarted in its pod (same IP) and serves again.
    e2e_env.wait_for("the router restarted", lambda: (pid := env.runner.pid(run.key)) is not None and pid != killed_pid, 30,
                     describe=env.diagnostics)
    e2e_env.wait_for("the restarted router healthy", lambda: _ok(f"{url}/health"), 60, describe=env.diagnostics)
    after = Tally()
    for i in range(10):
        after.add(stream_completion(url, SERVICE, 16, seed=200 + i, read_timeout_s=30))
    print(after.summary("after the router restart"))
    assert after.completed == after.sent == 10, after.results
    assert env.runner.restarts.get(run.key) == 1


def test_router_pod_deleted_with_streams_in_flight_drains_short_ones_and_ends_long_ones_cleanly(chaos: Chaos) -> None:
    """A rolling restart (the pod deleted, SIGTERM): streams that end within the router's drain
    complete, longer ones end with an OpenAI-style error event at its end, and the new pod serves."""
    env = chaos
    serve_at(env, 1, 1)
    (old,) = env.pods("router")
    url = env.urls("router")[0]
    long = Streams(url, 4, 2000, seed=300)
    e2e_env.wait_for("the long streams under way", lambda: long.under_way(5), 60, describe=env.diagnostics)
    decode_urls = env.urls("decode")
    with Trickle(env, period_s=0.25) as trickle:
        short = Streams(url, 4, SHORT_TOKENS, seed=400)
        # Deleted as soon as they stream: they have ~2 s to go, which only the drain gives them.
        e2e_env.wait_for("the short streams under way", lambda: short.under_way(3), 60, interval_s=0.02, describe=env.diagnostics)
        env.core.delete_namespaced_pod(old.metadata.name, NS)
        deleted_at = time.monotonic()
        short.join()
        long.join()
        e2e_env.wait_for("a new router pod serving", lambda: any(p.metadata.name != old.metadata.name for p in env.pods("router"))
                         and env.serving("router", 1), 60, describe=env.diagnostics)
        e2e_env.wait_for("the trickle served by the new pod", lambda: trickle.tally.completed >= 5
                         and trickle.tally.results[-1].outcome == "completed", 60, describe=env.diagnostics)
    print(short.tally.summary("router pod deleted: short streams")
          + f", ended {sorted(round(r.ended - deleted_at, 1) for r in short.tally.results)} s after the deletion")
    print(long.tally.summary("router pod deleted: long streams")
          + f", ended {sorted(round(r.ended - deleted_at, 1) for r in long.tally.results)} s after the deletion")
    print(trickle.tally.summary("router pod deleted: new requests to a ready router meanwhile")
          + f"; no router ready for {trickle.no_ready_router_s:.1f} s")
    print(f"  outcomes: {sorted({r.detail for r in long.tally.results + trickle.tally.failed})}")
    assert short.tally.completed == 4, short.tally.results  # the drain let them finish
    assert all(r.outcome == "error-event" and "router is shutting down" in r.detail for r in long.tally.results), long.tally.results
    ended = [r.ended - deleted_at for r in long.tally.results]  # a second before the shutdown timeout
    assert all(ROUTER_SHUTDOWN_TIMEOUT_S - 3.0 < t < ROUTER_SHUTDOWN_TIMEOUT_S + 2.0 for t in ended), ended
    # New requests go to ready routers only (a Service's endpoints): they are served, but for one
    # that may race the old router's SIGTERM (a kubelet's preStop sleep covers that gap; here
    # nothing runs preStop), and that one must end cleanly too.
    assert all(r.clean for r in trickle.tally.results) and len(trickle.tally.failed) <= 1, trickle.tally.failed
    e2e_env.wait_for("decode workers idle", lambda: decode_running(decode_urls) == 0, 15, describe=env.diagnostics)
    new_url = env.urls("router")[0]
    after = Tally()
    for i in range(10):
        after.add(stream_completion(new_url, SERVICE, 16, seed=500 + i, read_timeout_s=30))
    print(after.summary("after the rolling restart"))
    assert after.completed == after.sent == 10, after.results


def _gauge(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=5).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name) and not line.startswith("#"))
