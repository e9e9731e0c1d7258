"""Starting a LocalCluster on a shared machine: losing the free-port race is retried."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

import controlplane.cluster as cluster_module
from controlplane.cluster import LocalCluster
from controlplane.fixtures import k8s_bin_dir
from controlplane.processes import free_port

pytestmark = pytest.mark.controlplane


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def test_start_retries_when_another_process_took_a_port(
    tmp_path: Path, taken_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    handed_out = iter([taken_port])
    # The first port asked for (the apiserver's) is already someone else's.
    monkeypatch.setattr(cluster_module, "free_port", lambda: next(handed_out, None) or free_port())
    with LocalCluster(k8s_bin_dir(), tmp_path) as cluster:
        assert cluster.apiserver_port != taken_port
        assert cluster.get("/readyz").status_code == 200
    first_try = (tmp_path / "logs-attempt1" / "kube-apiserver.log").read_text()
    assert "address already in use" in first_try
    assert not (tmp_path / "etcd-data").exists()
