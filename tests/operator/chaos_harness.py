"""What the chaos tests on the real control plane share: a served mock DisaggregatedService
(operator subprocess under its least-privilege identity, pods run by the PodRunner), a
traffic generator that counts every request, and a recorder of what the status said.

Counts are kept per request: ``sent`` when the request leaves, then exactly one of
``completed`` (the stream ended with all the tokens asked for) or ``failed`` (with why).
Every request has a deadline, so a hung stream is a failure, never a hung test."""

from __future__ import annotations

import contextlib
import json
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import e2e_env
import httpx
from controlplane.nodes import KWOK_TAINT
from kubernetes import client
from leftovers import remove_services
from operator_harness import GROUP, PLURAL, VERSION, OperatorProcess, Ticker, eventually, load_example
from podrunner import PodRunner

from pdserve.tokenization import mock as tokenizer

ROOT = Path(__file__).resolve().parents[2]
NAME = "chaos"
MODEL = "mock-llama"
REQUEST_TIMEOUT_S = 30.0


def service_body(namespace: str) -> dict[str, Any]:
    """examples/mock-disagg.yaml, one replica per pool, replicas as written (no planner)."""
    body = load_example(ROOT / "examples/mock-disagg.yaml", namespace, NAME)
    body["spec"]["autoscaling"]["enabled"] = False
    return body


@dataclass
class Counts:
    sent: int = 0
    completed: int = 0
    failed: list[str] = field(default_factory=list)
    slowest_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"sent": self.sent, "completed": self.completed, "failed": len(self.failed),
                "failures": self.failed[:5], "slowest_s": round(self.slowest_s, 2)}


class Traffic:
    """``concurrency`` clients streaming completions through the router back to back."""

    def __init__(self, router_url: str, concurrency: int = 4, max_tokens: int = 16, prompt_words: int = 40) -> None:
        self.url = f"{router_url}/v1/completions"
        self.concurrency, self.max_tokens, self.prompt_words = concurrency, max_tokens, prompt_words
        self.counts = Counts()
        self.done_at: list[float] = []  # monotonic time of each completion
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._client, args=(k,), daemon=True) for k in range(concurrency)]

    def _one(self, http: httpx.Client, seed: int) -> None:
        rng = random.Random(seed)
        prompt = tokenizer.decode(rng.choice(tokenizer.WORD_IDS) for _ in range(self.prompt_words))
        body = {"model": MODEL, "prompt": prompt, "max_tokens": self.max_tokens, "stream": True, "ignore_eos": True,
                "stream_options": {"include_usage": True}}
        usage = None
        with http.stream("POST", self.url, json=body) as resp:
            if resp.status_code != 200:
                raise RuntimeError(f"HTTP {resp.status_code}: {resp.read().decode(errors='replace')[:200]}")
            for line in resp.iter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    chunk = json.loads(line[6:])
                    if "error" in chunk:
                        raise RuntimeError(f"error event: {chunk['error']}")
                    usage = chunk.get("usage") or usage
        if not usage or usage.get("completion_tokens") != self.max_tokens:
            raise RuntimeError(f"stream ended with usage {usage}, {self.max_tokens} tokens asked for")

    def _client(self, k: int) -> None:
        # No retries: the router must hide a failure itself, or it is counted.
        with httpx.Client(timeout=httpx.Timeout(REQUEST_TIMEOUT_S, connect=5.0)) as http:
            i = 0
            while not self._stop.is_set():
                with self._lock:
                    self.counts.sent += 1
                t0 = time.monotonic()
                try:
                    self._one(http, k * 1_000_000 + i)
                except Exception as e:  # counted with its reason
                    with self._lock:
                        self.counts.failed.append(f"{type(e).__name__}: {str(e)[:160]}")
                    self._stop.wait(0.2)
                else:
                    with self._lock:
                        self.counts.completed += 1
                        self.done_at.append(time.monotonic())
                finally:
                    with self._lock:
                        self.counts.slowest_s = max(self.counts.slowest_s, time.monotonic() - t0)
                i += 1

    def rate(self, start: float, end: float) -> float:
        """Completed requests per second between two monotonic times."""
        with self._lock:
            return sum(1 for t in self.done_at if start <= t < end) / max(end - start, 1e-9)

    def completed(self) -> int:
        with self._lock:
            return self.counts.completed

    def __enter__(self) -> Traffic:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            # A request has REQUEST_TIMEOUT_S; a client still alive after that hangs.
            t.join(REQUEST_TIMEOUT_S + 10)
        hung = [t.name for t in self._threads if t.is_alive()]
        assert not hung, f"client threads hung: {hung}"


class StatusLog(Ticker):
    """Polls the resource (through any API server outage) and keeps each distinct status it saw:
    (seconds since start, observedGeneration, {condition: "Status/Reason"})."""

    def __init__(self, custom: client.CustomObjectsApi, namespace: str) -> None:
        self.custom, self.namespace = custom, namespace
        self.seen: list[tuple[float, int, dict[str, str]]] = []
        self.messages: dict[str, str] = {}  # "Type=Status/Reason" -> its last message
        self.replicas: list[tuple[float, int, int]] = []  # spec (prefill, decode) on each change
        # status.planner per decision: seen at (s), its decision time, held, holdReason, replicas, the request rate it saw
        self.decisions: list[dict[str, Any]] = []
        self.api_errors = 0
        self.t0 = time.monotonic()
        super().__init__()

    def tick(self) -> None:
        try:
            obj = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, NAME, _request_timeout=2)
        except Exception:  # the API server is down: that is the point
            self.api_errors += 1
            return
        status = obj.get("status") or {}
        now = round(time.monotonic() - self.t0, 1)
        reps = (obj["spec"]["prefill"]["replicas"], obj["spec"]["decode"]["replicas"])
        if not self.replicas or self.replicas[-1][1:] != reps:
            self.replicas.append((now, *reps))
        planner = status.get("planner") or {}
        decided = float(((planner.get("explanation") or {}).get("inputs") or {}).get("timestamp") or 0)
        if planner and (not self.decisions or self.decisions[-1]["decided"] != decided):
            inputs = (planner.get("explanation") or {}).get("inputs") or {}
            self.decisions.append({"at": now, "decided": decided, "held": bool(planner.get("held")),
                                   "holdReason": planner.get("holdReason") or "", "prefill": planner.get("prefillReplicas"),
                                   "decode": planner.get("decodeReplicas"), "requestRate": inputs.get("request_rate")})
        conds = {c["type"]: f"{c['status']}/{c['reason']}" for c in status.get("conditions") or []}
        self.messages.update({f"{c['type']}={c['status']}/{c['reason']}": c.get("message", "") for c in status.get("conditions") or []})
        entry = (now, int(status.get("observedGeneration") or 0), conds)
        if not self.seen or self.seen[-1][1:] != entry[1:]:
            self.seen.append(entry)


@dataclass
class Stack:
    """A served DisaggregatedService on the local control plane."""

    admin: client.ApiClient
    namespace: str
    runner: PodRunner
    operator: OperatorProcess
    custom: client.CustomObjectsApi = field(init=False)
    apps: client.AppsV1Api = field(init=False)
    core: client.CoreV1Api = field(init=False)

    def __post_init__(self) -> None:
        self.custom, self.apps, self.core = client.CustomObjectsApi(self.admin), client.AppsV1Api(self.admin), client.CoreV1Api(self.admin)

    def dsvc(self) -> dict[str, Any]:
        obj: dict[str, Any] = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, NAME)
        return obj

    def patch_spec(self, spec: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, NAME, {"spec": spec})

    def deployments(self) -> dict[str, Any]:
        items = self.apps.list_namespaced_deployment(self.namespace, label_selector=f"pdserve.io/service={NAME}").items
        return {d.metadata.name: d for d in items}

    def pods(self, role: str | None = None) -> list[Any]:
        selector = f"pdserve.io/service={NAME}" + (f",pdserve.io/role={role}" if role else "")
        return list(self.core.list_namespaced_pod(self.namespace, label_selector=selector).items)

    def router_url(self) -> str:
        (run,) = self.runner.processes("router")
        return f"http://{run.pod_ip}:8000"

    def mismatch(self) -> str:
        """What still differs between spec, Deployments, pods, worker processes and status ("" when
        they agree and the status says Ready)."""
        obj = self.dsvc()
        spec, status = obj["spec"], obj.get("status") or {}
        deps = self.deployments()
        for role in ("prefill", "decode", "router"):
            d = deps.get(f"{NAME}-{role}")
            want = spec[role]["replicas"]
            if d is None:
                return f"no {role} Deployment"
            got = (d.spec.replicas, d.status.ready_replicas or 0, d.status.replicas or 0)
            if got != (want, want, want):
                return f"{role} Deployment (spec, ready, replicas) = {got}, want {want}"
            pods = len([p for p in self.pods(role) if not p.metadata.deletion_timestamp])
            procs = len([r for r in self.runner.processes() if r.labels.get("pdserve.io/role") == role])
            if (pods, procs) != (want, want):
                return f"{role}: {pods} pods, {procs} processes, want {want}"
        ready = next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {})
        if status.get("observedGeneration") != obj["metadata"]["generation"] or ready.get("status") != "True":
            return f"status: observedGeneration {status.get('observedGeneration')} of {obj['metadata']['generation']}, Ready {ready}"
        return ""

    def converged(self) -> bool:
        return not self.mismatch()

    def wait_serving(self, timeout_s: float = 90) -> None:
        eventually("the service converged and its processes running", self.converged, timeout_s, interval_s=0.5)

        def one_completion() -> bool:
            t = Traffic(self.router_url(), concurrency=1)
            try:
                with httpx.Client(timeout=REQUEST_TIMEOUT_S) as http:
                    t._one(http, 0)
            except Exception:  # readiness polling: the router is still learning its workers
                return False
            return True

        eventually("a completion through the router", one_completion, timeout_s, interval_s=0.5)

    def objects(self) -> dict[str, list[str]]:
        """Every object carrying the service's label, by kind: duplicates would show here."""
        sel = f"pdserve.io/service={NAME}"
        ns = self.namespace
        rbac = client.RbacAuthorizationV1Api(self.admin)
        return {
            "Deployment": sorted(self.deployments()),
            "ReplicaSet": sorted(r.metadata.name for r in self.apps.list_namespaced_replica_set(ns, label_selector=sel).items),
            "Service": sorted(s.metadata.name for s in self.core.list_namespaced_service(ns, label_selector=sel).items),
            "ServiceAccount": sorted(s.metadata.name for s in self.core.list_namespaced_service_account(ns, label_selector=sel).items),
            "Role": sorted(r.metadata.name for r in rbac.list_namespaced_role(ns, label_selector=sel).items),
            "RoleBinding": sorted(r.metadata.name for r in rbac.list_namespaced_role_binding(ns, label_selector=sel).items),
        }

    def spec_writers(self) -> dict[str, dict[str, Any]]:
        """Per Deployment: its generation (one per spec change) and who manages its fields."""
        return {name: {"generation": d.metadata.generation,
                       "managers": sorted({(m.manager, m.operation) for m in d.metadata.managed_fields or []})}
                for name, d in self.deployments().items()}


@contextlib.contextmanager
def start_stack(kube_cluster: Any, admin: client.ApiClient, operator_kubeconfig: Path, namespace: str, log_dir: Path,
                lease_timings: tuple[float, float, float] = (15.0, 10.0, 2.0)) -> Iterator[Stack]:
    """The operator (chart's lease timings by default) and the PodRunner; yields, then stops both,
    leaving no DisaggregatedService behind (leftovers.remove_services)."""
    core = client.CoreV1Api(admin)

    def list_pods() -> list[dict[str, Any]]:
        raw = core.list_namespaced_pod(namespace, _preload_content=False, _request_timeout=5)
        items: list[dict[str, Any]] = json.loads(raw.data)["items"]
        return items

    operator = OperatorProcess(operator_kubeconfig, log_dir / "operator.log", resync_seconds=5.0, namespaces=[namespace],
                               identity="operator-0", lease_timings=lease_timings)
    with PodRunner(list_pods, e2e_env.service_account_kubeconfigs(kube_cluster), log_dir / "pods") as runner:
        operator.start()
        stack = Stack(admin, namespace, runner, operator)
        try:
            yield stack
        finally:
            try:
                # While the operator still runs it deletes the children and releases its finalizer itself.
                remove_services(stack.custom, namespace, grace_s=30.0)
            finally:
                operator.stop()


def diagnostics(stack: Stack) -> str:
    try:
        mismatch = stack.mismatch()
    except Exception as e:  # the API server may be the problem
        mismatch = repr(e)
    return f"not converged: {mismatch}\n{stack.runner.describe()}\n--- operator\n{stack.operator.log_tail(30)}"


def wait(what: str, check: Callable[[], Any], timeout_s: float, stack: Stack) -> Any:
    try:
        return eventually(what, check, timeout_s)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{diagnostics(stack)}") from None


# Losing a GPU node that hosts a decode worker (test_chaos_node_lost, test_chaos_node_notready).

def pin_decode(body: dict[str, Any], label: dict[str, str], tolerations: list[dict[str, Any]]) -> None:
    """Two decode replicas on the dedicated GPU nodes labelled ``label`` (tainted so nothing else
    lands there: the kwok taint is tolerated), plus ``tolerations``."""
    kwok = {"key": KWOK_TAINT["key"], "operator": "Equal", "value": KWOK_TAINT["value"], "effect": KWOK_TAINT["effect"]}
    body["spec"]["decode"].update(replicas=2, nodeSelector=label, tolerations=[kwok, *tolerations])


def decode_placement(stack: Stack, nodes: list[str]) -> dict[str, str]:
    """Node -> decode pod; the two decode pods sit on two of the dedicated ``nodes``."""
    placed = {p.spec.node_name: p.metadata.name for p in stack.pods("decode")}
    assert len(placed) == 2 and set(placed) < set(nodes), placed
    return placed


def kill_pod_processes(stack: Stack, pod: str) -> list[Any]:
    """SIGKILL what the PodRunner runs for ``pod`` (the machine dies); the runs killed."""
    doomed = [r for r in stack.runner.processes() if r.pod == pod]
    for r in doomed:
        stack.runner.kill(r.key)
    return doomed


def moved_off(stack: Stack, node: str) -> bool:
    """No live decode pod on ``node`` any more, and the service converged."""
    live = [p.spec.node_name for p in stack.pods("decode") if not p.metadata.deletion_timestamp]
    return node not in live and stack.converged()


def assert_recovered(status: StatusLog, summary: dict[str, Any]) -> None:
    """The last status seen: Ready again, Degraded cleared."""
    final = status.seen[-1][2]
    assert final.get("Ready") == "True/AllReplicasReady" and final.get("Degraded") == "False/AsExpected", summary
