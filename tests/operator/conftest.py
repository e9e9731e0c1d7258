"""Fixtures for the operator's control-plane tests: one cluster, one CRD, one operator process."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from leftovers import remove_services
from operator_harness import OPERATOR_USER, OperatorProcess, api_client, bind_operator_role, install_crd


@pytest.fixture(scope="session")
def admin(kube_cluster: Any) -> Iterator[client.ApiClient]:
    with api_client(kube_cluster.kubeconfig) as api:
        install_crd(api)
        bind_operator_role(api)
        yield api


@pytest.fixture(scope="session")
def operator_kubeconfig(kube_cluster: Any, admin: client.ApiClient) -> Path:
    return Path(kube_cluster.kubeconfig_for(OPERATOR_USER))


# Module scope, not session: an operator watching all namespaces that outlives these
# tests would fight the chart-installed operator of the e2e suite over the same children.
@pytest.fixture(scope="module")
def operator(operator_kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    proc = OperatorProcess(operator_kubeconfig, tmp_path_factory.mktemp("operator") / "operator.log", resync_seconds=3.0)
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture
def namespace(admin: client.ApiClient) -> Iterator[str]:
    name = f"op-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(admin)
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    # The module's operator (when one runs) gets a moment to handle the deletions itself; whatever
    # still holds its finalizer after that is released, so the namespace can go.
    remove_services(client.CustomObjectsApi(admin), name, grace_s=5.0)
    core.delete_namespace(name)
