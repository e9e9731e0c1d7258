"""`python -m controlplane up` as a human runs it: prints a KUBECONFIG export line,
serves a working cluster, and Ctrl-C stops every component and cleans up."""

from __future__ import annotations

import os
import selectors
import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from controlplane.fixtures import k8s_bin_dir

pytestmark = pytest.mark.controlplane
REPO = Path(__file__).resolve().parents[2]


def _read_line(proc: subprocess.Popen[str], timeout_s: float) -> str:
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    if not sel.select(timeout_s):
        raise AssertionError(f"no output from `controlplane up` within {timeout_s}s")
    return proc.stdout.readline()


def _pids_under(workdir: Path) -> list[int]:
    """Processes whose command line mentions the cluster's workdir (its components)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if str(workdir).encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def test_up_serves_a_cluster_until_interrupted(tmp_path: Path) -> None:
    if not (k8s_bin_dir() / "kube-apiserver").exists():
        pytest.fail("control-plane binaries missing: run `make k8s-bins`", pytrace=False)
    env = {**os.environ, "PYTHONPATH": str(REPO / "e2e")}
    workdir = tmp_path / "cluster"
    proc = subprocess.Popen(
        [sys.executable, "-m", "controlplane", "up", "--nodes", "1", "--gpus", "4", "--workdir", str(workdir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
    )
    try:
        line = _read_line(proc, 120)
        assert line.startswith("export KUBECONFIG="), line
        kubeconfig = Path(line.strip().split("=", 1)[1])
        cfg = yaml.safe_load(kubeconfig.read_text())
        server = cfg["clusters"][0]["cluster"]["server"]
        assert server.startswith("https://127.0.0.1:")
        user = cfg["users"][0]["user"]
        tls = ssl.create_default_context(cafile=cfg["clusters"][0]["cluster"]["certificate-authority"])
        tls.load_cert_chain(user["client-certificate"], user["client-key"])
        with httpx.Client(verify=tls) as http:
            assert http.get(f"{server}/readyz").status_code == 200
            resp = http.get(f"{server}/api/v1/nodes/gpu-node-1")
            assert resp.status_code == 200, resp.text
            node = resp.json()
            assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4"
        assert len(_pids_under(workdir)) >= 5

        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        deadline = time.monotonic() + 10
        while _pids_under(workdir) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _pids_under(workdir) == []
        assert not (workdir / "etcd-data").exists()
        assert (workdir / "logs" / "kube-apiserver.log").stat().st_size > 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
