"""A thin, typed async Kubernetes shell: server-side apply, reads, status patches, Leases.

Built on the official client's ApiClient (auth from kubeconfig or in-cluster) with
raw JSON paths, so the operator holds plain dicts and never pays for model
deserialisation. Blocking calls run in threads; each is short."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import urllib3
from kubernetes import client as k8s

from pdserve.kube.constants import (
    APPLY_PATCH,
    FIELD_MANAGER,
    GROUP,
    MERGE_PATCH,
    PLURAL,
    VERSION,
)
from pdserve.kube.errors import KubeError

_PLURALS = {
    "Deployment": "deployments",
    "Service": "services",
    "ServiceAccount": "serviceaccounts",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "Pod": "pods",
    "Lease": "leases",
    "NetworkPolicy": "networkpolicies",
}


def object_path(api_version: str, kind: str, namespace: str, name: str | None = None) -> str:
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    path = f"{base}/namespaces/{namespace}/{_PLURALS[kind]}"
    return f"{path}/{name}" if name else path


def service_path(namespace: str, name: str, subresource: str = "") -> str:
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}"
    return f"{path}/{subresource}" if subresource else path


class Kube:
    def __init__(self, api: k8s.ApiClient, request_timeout_s: float = 30.0, max_concurrency: int = 16):
        self.api = api
        self.timeout = request_timeout_s
        # Our own pool: asyncio's default one has cpu+4 threads, which serialises a burst of syncs.
        self._pool = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="kube")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.api.close()

    def _request(self, method: str, path: str, query: Mapping[str, str] | None = None, body: Any = None, content_type: str = "application/json") -> Any:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        _, url, headers, _, _ = self.api.param_serialize(
            method, path, query_params=list((query or {}).items()), header_params=headers, auth_settings=["BearerToken"]
        )
        # The REST layer JSON-encodes dicts for JSON and apply-patch+yaml content types alike.
        try:
            resp = self.api.call_api(method, url, header_params=headers, body=body, _request_timeout=self.timeout)
            raw = resp.read()
        except (urllib3.exceptions.HTTPError, OSError) as e:
            # No answer at all (API server restarting, connection refused or reset, timeout):
            # a KubeError like any other, so callers' retry rules apply instead of a crash.
            raise KubeError(0, f"no answer from the API server: {type(e).__name__}: {e}", method, path) from e
        if resp.status >= 400:
            try:
                message = json.loads(raw).get("message", raw.decode())
            except (ValueError, AttributeError):
                message = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
            raise KubeError(resp.status, message, method, path)
        return json.loads(raw) if raw else None

    async def call(self, method: str, path: str, query: Mapping[str, str] | None = None, body: Any = None, content_type: str = "application/json") -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, self._request, method, path, query, body, content_type)

    async def get(self, path: str) -> dict[str, Any] | None:
        try:
            return await self.call("GET", path)  # type: ignore[no-any-return]
        except KubeError as e:
            if e.status == 404:
                return None
            raise

    async def apply(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply with force: our field manager owns what we render, nothing else."""
        meta = manifest["metadata"]
        path = object_path(manifest["apiVersion"], manifest["kind"], meta["namespace"], meta["name"])
        query = {"fieldManager": FIELD_MANAGER, "force": "true"}
        return await self.call("PATCH", path, query, manifest, APPLY_PATCH)  # type: ignore[no-any-return]

    async def list(self, api_version: str, kind: str, namespace: str, selector: str) -> list[dict[str, Any]]:
        out = await self.call("GET", object_path(api_version, kind, namespace), {"labelSelector": selector})
        return list(out.get("items") or [])

    async def get_service(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self.get(service_path(namespace, name))

    async def patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        # A merge patch touches only the keys we send: status.planner stays the planner's.
        await self.call("PATCH", service_path(namespace, name, "status"), None, {"status": dict(status)}, MERGE_PATCH)
