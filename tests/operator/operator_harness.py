"""Run `pdserve operator` as a real subprocess under a least-privilege client-cert identity.

Used by the control-plane tests and by bench/operator (which adds this folder to sys.path)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self, TypeVar

import httpx
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from pdserve.api.crd import build_crd
from pdserve.kube.constants import GROUP, PLURAL, VERSION  # noqa: F401  (re-exported to the operator tests)
from pdserve.operator.rbac import CLUSTER_RULES, LEASE_RULES, NAMESPACED_RULES, RULES

T = TypeVar("T")
OPERATOR_USER = "pdserve-operator"
CLUSTER_ROLE = "pdserve-operator"
# Where the operators' Leases live (the chart uses its release namespace).
LEASE_NAMESPACE = "default"


def eventually(what: str, fn: Callable[[], T | None], timeout_s: float = 60, interval_s: float = 0.2) -> T:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while True:
        try:
            result = fn()
        except ApiException as e:  # transient while objects come and go
            result, last = None, e
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what} (last error: {last})")
        time.sleep(interval_s)


def install_crd(admin: client.ApiClient) -> None:
    ext = client.ApiextensionsV1Api(admin)
    crd = build_crd()
    try:
        ext.create_custom_resource_definition(crd)
    except ApiException as e:
        if e.status != 409:
            raise
        live = ext.read_custom_resource_definition(crd["metadata"]["name"])
        crd["metadata"]["resourceVersion"] = live.metadata.resource_version
        ext.replace_custom_resource_definition(crd["metadata"]["name"], crd)

    def established() -> bool:
        got = ext.read_custom_resource_definition(crd["metadata"]["name"])
        return any(c.type == "Established" and c.status == "True" for c in got.status.conditions or [])

    eventually("CRD established", established, 30)


def bind_operator_role(admin: client.ApiClient) -> None:
    """A ClusterRole with exactly RULES, bound to the operator's certificate identity."""
    rbac = client.RbacAuthorizationV1Api(admin)
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": CLUSTER_ROLE}, "rules": RULES}
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": CLUSTER_ROLE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": CLUSTER_ROLE},
        "subjects": [{"kind": "User", "name": OPERATOR_USER, "apiGroup": "rbac.authorization.k8s.io"}],
    }
    for create, replace, body in (
        (rbac.create_cluster_role, rbac.replace_cluster_role, role),
        (rbac.create_cluster_role_binding, rbac.replace_cluster_role_binding, binding),
    ):
        try:
            create(body)
        except ApiException as e:
            if e.status != 409:
                raise
            replace(body["metadata"]["name"], body)
    bind_lease_role(admin, OPERATOR_USER)


def bind_lease_role(admin: client.ApiClient, user: str) -> None:
    """LEASE_RULES in LEASE_NAMESPACE only, as the chart's leader-election Role."""
    rbac = client.RbacAuthorizationV1Api(admin)
    name = f"{user}-leader-election"
    role = {"metadata": {"name": name}, "rules": LEASE_RULES}
    binding = {"metadata": {"name": name}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
               "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}]}
    for create, replace, body in ((rbac.create_namespaced_role, rbac.replace_namespaced_role, role),
                                  (rbac.create_namespaced_role_binding, rbac.replace_namespaced_role_binding, binding)):
        try:
            create(LEASE_NAMESPACE, body)
        except ApiException as e:
            if e.status != 409:
                raise
            replace(name, LEASE_NAMESPACE, body)


def bind_namespaced_operator(admin: client.ApiClient, user: str, namespace: str) -> None:
    """Namespace scope: NAMESPACED_RULES in one namespace, CLUSTER_RULES cluster-wide."""
    rbac = client.RbacAuthorizationV1Api(admin)
    subject = [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}]
    rbac.create_namespaced_role(namespace, {"metadata": {"name": user}, "rules": NAMESPACED_RULES})
    rbac.create_namespaced_role_binding(
        namespace, {"metadata": {"name": user}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": user}, "subjects": subject}
    )
    rbac.create_cluster_role({"metadata": {"name": user}, "rules": CLUSTER_RULES})
    rbac.create_cluster_role_binding(
        {"metadata": {"name": user}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": user}, "subjects": subject}
    )
    bind_lease_role(admin, user)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class OperatorProcess:
    """`pdserve operator` in its own process group; stop() kills the whole group.

    Each instance has its own Lease identity (kept across restarts, as a pod's name is)
    and, unless ``lease`` names a shared one, its own Lease: replicas share a name."""

    def __init__(
        self, kubeconfig: Path, log_path: Path, resync_seconds: float = 5.0, extra_args: list[str] | None = None, namespaces: list[str] | None = None,
        lease: str | None = None, identity: str | None = None, lease_timings: tuple[float, float, float] = (6.0, 4.0, 1.0),
    ):
        self.namespaces = namespaces or []
        self.lease = lease or f"op-{uuid.uuid4().hex[:8]}"
        self.identity = identity or f"replica-{uuid.uuid4().hex[:6]}"
        self.lease_timings = lease_timings
        self.kubeconfig = kubeconfig
        self.log_path = log_path
        self.resync_seconds = resync_seconds
        self.extra_args = extra_args or []
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    def start(self) -> None:
        self.port = free_port()
        argv = [
            sys.executable, "-m", "pdserve.cli", "operator",
            "--kubeconfig", str(self.kubeconfig),
            *([f"--namespace={ns}" for ns in self.namespaces] or ["--all-namespaces"]),
            "--resync-seconds", str(self.resync_seconds),
            "--liveness", f"http://127.0.0.1:{self.port}/healthz",
            "--pdserve-image", "registry.invalid/pdserve:test",
            "--lease-name", self.lease, "--lease-namespace", LEASE_NAMESPACE, "--lease-identity", self.identity,
            "--lease-duration", str(self.lease_timings[0]), "--lease-renew-deadline", str(self.lease_timings[1]),
            "--lease-retry", str(self.lease_timings[2]),
            *self.extra_args,
        ]  # fmt: skip
        log = open(self.log_path, "ab")
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        log.close()

        def healthy() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"operator exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                return httpx.get(f"http://127.0.0.1:{self.port}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        eventually("operator liveness", healthy, 60)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:]) if self.log_path.exists() else ""


def api_client(kubeconfig: Path) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(kubeconfig))


def load_example(path: Path, namespace: str, name: str | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    doc["metadata"]["namespace"] = namespace
    if name:
        doc["metadata"]["name"] = name
    return doc


class Ticker:
    """Calls ``tick()`` every ``period_s`` on a daemon thread while inside the ``with`` block."""

    period_s = 0.2

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            self.tick()

    def tick(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
