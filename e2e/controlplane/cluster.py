"""A real Kubernetes control plane on loopback: etcd, kube-apiserver (RBAC),
kube-controller-manager, kube-scheduler and kwok for fake GPU nodes.

    with LocalCluster(bin_dir, workdir) as cluster:
        cluster.add_gpu_nodes(2, gpus=8)
        ... KUBECONFIG=cluster.kubeconfig ...

Everything binds to 127.0.0.1 on ephemeral ports; each component logs to
workdir/logs/<name>.log. stop() kills every process group it started and removes
the etcd data directory (PKI, kubeconfigs and logs stay for post-mortems).
"""

from __future__ import annotations

import os
import shutil
import signal
import ssl
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from .kubeconfig import safe_stem, write_kubeconfig, write_token_kubeconfig
from .nodes import KWOK_SELECTOR, GpuNodeSpec, gpu_node_manifest
from .pki import CertificateAuthority, CertPair, write_service_account_keys
from .processes import Component, ComponentError, free_port, wait_until

BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
START_ATTEMPTS = 3
SERVICE_CIDR = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"
# Pods on nodes without their own podCIDR still get loopback IPs.
FALLBACK_POD_CIDR = "127.127.0.0/16"
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"
NOT_READY_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
STAGES_FILE = Path(__file__).with_name("kwok-stages.yaml")


def missing_binaries(bin_dir: Path) -> list[str]:
    return [b for b in BINARIES if not (bin_dir / b).is_file()]


class LocalCluster:
    def __init__(self, bin_dir: Path | str, workdir: Path | str | None = None, start_timeout_s: float = 180.0) -> None:
        self.bin_dir = Path(bin_dir).resolve()
        self._owns_workdir = workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix="pdserve-k8s-")) if workdir is None else Path(workdir).resolve()
        self.start_timeout_s = start_timeout_s
        self.pki_dir = self.workdir / "pki"
        self.log_dir = self.workdir / "logs"
        self.etcd_dir = self.workdir / "etcd-data"
        self.components: list[Component] = []
        self.apiserver_port = 0
        self.server = ""
        self.kubeconfig = self.workdir / "admin.kubeconfig"
        self._ca: CertificateAuthority | None = None
        self._admin: CertPair | None = None
        self._node_count = 0
        self.startup_seconds: dict[str, float] = {}

    # -- lifecycle ---------------------------------------------------------------

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        missing = missing_binaries(self.bin_dir)
        if missing:
            raise ComponentError(
                f"missing control-plane binaries in {self.bin_dir}: {', '.join(missing)} (run `make k8s-bins`)"
            )
        t0 = time.monotonic()
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                self._write_pki()
                self._start_etcd()
                self._mark("etcd", t0)
                self._start_apiserver()
                self._mark("kube-apiserver", t0)
                self._start_controllers()
                self._wait_cluster_usable()
                self._mark("ready", t0)
                return
            except ComponentError:
                self._stop_components()
                # Ports are picked free, then bound by the child: another process on
                # this shared machine may win that race. Only that is worth a retry.
                if attempt < START_ATTEMPTS and self._lost_port_race():
                    kept = self.workdir / f"logs-attempt{attempt}"
                    shutil.rmtree(kept, ignore_errors=True)
                    self.log_dir.rename(kept)
                    continue
                self.stop()
                raise
            except BaseException:
                self.stop()
                raise

    def stop(self) -> None:
        self._stop_components()
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _stop_components(self) -> None:
        for comp in reversed(self.components):
            comp.stop()
        self.components.clear()
        shutil.rmtree(self.etcd_dir, ignore_errors=True)

    def _lost_port_race(self) -> bool:
        return any(
            "address already in use" in log.read_text(errors="replace")
            for log in self.log_dir.glob("*.log")
        )

    def _mark(self, phase: str, t0: float) -> None:
        self.startup_seconds[phase] = round(time.monotonic() - t0, 2)

    # -- identities --------------------------------------------------------------

    @property
    def ca_cert(self) -> Path:
        return self._require_ca().pair.cert

    def _require_ca(self) -> CertificateAuthority:
        if self._ca is None:
            raise RuntimeError("the cluster has not been started")
        return self._ca

    def kubeconfig_for(self, user: str, groups: Iterable[str] = ()) -> Path:
        """A kubeconfig authenticating as `user` in `groups` (client certificate).

        RBAC applies: the identity can do only what (Cluster)RoleBindings grant it.
        """
        ca = self._require_ca()
        groups = tuple(groups)
        stem = safe_stem(user) + ("--" + safe_stem("-".join(groups)) if groups else "")
        pair = ca.issue_client(f"user-{stem}", user, groups)
        return write_kubeconfig(self.workdir / "users" / f"{stem}.kubeconfig", self.server, ca.pair.cert, pair, user)

    def kubeconfig_for_service_account(self, namespace: str, name: str, expiration_s: int = 86400) -> Path:
        """A kubeconfig with a TokenRequest token of an existing ServiceAccount, so a
        process runs exactly as it would in a pod under that account's RBAC bindings."""
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": expiration_s},
        }
        with self.http() as client:
            resp = client.post(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", json=body)
        if resp.status_code != 201:
            raise ComponentError(
                f"token request for ServiceAccount {namespace}/{name} failed: {resp.status_code} {resp.text}"
            )
        user = f"system:serviceaccount:{namespace}:{name}"
        path = self.workdir / "users" / f"sa-{safe_stem(namespace)}-{safe_stem(name)}.kubeconfig"
        return write_token_kubeconfig(path, self.server, self.ca_cert, resp.json()["status"]["token"], user)

    def _write_pki(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._ca = ca = CertificateAuthority(self.pki_dir)
        self.apiserver_port = free_port()
        self.server = f"https://127.0.0.1:{self.apiserver_port}"
        self._serving = ca.issue_server(
            "apiserver",
            "kube-apiserver",
            dns=["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                 "kubernetes.default.svc.cluster.local"],
            ips=["127.0.0.1", KUBERNETES_SERVICE_IP],
        )
        self._sa = write_service_account_keys(self.pki_dir)
        # The apiserver's own client identity towards kubelets/aggregated APIs.
        self._apiserver_client = ca.issue_client("apiserver-client", "kube-apiserver", ("system:masters",))
        self._admin = ca.issue_client("admin", "pdserve-admin", ("system:masters",))
        write_kubeconfig(self.kubeconfig, self.server, ca.pair.cert, self._admin, "pdserve-admin")
        # Controller-manager and scheduler use their built-in RBAC identities.
        self._kcm_kubeconfig = write_kubeconfig(
            self.workdir / "kube-controller-manager.kubeconfig", self.server, ca.pair.cert,
            # With --use-service-account-credentials off every controller acts as this
            # one identity, which the built-in RBAC role does not cover: make it a master.
            ca.issue_client("kube-controller-manager", "system:kube-controller-manager", ("system:masters",)),
            "system:kube-controller-manager",
        )
        self._sched_kubeconfig = write_kubeconfig(
            self.workdir / "kube-scheduler.kubeconfig", self.server, ca.pair.cert,
            ca.issue_client("kube-scheduler", "system:kube-scheduler"), "system:kube-scheduler",
        )
        # kwok plays every kubelet: writes node/pod status, leases, deletes pods.
        self._kwok_kubeconfig = write_kubeconfig(
            self.workdir / "kwok.kubeconfig", self.server, ca.pair.cert,
            ca.issue_client("kwok", "kwok-controller", ("system:masters",)), "kwok-controller",
        )

    # -- components --------------------------------------------------------------

    def _add(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Component:
        comp = Component(name, [str(self.bin_dir / name), *argv], self.log_dir / f"{name}.log", env)
        self.components.append(comp)
        comp.start()
        return comp

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        peer_url = f"http://127.0.0.1:{peer}"
        self.etcd_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        etcd = self._add("etcd", [
            "--name=pdserve",
            f"--data-dir={self.etcd_dir}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=pdserve={peer_url}",
            # Test data is disposable; fsync would dominate latency on a busy disk.
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ])

        def healthy() -> bool:
            return httpx.get(f"{self.etcd_url}/health", timeout=2).status_code == 200

        wait_until("etcd /health", healthy, self.start_timeout_s, [etcd])

    def _admin_ssl(self) -> ssl.SSLContext:
        assert self._admin is not None and self._ca is not None
        ctx = ssl.create_default_context(cafile=str(self._ca.pair.cert))
        ctx.load_cert_chain(str(self._admin.cert), str(self._admin.key))
        return ctx

    def _start_apiserver(self) -> None:
        assert self._ca is not None
        apiserver = self._add("kube-apiserver", [
            f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.apiserver_port}",
            f"--tls-cert-file={self._serving.cert}",
            f"--tls-private-key-file={self._serving.key}",
            f"--client-ca-file={self._ca.pair.cert}",
            f"--kubelet-client-certificate={self._apiserver_client.cert}",
            f"--kubelet-client-key={self._apiserver_client.key}",
            f"--service-account-issuer={SA_ISSUER}",
            f"--service-account-key-file={self._sa.cert}",
            f"--service-account-signing-key-file={self._sa.key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=Node,RBAC",
            "--endpoint-reconciler-type=none",
            "--allow-privileged=true",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            "--profiling=false",
        ])
        ctx = self._admin_ssl()

        def ready() -> bool:
            return httpx.get(f"{self.server}/readyz", verify=ctx, timeout=3).status_code == 200

        wait_until("kube-apiserver /readyz", ready, self.start_timeout_s, [apiserver])

    def _start_controllers(self) -> None:
        assert self._ca is not None
        kcm_port, sched_port, kwok_port = free_port(), free_port(), free_port()
        self._add("kube-controller-manager", [
            f"--kubeconfig={self._kcm_kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={kcm_port}",
            "--leader-elect=false",
            "--controllers=*",
            "--use-service-account-credentials=false",
            f"--service-account-private-key-file={self._sa.key}",
            f"--root-ca-file={self._ca.pair.cert}",
            f"--cluster-signing-cert-file={self._ca.pair.cert}",
            f"--cluster-signing-key-file={self._ca.pair.key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--profiling=false",
        ])
        self._add("kube-scheduler", [
            f"--kubeconfig={self._sched_kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={sched_port}",
            "--leader-elect=false",
            "--profiling=false",
        ])
        kwok_home = self.workdir / "kwok-home"
        kwok_home.mkdir(exist_ok=True)
        # A private HOME keeps kwok from also loading a user's ~/.kwok/kwok.yaml.
        env = {**os.environ, "HOME": str(kwok_home)}
        self._add("kwok", [
            f"--kubeconfig={self._kwok_kubeconfig}",
            f"--config={STAGES_FILE}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_SELECTOR}",
            f"--cidr={FALLBACK_POD_CIDR}",
            "--node-ip=127.0.0.1",
            f"--server-address=127.0.0.1:{kwok_port}",
            "--node-lease-duration-seconds=40",
        ], env=env)
        self._component_ports = {"kube-controller-manager": kcm_port, "kube-scheduler": sched_port}

    def _wait_cluster_usable(self) -> None:
        for name, port in self._component_ports.items():

            def healthy(port: int = port) -> bool:
                return httpx.get(f"https://127.0.0.1:{port}/healthz", verify=False, timeout=3).status_code == 200

            wait_until(f"{name} /healthz", healthy, self.start_timeout_s, self.components)
        # Pods are rejected until the service-account controller made "default".
        wait_until(
            "the default ServiceAccount",
            lambda: self.get("/api/v1/namespaces/default/serviceaccounts/default").status_code == 200,
            self.start_timeout_s,
            self.components,
        )

    # -- chaos: stop and restart one component ------------------------------------

    def component(self, name: str) -> Component:
        return next(c for c in self.components if c.name == name)

    def kill_apiserver(self, sig: signal.Signals = signal.SIGKILL) -> None:
        """Chaos: take kube-apiserver down (SIGKILL by default: watches break without a
        goodbye); etcd, the controllers, the scheduler and kwok keep running."""
        comp = self.component("kube-apiserver")
        if comp.process is not None:
            os.killpg(comp.process.pid, sig)
        comp.stop()

    def start_apiserver(self) -> None:
        """Start kube-apiserver again with the same port, certificates and etcd (the
        same cluster state), and wait until /readyz answers."""
        comp = self.component("kube-apiserver")
        comp.start()
        ctx = self._admin_ssl()

        def ready() -> bool:
            return httpx.get(f"{self.server}/readyz", verify=ctx, timeout=3).status_code == 200

        wait_until("kube-apiserver /readyz after a restart", ready, self.start_timeout_s, [comp])

    # -- API helpers (admin) -----------------------------------------------------

    def http(self) -> httpx.Client:
        """An httpx client for the apiserver, authenticated as the admin."""
        return httpx.Client(base_url=self.server, verify=self._admin_ssl(), timeout=10)

    def api_client(self, kubeconfig: Path | None = None) -> Any:
        """A `kubernetes.client.ApiClient` for the admin, or for the given kubeconfig."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(kubeconfig or self.kubeconfig))

    def get(self, path: str) -> httpx.Response:
        with self.http() as client:
            return client.get(path)

    def add_gpu_nodes(self, count: int, gpus: int = 8, prefix: str = "gpu-node", **spec: Any) -> list[str]:
        """Create `count` fake GPU nodes and wait until kwok reports them Ready."""
        names = []
        with self.http() as client:
            for _ in range(count):
                self._node_count += 1
                node = GpuNodeSpec(name=f"{prefix}-{self._node_count}", gpus=gpus, **spec)
                resp = client.post("/api/v1/nodes", json=gpu_node_manifest(node, self._node_count))
                if resp.status_code != 201:
                    raise ComponentError(f"creating node {node.name} failed: {resp.status_code} {resp.text}")
                names.append(node.name)
        for name in names:
            wait_until(f"node {name} Ready", lambda name=name: self._node_ready(name), 60, self.components)
        return names

    def _node_ready(self, name: str) -> bool:
        resp = self.get(f"/api/v1/nodes/{name}")
        if resp.status_code != 200:
            return False
        node = resp.json()
        conditions = node.get("status", {}).get("conditions", [])
        # The node-lifecycle controller lifts the not-ready taint a moment after
        # Ready; until then nothing schedules there.
        tainted = any(t.get("key") in NOT_READY_TAINTS for t in node.get("spec", {}).get("taints") or [])
        return not tainted and any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
