"""A thin, typed Kubernetes shell for the operator: server-side apply, reads, status patches, events.

Built on the official client's ApiClient (auth from kubeconfig or in-cluster) with
raw JSON paths, so the operator holds plain dicts and never pays for model
deserialisation. Blocking calls run in threads; each is short."""

from __future__ import annotations

import asyncio
import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config

from pdserve.api import GROUP, PLURAL, VERSION
from pdserve.operator.names import FIELD_MANAGER

_PLURALS = {
    "Deployment": "deployments",
    "Service": "services",
    "ServiceAccount": "serviceaccounts",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "Pod": "pods",
    "Event": "events",
}


class KubeError(Exception):
    """A non-2xx answer, with the API server's own message."""

    def __init__(self, status: int, message: str, method: str, path: str):
        super().__init__(f"{method} {path}: {status} {message}")
        self.status = status
        self.message = message

    @property
    def transient(self) -> bool:
        return self.status in (409, 429) or self.status >= 500


def load_api_client(kubeconfig: str | None = None) -> k8s.ApiClient:
    """Admin-free auth: an explicit kubeconfig, else $KUBECONFIG / ~/.kube/config, else in-cluster."""
    cfg = k8s.Configuration()
    try:
        k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    except (k8s_config.ConfigException, FileNotFoundError, TypeError):
        if kubeconfig:
            raise
        k8s_config.load_incluster_config(client_configuration=cfg)
    cfg.connection_pool_maxsize = 16
    return k8s.ApiClient(cfg)


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
        resp = self.api.call_api(method, url, header_params=headers, body=body, _request_timeout=self.timeout)
        raw = resp.read()
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
        return await self.call("PATCH", path, query, manifest, "application/apply-patch+yaml")  # type: ignore[no-any-return]

    async def list(self, api_version: str, kind: str, namespace: str, selector: str) -> list[dict[str, Any]]:
        out = await self.call("GET", object_path(api_version, kind, namespace), {"labelSelector": selector})
        return list(out.get("items") or [])

    async def get_service(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self.get(service_path(namespace, name))

    async def patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        # A merge patch touches only the keys we send: status.planner stays the planner's.
        await self.call("PATCH", service_path(namespace, name, "status"), None, {"status": dict(status)}, "application/merge-patch+json")

    async def post_event(self, involved: Mapping[str, Any], reason: str, message: str, warning: bool, now: datetime | None = None) -> None:
        meta = involved["metadata"]
        stamp = (now or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:16]}", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": involved.get("apiVersion", f"{GROUP}/{VERSION}"),
                "kind": involved.get("kind", "DisaggregatedService"),
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid", ""),
            },
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": FIELD_MANAGER},
            "reportingComponent": FIELD_MANAGER,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        await self.call("POST", object_path("v1", "Event", meta["namespace"]), None, event)

