"""Runs the processes of a fake cluster's pods, so a kwok cluster really serves.

kwok marks pods Running with a 127.x pod IP but runs nothing. The PodRunner watches
pods and starts, for each pdserve container of a Running pod, the same command the
container would run (`pdserve worker ...`, `pdserve router ...`, `pdserve operator
...`), bound to the pod's IP, with the container's environment, and with the pod's
ServiceAccount identity when the pod mounts one. When the pod goes away (or stops
running) its processes are stopped. Containers that are not pdserve (real vLLM)
cannot run here and are reported, not faked.

`plan_pod` is pure (a pod in, the processes to run out); `PodRunner` is the shell.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pdserve.common.procs import stop_group

from portholders import explain_bind_failure

PDSERVE_SUBCOMMANDS = {"worker", "router", "operator", "planner"}
# Roles whose processes serve on the pod IP (rather than only calling the API server).
BINDS_HOST = {"worker", "router"}


@dataclass(frozen=True)
class ContainerRun:
    namespace: str
    pod: str
    uid: str
    container: str
    pod_ip: str
    argv: list[str]  # after the `pdserve` executable
    env: dict[str, str]
    service_account: str | None  # run with this ServiceAccount's token, or no API access
    labels: dict[str, str] = field(default_factory=dict)  # the pod's
    grace_s: float = 30.0  # the pod's terminationGracePeriodSeconds

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.pod}/{self.container}/{self.uid}"

    @property
    def subcommand(self) -> str:
        return self.argv[0]


@dataclass(frozen=True)
class Skipped:
    namespace: str
    pod: str
    container: str
    reason: str


def _field_ref(pod: dict[str, Any], path: str) -> str | None:
    meta, status, spec = pod["metadata"], pod.get("status", {}), pod.get("spec", {})
    return {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "status.podIP": status.get("podIP"),
        "status.hostIP": status.get("hostIP"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
    }.get(path)


def _env(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    env: dict[str, str] = {}
    for e in container.get("env", []) or []:
        if "value" in e:
            env[e["name"]] = str(e["value"])
        elif "fieldRef" in (e.get("valueFrom") or {}):
            value = _field_ref(pod, e["valueFrom"]["fieldRef"]["fieldPath"])
            if value is not None:
                env[e["name"]] = value
    return env


def _bind_to(arg: str, ip: str) -> str:
    # A pod owns its IP; on one machine "all interfaces" would collide between pods.
    return arg.replace("0.0.0.0", ip).replace("tcp://*:", f"tcp://{ip}:")


def plan_pod(pod: dict[str, Any]) -> tuple[list[ContainerRun], list[Skipped]]:
    meta, spec, status = pod["metadata"], pod.get("spec", {}), pod.get("status", {})
    ns, name = meta["namespace"], meta["name"]
    ip = status.get("podIP")
    if status.get("phase") != "Running" or not ip or meta.get("deletionTimestamp"):
        return [], []
    sa = None if spec.get("automountServiceAccountToken") is False else spec.get("serviceAccountName", "default")
    runs: list[ContainerRun] = []
    skipped: list[Skipped] = []
    for c in spec.get("containers", []):
        command = list(c.get("command") or [])
        args = list(c.get("args") or [])
        if command and os.path.basename(command[0]) == "pdserve":
            argv = command[1:] + args
        elif not command and args and args[0] in PDSERVE_SUBCOMMANDS:
            argv = args  # the image's entry point is pdserve
        else:
            skipped.append(Skipped(ns, name, c["name"], f"not a pdserve container: {' '.join(command + args)[:80]}"))
            continue
        if not argv or argv[0] not in PDSERVE_SUBCOMMANDS:
            skipped.append(Skipped(ns, name, c["name"], f"unknown pdserve subcommand in {argv[:2]}"))
            continue
        argv = [_bind_to(a, ip) for a in argv]
        if argv[0] in BINDS_HOST and "--host" not in argv:
            argv += ["--host", ip]
        runs.append(ContainerRun(ns, name, meta.get("uid", ""), c["name"], ip, argv, _env(pod, c), sa, dict(meta.get("labels") or {}),
                                 float(spec.get("terminationGracePeriodSeconds", 30))))
    return runs, skipped


@dataclass
class _Running:
    run: ContainerRun
    proc: subprocess.Popen[bytes]
    log: Path


@dataclass
class PodRunner:
    """Keeps one process per pdserve container of every Running pod the lister returns.

    `list_pods()` returns pod dicts (e.g. from the Kubernetes API);
    `kubeconfig_for(namespace, service_account)` returns a kubeconfig path for that identity.
    """

    list_pods: Callable[[], list[dict[str, Any]]]
    kubeconfig_for: Callable[[str, str], Path]
    log_dir: Path
    interval_s: float = 0.5
    python: str = sys.executable
    # The kubelet's restartPolicy: Always: a container whose process exited is started again
    # (after a back-off of 1 s per earlier restart, at most 10 s). Off: an exit is final and
    # reported, which is what most tests want to see.
    restart_exited: bool = False
    restarts: dict[str, int] = field(default_factory=dict)
    # As a kubelet: a removed pod's process gets SIGTERM and the pod's grace period before SIGKILL,
    # in the background (its replacement starts meanwhile). Off: 5 s, before anything else starts.
    pod_grace: bool = False
    _draining: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)  # (pod IP, process)
    running: dict[str, _Running] = field(default_factory=dict)
    skipped: dict[str, Skipped] = field(default_factory=dict)
    exited: list[tuple[ContainerRun, int, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _exited_at: dict[str, float] = field(default_factory=dict)

    def __enter__(self) -> PodRunner:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._loop, name="podrunner", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        with self._lock:
            for key in list(self.running):
                self._terminate(key)
            for _, proc in self._draining:  # the test is over: no more grace
                if proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync()
            except Exception as e:  # the API server may be briefly unavailable; keep going
                self.errors.append(f"{type(e).__name__}: {e}")
            self._stop.wait(self.interval_s)

    def sync(self) -> None:
        wanted: dict[str, ContainerRun] = {}
        for pod in self.list_pods():
            runs, skipped = plan_pod(pod)
            for s in skipped:
                self.skipped[f"{s.namespace}/{s.pod}/{s.container}"] = s
            for r in runs:
                wanted[r.key] = r
        with self._lock:
            for key in list(self.running):
                if key not in wanted and self.pod_grace:
                    r = self.running.pop(key)
                    self._draining.append((r.run.pod_ip, r.proc))
                    threading.Thread(target=stop_group, args=(r.proc, r.run.grace_s), daemon=True).start()
                elif key not in wanted:
                    self._terminate(key)
                elif (rc := self.running[key].proc.poll()) is not None:
                    r = self.running.pop(key)
                    tail = _tail(r.log)
                    # A bind failure names who holds the address, while that process still runs.
                    if why := explain_bind_failure(tail):
                        tail += f"\n[podrunner] {why}"
                    self.exited.append((r.run, rc, tail))
                    self._exited_at[key] = time.monotonic()
            # kwok may give a new pod the IP of a deleted one whose process still drains: on a
            # node each pod has its own network namespace, here they would collide on the port.
            # The new pod's process waits until that IP is free.
            self._draining = [(ip, proc) for ip, proc in self._draining if proc.poll() is None]
            busy = {ip for ip, _ in self._draining}
            for key, run in wanted.items():
                if key in self.running or run.pod_ip in busy:
                    continue
                if not any(e[0].key == key for e in self.exited):
                    self._start(run)
                elif self.restart_exited and time.monotonic() - self._exited_at.get(key, 0.0) >= min(10.0, 1.0 * self.restarts.get(key, 0)):
                    self.restarts[key] = self.restarts.get(key, 0) + 1
                    self._start(run)

    def _start(self, run: ContainerRun) -> None:
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        env.update(run.env)
        if "VLLM_NIXL_SIDE_CHANNEL_PORT" in env:
            # Every pod has its own IP, but a side channel listening on all interfaces
            # would collide between pods on one machine: let each pick a free port (the
            # worker advertises the port it got in its kv_transfer_params).
            env["VLLM_NIXL_SIDE_CHANNEL_PORT"] = "0"
        # The container's HOME/caches point at pod volumes that do not exist here.
        env["HOME"] = str(self.log_dir)
        env.pop("HF_HOME", None)
        if run.service_account is not None:
            env["KUBECONFIG"] = str(self.kubeconfig_for(run.namespace, run.service_account))
        log = self.log_dir / f"{run.namespace}_{run.pod}_{run.container}.log"
        with open(log, "ab") as f:
            proc = subprocess.Popen(
                [self.python, "-m", "pdserve.cli", *run.argv],
                stdout=f,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.log_dir,
                start_new_session=True,
            )
        self.running[run.key] = _Running(run, proc, log)

    def _terminate(self, key: str, grace_s: float = 5.0) -> None:
        r = self.running.pop(key)
        if r.proc.poll() is None:
            try:
                os.killpg(r.proc.pid, signal.SIGTERM)
                r.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                os.killpg(r.proc.pid, signal.SIGKILL)
                r.proc.wait()
            except ProcessLookupError:
                pass

    def kill(self, key: str, sig: signal.Signals = signal.SIGKILL) -> int:
        """Chaos: send ``sig`` to a container's process group, as an OOM kill or a crash would;
        returns the pid. The pod stays; with ``restart_exited`` the container comes back."""
        with self._lock:
            proc = self.running[key].proc
        os.killpg(proc.pid, sig)
        return proc.pid

    def pid(self, key: str) -> int | None:
        with self._lock:
            r = self.running.get(key)
            return r.proc.pid if r is not None and r.proc.poll() is None else None

    def processes(self, subcommand: str | None = None) -> list[ContainerRun]:
        with self._lock:
            return [r.run for r in self.running.values() if subcommand is None or r.run.subcommand == subcommand]

    def wait_for(self, predicate: Callable[[PodRunner], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate(self):
                return
            time.sleep(0.25)
        raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}; {self.describe()}")

    def describe(self) -> str:
        lines = [f"running: {sorted(k for k in self.running)}"]
        lines += [f"exited {r.key} rc={rc}: {tail}" for r, rc, tail in self.exited[-5:]]
        lines += [f"skipped {k}: {s.reason}" for k, s in list(self.skipped.items())[-5:]]
        lines += self.errors[-3:]
        return "\n".join(lines)


def _tail(path: Path, n: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""
