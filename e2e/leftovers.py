"""Nothing a test makes on the shared control plane outlives it: DisaggregatedServices and kopf's finalizer.

The operator puts kopf's finalizer on every DisaggregatedService it sees and removes it only when it
handles the deletion itself. A test that stops its operator first leaves the resource behind, and it
then blocks everything after it in the session: its namespace stays Terminating, and deleting the CRD
waits forever ("create not allowed while custom resource definition is terminating"; a fresh-clone CI
run failed 82 tests after one chaos test that way).

``remove_services`` is the one teardown for every test that runs an operator or creates these
resources (the operator tests' ``namespace`` fixture, the chaos stack, the HA test, the CRD-upgrade
fixture, the e2e modules); the control-plane plugin (controlplane.fixtures) checks after every module
that nothing was left, removes what was, and fails that module.
"""

from __future__ import annotations

import time
from typing import Any

from kubernetes import client

from pdserve.kube.constants import GROUP, PLURAL, VERSION


def list_services(custom: client.CustomObjectsApi, namespace: str | None = None) -> list[dict[str, Any]]:
    """The DisaggregatedServices in ``namespace`` (or the whole cluster); none when the CRD is absent."""
    try:
        got = (custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, _request_timeout=10) if namespace
               else custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, _request_timeout=10))
    except client.ApiException as e:
        if e.status == 404:
            return []
        raise
    items: list[dict[str, Any]] = got["items"]
    return items


def _key(item: dict[str, Any]) -> str:
    return f"{item['metadata']['namespace']}/{item['metadata']['name']}"


def strip_finalizers(custom: client.CustomObjectsApi, namespace: str | None = None) -> list[str]:
    """One pass: remove the finalizers of every DisaggregatedService that has any; returns their names."""
    stripped = []
    for item in list_services(custom, namespace):
        meta = item["metadata"]
        if not meta.get("finalizers"):
            continue
        try:
            custom.patch_namespaced_custom_object(GROUP, VERSION, meta["namespace"], PLURAL, meta["name"],
                                                  {"metadata": {"finalizers": None}})
        except client.ApiException as e:
            if e.status != 404:  # gone meanwhile: what we wanted
                raise
        stripped.append(_key(item))
    return stripped


def remove_services(custom: client.CustomObjectsApi, namespace: str | None = None, *, grace_s: float = 0.0,
                    timeout_s: float = 60.0) -> list[str]:
    """Delete every DisaggregatedService in ``namespace`` (or the cluster) and wait until none is left.

    A live operator gets ``grace_s`` to run its own deletion handlers; after that the finalizers still
    held are stripped. Stripping is safe against an operator that is still running: once a resource
    has a deletionTimestamp the API server refuses new finalizers, so none can come back.
    Returns "namespace/name" of each resource whose finalizer had to be stripped."""
    deadline = time.monotonic() + timeout_s
    grace_end = time.monotonic() + grace_s
    stripped: list[str] = []
    while True:
        left = list_services(custom, namespace)
        if not left:
            return stripped
        for item in left:
            meta = item["metadata"]
            if not meta.get("deletionTimestamp"):
                try:
                    custom.delete_namespaced_custom_object(GROUP, VERSION, meta["namespace"], PLURAL, meta["name"])
                except client.ApiException as e:
                    if e.status != 404:
                        raise
        if time.monotonic() >= grace_end:
            stripped += [k for k in strip_finalizers(custom, namespace) if k not in stripped]
        if time.monotonic() > deadline:
            raise AssertionError(f"DisaggregatedServices still there after {timeout_s:.0f}s: "
                                 f"{[(_key(i), i['metadata'].get('finalizers')) for i in left]}")
        time.sleep(0.2)
