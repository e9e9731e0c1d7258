"""Install or upgrade the DisaggregatedService CRD on a live cluster (`pdserve crd --apply`).

Helm installs a chart's ``crds/`` once and never upgrades them, so the chart runs this
as a pre-install / pre-upgrade hook Job (``templates/crd-upgrade-job.yaml``). It uses
server-side apply with a field manager of its own, so fields other managers set on the
CRD (for example a cert-manager CA bundle on a future conversion webhook) are kept.

Before it writes, it checks what the API server would otherwise refuse less clearly or,
worse, accept: the new CRD must still serve every version listed in
``status.storedVersions`` (objects stored in a version nobody serves become
unreadable), and exactly one version is the storage version.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

FIELD_MANAGER = "pdserve-crd"


class CrdUpgradeRefused(Exception):
    """The new CRD would strand stored objects or is malformed; nothing was written."""


@dataclass(frozen=True)
class ApplyResult:
    name: str
    action: str  # "created" | "updated" | "unchanged"
    served_versions: tuple[str, ...]
    storage_version: str
    stored_versions: tuple[str, ...]  # status.storedVersions after the apply


def check_upgrade(new: dict[str, Any], stored_versions: list[str]) -> None:
    """Refuse a CRD that drops a stored version or does not name one storage version."""
    versions = new["spec"]["versions"]
    storage = [v["name"] for v in versions if v.get("storage")]
    if len(storage) != 1:
        raise CrdUpgradeRefused(f"spec.versions: exactly one version must have storage=true, got {storage or 'none'}")
    served = {v["name"] for v in versions if v.get("served")}
    stranded = [v for v in stored_versions if v not in served]
    if stranded:
        raise CrdUpgradeRefused(
            f"spec.versions: objects are stored as {stranded} (status.storedVersions) but the new CRD does not serve "
            f"{'it' if len(stranded) == 1 else 'them'}; migrate storage first (docs/crd-upgrades.md)")


def _established(crd: Any) -> bool:
    conditions = (crd.status.conditions or []) if crd.status else []
    return any(c.type == "Established" and c.status == "True" for c in conditions)


def apply_crd(api: client.ApiClient, crd: dict[str, Any], timeout_s: float = 60.0) -> ApplyResult:
    """Create or server-side-apply ``crd`` and wait until it is Established."""
    ext = client.ApiextensionsV1Api(api)
    name = crd["metadata"]["name"]
    try:
        live = ext.read_custom_resource_definition(name)
    except ApiException as e:
        if e.status != 404:
            raise
        live = None
    stored = list(live.status.stored_versions or []) if live is not None and live.status else []
    check_upgrade(crd, stored)
    before = live.metadata.resource_version if live is not None and live.metadata is not None else None
    body = {k: v for k, v in crd.items() if k != "status"}
    # force=True: this tool owns the CRD's schema; a field another manager set on the same
    # path (say, `kubectl apply` by hand) is taken over rather than failing the upgrade.
    applied = ext.patch_custom_resource_definition(name, body, field_manager=FIELD_MANAGER, force=True,
                                                   _content_type="application/apply-patch+yaml")
    if live is None:
        action = "created"
    else:
        after = applied.metadata.resource_version if applied.metadata is not None else None
        action = "unchanged" if after == before else "updated"
    deadline = time.monotonic() + timeout_s
    while True:
        current = ext.read_custom_resource_definition(name)
        if _established(current):
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"CRD {name} not Established after {timeout_s:.0f}s")
        time.sleep(0.2)
    versions = crd["spec"]["versions"]
    return ApplyResult(
        name=name,
        action=action,
        served_versions=tuple(v["name"] for v in versions if v.get("served")),
        storage_version=next(v["name"] for v in versions if v.get("storage")),
        stored_versions=tuple((current.status.stored_versions if current.status else None) or []),
    )
