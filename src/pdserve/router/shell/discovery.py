"""Where the workers are: static lists, a JSON discovery file, or Kubernetes pods.

The parsing and the pod filtering are pure functions; the watchers are thin loops
that call ``on_change(Endpoints)`` whenever the set of workers changes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pdserve.kube.constants import ROLE_LABEL, SERVICE_LABEL, pool_selector
from pdserve.kube.pods import is_ready

log = logging.getLogger("pdserve.router.shell.discovery")


class DiscoveryError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Endpoint:
    url: str  # base URL, no trailing slash, e.g. http://10.0.0.5:8000
    kv_events: str | None = None  # tcp://host:port of its ZMQ KV-event publisher


@dataclass(frozen=True, slots=True)
class Endpoints:
    prefill: tuple[Endpoint, ...] = ()
    decode: tuple[Endpoint, ...] = ()
    source: str = field(default="static", compare=False)

    @property
    def disaggregated(self) -> bool:
        return bool(self.prefill)


def normalize_url(url: str) -> str:
    u = url.strip().rstrip("/")
    if u.endswith("/v1"):
        u = u[:-3]
    parts = urlsplit(u)
    try:
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        raise DiscoveryError(f"worker URL {url!r} has a bad port") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise DiscoveryError(f"worker URL {url!r} must look like http://host:port")
    if parts.path not in ("", "/"):
        raise DiscoveryError(f"worker URL {url!r} must not have a path")
    return u


def default_kv_events(url: str, port: int) -> str:
    return f"tcp://{urlsplit(url).hostname}:{port}"


def _entry(raw: Any, where: str, kv_port: int) -> Endpoint:
    if isinstance(raw, str):
        url = normalize_url(raw)
        return Endpoint(url, default_kv_events(url, kv_port))
    if isinstance(raw, Mapping) and isinstance(raw.get("url"), str):
        url = normalize_url(raw["url"])
        kv = raw.get("kv_events")
        if kv is not None and not (isinstance(kv, str) and kv.startswith("tcp://")):
            raise DiscoveryError(f"{where}: kv_events must be a tcp:// address, got {kv!r}")
        return Endpoint(url, kv or default_kv_events(url, kv_port))
    raise DiscoveryError(f"{where}: expected a URL string or {{\"url\": ...}}, got {raw!r}")


def parse_discovery(data: Any, kv_port: int = 5557, source: str = "file") -> Endpoints:
    """Parse ``{"prefill": [...], "decode": [...]}``; entries are URLs or
    ``{"url": URL, "kv_events": "tcp://host:port"}``."""
    if not isinstance(data, Mapping):
        raise DiscoveryError(f"discovery data must be a JSON object, got {type(data).__name__}")
    unknown = set(data) - {"prefill", "decode"}
    if unknown:
        raise DiscoveryError(f"discovery data has unknown keys {sorted(unknown)}; expected 'prefill' and 'decode'")
    pools = {}
    for role in ("prefill", "decode"):
        items = data.get(role, [])
        if not isinstance(items, list):
            raise DiscoveryError(f"'{role}' must be a list, got {type(items).__name__}")
        by_url: dict[str, Endpoint] = {}
        for i, x in enumerate(items):
            e = _entry(x, f"{role}[{i}]", kv_port)
            by_url.setdefault(e.url, e)  # a URL listed twice is one worker
        pools[role] = tuple(by_url.values())
    return Endpoints(pools["prefill"], pools["decode"], source)


def read_discovery_file(path: Path, kv_port: int = 5557) -> Endpoints:
    try:
        text = path.read_text()
    except OSError as e:
        raise DiscoveryError(f"cannot read discovery file {path}: {e}") from e
    try:
        data = json.loads(text)
    except ValueError as e:
        raise DiscoveryError(f"discovery file {path} is not valid JSON: {e}") from e
    return parse_discovery(data, kv_port, source=str(path))


def pods_to_endpoints(pods: Iterable[Mapping[str, Any]], http_port: int = 8000, kv_port: int = 5557,
                      service: str | None = None) -> Endpoints:
    """Workers from pod objects (dicts as the API returns them): only Ready pods that
    have an IP and are not terminating, grouped by their ``pdserve.io/role`` label
    (and, given ``service``, only pods labelled ``pdserve.io/service=<service>``)."""
    pools: dict[str, list[Endpoint]] = {"prefill": [], "decode": []}
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        role = labels.get(ROLE_LABEL)
        if service is not None and labels.get(SERVICE_LABEL) != service:
            continue
        ip = (pod.get("status") or {}).get("podIP")
        if role not in pools or not ip or not is_ready(pod):
            continue
        host = f"[{ip}]" if ":" in ip else ip
        pools[role].append(Endpoint(f"http://{host}:{http_port}", f"tcp://{host}:{kv_port}"))
    key = lambda e: e.url  # noqa: E731
    return Endpoints(tuple(sorted(pools["prefill"], key=key)), tuple(sorted(pools["decode"], key=key)), "kubernetes")


OnChange = Callable[[Endpoints], None]


class FileWatcher:
    """Re-reads the discovery file when its mtime or size changes. A broken file is
    logged and ignored: the last good worker set stays in force."""

    def __init__(self, path: Path, on_change: OnChange, kv_port: int = 5557, interval_s: float = 0.5) -> None:
        self.path, self.on_change, self.kv_port, self.interval_s = path, on_change, kv_port, interval_s
        self._stamp: tuple[float, int] | None = None
        self.last_error: str | None = None

    def poll(self) -> bool:
        try:
            st = self.path.stat()
        except OSError as e:
            self.last_error = f"cannot stat {self.path}: {e}"
            return False
        stamp = (st.st_mtime, st.st_size)
        if stamp == self._stamp:
            return False
        try:
            eps = read_discovery_file(self.path, self.kv_port)
        except DiscoveryError as e:
            if self.last_error != str(e):
                log.warning("ignoring discovery file update: %s", e)
            self.last_error = str(e)
            return False
        self._stamp = stamp
        self.last_error = None
        self.on_change(eps)
        return True

    async def run(self) -> None:
        while True:
            self.poll()
            await asyncio.sleep(self.interval_s)


class KubernetesWatcher:
    """Watches pods labelled ``pdserve.io/service=<name>`` in a thread (the official
    client is synchronous) and reports the Ready worker set on every change."""

    def __init__(self, service: str, namespace: str, on_change: OnChange, loop: asyncio.AbstractEventLoop,
                 http_port: int = 8000, kv_port: int = 5557, api_client: Any = None,
                 read_timeout_s: float = 10.0) -> None:
        self.service, self.namespace, self.on_change, self.loop = service, namespace, on_change, loop
        self.http_port, self.kv_port = http_port, kv_port
        self.api_client = api_client  # tests inject one; otherwise in-cluster or kubeconfig
        self.read_timeout_s = read_timeout_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pods: dict[str, dict[str, Any]] = {}

    def apply_event(self, event_type: str, pod: dict[str, Any]) -> Endpoints:
        name = (pod.get("metadata") or {}).get("name", "")
        if event_type == "DELETED":
            self._pods.pop(name, None)
        else:
            self._pods[name] = pod
        return pods_to_endpoints(self._pods.values(), self.http_port, self.kv_port, self.service)

    def _emit(self, eps: Endpoints) -> None:
        self.loop.call_soon_threadsafe(self.on_change, eps)

    def _run(self) -> None:
        from kubernetes import client, watch

        from pdserve.kube.client import load_api_client

        api = client.CoreV1Api(self.api_client if self.api_client is not None else load_api_client(pool_size=2))
        selector = pool_selector(self.service)
        while not self._stop.is_set():
            try:
                listing = api.list_namespaced_pod(self.namespace, label_selector=selector)
                pods = [api.api_client.sanitize_for_serialization(p) for p in listing.items]
                self._pods = {(p.get("metadata") or {}).get("name", ""): p for p in pods}
                version = listing.metadata.resource_version if listing.metadata else None
                self._emit(pods_to_endpoints(self._pods.values(), self.http_port, self.kv_port, self.service))
                w = watch.Watch()
                self._watch = w
                # A read timeout bounds how long stop() can take and how long a silently
                # dead connection goes unnoticed; on expiry we simply relist.
                for ev in w.stream(api.list_namespaced_pod, self.namespace, label_selector=selector,
                                   resource_version=version, timeout_seconds=30,
                                   _request_timeout=(5, self.read_timeout_s)):
                    if self._stop.is_set():
                        w.stop()
                        break
                    pod = api.api_client.sanitize_for_serialization(ev["object"])
                    self._emit(self.apply_event(ev["type"], pod))
            except Exception as e:  # the API server may restart; keep watching
                log.warning("kubernetes pod watch failed (%s); relisting", e)
                self._stop.wait(1.0)
            else:
                self._stop.wait(0.1)  # the watch timed out normally: relist now

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="k8s-discovery", daemon=True)
        self._thread.start()

    def stop(self, join_timeout: float = 12.0) -> None:
        self._stop.set()
        w = getattr(self, "_watch", None)
        if w is not None:
            w.stop()
        if self._thread is not None:
            self._thread.join(join_timeout)
