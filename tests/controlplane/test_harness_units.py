"""Parts of the control-plane harness that need no Kubernetes binaries."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from controlplane.cluster import LocalCluster, missing_binaries
from controlplane.kubeconfig import safe_stem, write_kubeconfig
from controlplane.nodes import GPU_RESOURCE, KWOK_SELECTOR, GpuNodeSpec, gpu_node_manifest, pod_cidr
from controlplane.pki import CertificateAuthority, write_service_account_keys
from controlplane.processes import Component, ComponentError, wait_until

REPO = Path(__file__).resolve().parents[2]


def _load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_client_cert_carries_user_and_groups_and_is_signed_by_ca(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    pair = ca.issue_client("op", "system:serviceaccount:pdserve:operator", ("team-a", "team-b"))
    cert, ca_cert = _load(pair.cert), _load(ca.pair.cert)
    cert.verify_directly_issued_by(ca_cert)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:serviceaccount:pdserve:operator"
    assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == ["team-a", "team-b"]
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert oct(pair.key.stat().st_mode & 0o777) == "0o600"
    with pytest.raises(ValueError, match="non-empty user"):
        ca.issue_client("x", "")


def test_server_cert_names_cover_loopback_and_in_cluster_service(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    pair = ca.issue_server("api", "kube-apiserver", ["localhost", "kubernetes.default.svc"], ["127.0.0.1", "10.96.0.1"])
    san = _load(pair.cert).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost", "kubernetes.default.svc"]
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1", "10.96.0.1"]


def test_service_account_public_key_matches_private_key(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization

    pair = write_service_account_keys(tmp_path)
    priv = serialization.load_pem_private_key(pair.key.read_bytes(), None)
    pub = serialization.load_pem_public_key(pair.cert.read_bytes())
    assert isinstance(priv, ec.EllipticCurvePrivateKey) and isinstance(pub, ec.EllipticCurvePublicKey)
    assert priv.public_key().public_numbers() == pub.public_numbers()


def test_kubeconfig_points_at_absolute_cert_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    ca = CertificateAuthority(Path("pki"))
    pair = ca.issue_client("u", "alice")
    cfg = yaml.safe_load(write_kubeconfig(Path("k.yaml"), "https://127.0.0.1:1", ca.pair.cert, pair, "alice").read_text())
    user = cfg["users"][0]["user"]
    assert Path(user["client-certificate"]).is_absolute() and Path(user["client-key"]).is_absolute()
    assert Path(cfg["clusters"][0]["cluster"]["certificate-authority"]) == (tmp_path / "pki" / "ca.crt")
    assert cfg["users"][0]["name"] == cfg["contexts"][0]["context"]["user"] == "alice"
    assert safe_stem("system:serviceaccount:ns:op") == "system-serviceaccount-ns-op"
    with pytest.raises(ValueError):
        safe_stem(":::")


def test_gpu_node_manifest_is_kwok_managed_with_loopback_pod_cidr() -> None:
    m = gpu_node_manifest(GpuNodeSpec("n3", gpus=4, labels={"pool": "prefill"}), 3)
    assert m["status"]["capacity"][GPU_RESOURCE] == "4" == m["status"]["allocatable"][GPU_RESOURCE]
    key, value = KWOK_SELECTOR.split("=")
    assert m["metadata"]["annotations"][key] == value
    assert m["metadata"]["labels"]["pool"] == "prefill"
    assert m["spec"]["podCIDR"] == "127.64.3.0/24"
    with pytest.raises(ValueError, match="1..255"):
        pod_cidr(0)
    with pytest.raises(ValueError, match="gpus"):
        gpu_node_manifest(GpuNodeSpec("bad", gpus=-1), 1)


def test_missing_binaries_fail_with_a_hint(tmp_path: Path) -> None:
    (tmp_path / "etcd").write_text("")
    assert missing_binaries(tmp_path) == ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"]
    with pytest.raises(ComponentError, match="make k8s-bins"):
        LocalCluster(tmp_path, tmp_path / "work").start()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ")[1][0] != "Z"


def test_component_stop_kills_the_whole_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    # The shell ignores TERM and leaves a grandchild behind: only a group kill gets both.
    script = f"trap '' TERM; sleep 300 & echo $! > {pidfile}; wait"
    comp = Component("sh", ["/bin/sh", "-c", script], tmp_path / "sh.log")
    comp.start()
    wait_until("child pid", lambda: pidfile.exists() and pidfile.read_text().strip() != "", 10)
    child = int(pidfile.read_text())
    leader = comp.process.pid if comp.process else -1
    comp.stop(grace_s=1)
    deadline = time.monotonic() + 5
    while (_alive(child) or _alive(leader)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child) and not _alive(leader)


def test_wait_until_reports_a_dead_component_with_its_log(tmp_path: Path) -> None:
    comp = Component("false", ["/bin/sh", "-c", "echo boom-from-component; exit 3"], tmp_path / "f.log")
    comp.start()
    with pytest.raises(ComponentError, match=r"(?s)exited with code 3.*boom-from-component"):
        wait_until("never", lambda: False, 10, [comp])
    with pytest.raises(ComponentError, match="timed out after 0s waiting for nothing"):
        wait_until("nothing", lambda: False, 0.2)


def test_cli_without_binaries_exits_nonzero_with_hint(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO / "e2e")}
    proc = subprocess.run(
        [sys.executable, "-m", "controlplane", "up", "--bin-dir", str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=60,
    )
    assert proc.returncode == 1
    assert "make k8s-bins" in proc.stderr and "kube-apiserver" in proc.stderr


def test_components_die_when_their_parent_is_killed(tmp_path: Path) -> None:
    pidfile = tmp_path / "component.pid"
    # A parent Python that starts a long-running component, then gets SIGKILLed.
    code = (
        "import sys, time; from pathlib import Path; sys.path.insert(0, sys.argv[1]);"
        "from controlplane.processes import Component;"
        "c = Component('sleep', ['/bin/sleep', '300'], Path(sys.argv[2]) / 'sleep.log'); c.start();"
        "Path(sys.argv[2], 'component.pid').write_text(str(c.process.pid)); time.sleep(300)"
    )
    parent = subprocess.Popen([sys.executable, "-c", code, str(REPO / "e2e"), str(tmp_path)])
    try:
        wait_until("component pid", lambda: pidfile.exists() and pidfile.read_text() != "", 30)
        component = int(pidfile.read_text())
        assert _alive(component)
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 5
    while _alive(component) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(component)


def test_fixture_fails_with_a_hint_when_binaries_are_missing(tmp_path: Path) -> None:
    (tmp_path / "test_uses_cluster.py").write_text("def test_it(kube_cluster):\n    pass\n")
    env = {**os.environ, "PYTHONPATH": str(REPO / "e2e"), "PDSERVE_K8S_BIN": str(tmp_path / "nothing-here")}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "controlplane.fixtures", "-q", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), str(tmp_path / "test_uses_cluster.py")],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )
    assert proc.returncode == 1, proc.stdout
    assert "make k8s-bins" in proc.stdout and "PDSERVE_K8S_BIN" in proc.stdout
    assert "1 error" in proc.stdout
