"""pytest plugin: a session-wide local Kubernetes control plane (`kube_cluster`).

Loaded by tests/conftest.py for every test run, so it must import cleanly even
where the binaries or optional packages are missing: the cluster code is only
imported when a test asks for the fixture.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from .cluster import LocalCluster

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN_ENV = "PDSERVE_K8S_BIN"
FAKE_NODES = 2
GPUS_PER_NODE = 8
# The session's cluster once a test asked for it (the leftover check below needs it, and must not start one).
_started: list[LocalCluster] = []


def k8s_bin_dir() -> Path:
    """Where the control-plane binaries live: $PDSERVE_K8S_BIN or <repo>/.cache/k8s/bin."""
    return Path(os.environ.get(BIN_ENV) or REPO_ROOT / ".cache" / "k8s" / "bin")


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A running control plane with FAKE_NODES kwok nodes of GPUS_PER_NODE `nvidia.com/gpu` each.

    `cluster.kubeconfig` is the admin (system:masters) kubeconfig;
    `cluster.kubeconfig_for(user, groups)` gives RBAC-limited identities.
    """
    from .cluster import LocalCluster, missing_binaries

    bin_dir = k8s_bin_dir()
    missing = missing_binaries(bin_dir)
    if missing:
        pytest.fail(
            f"control-plane binaries missing in {bin_dir}: {', '.join(missing)}. "
            f"Run `make k8s-bins` (or set {BIN_ENV} to a directory that has them).",
            pytrace=False,
        )
    cluster = LocalCluster(bin_dir, tmp_path_factory.mktemp("kube-cluster"))
    with cluster:
        cluster.add_gpu_nodes(FAKE_NODES, gpus=GPUS_PER_NODE)
        _started.append(cluster)
        try:
            yield cluster
        finally:
            _started.remove(cluster)


@pytest.fixture(scope="module", autouse=True)
def _no_leftover_services(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each module (so after its module fixtures: their operators are stopped by now), no
    DisaggregatedService may be left holding kopf's finalizer: with no operator to release it, it would
    keep its namespace and the CRD terminating for every later test in the session. What is left is
    removed either way, so one module's leak fails that module and not the rest of the run."""
    yield
    if not _started:
        return
    from kubernetes import client
    from leftovers import remove_services  # e2e/ is on sys.path: tests/conftest.py and e2e/conftest.py put it there

    with _started[0].api_client() as api:
        stripped = remove_services(client.CustomObjectsApi(api))
    if stripped:
        pytest.fail(f"{request.module.__name__} left DisaggregatedServices holding kopf's finalizer with no operator to "
                    f"release it: {stripped} (removed now). Tear them down with leftovers.remove_services.", pytrace=False)
