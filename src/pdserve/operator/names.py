"""Names and fixed ports shared by rendering, status and the handlers (labels: ``pdserve.kube``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pdserve import __version__
from pdserve.api import DisaggregatedService
from pdserve.api.spec import KV_EVENTS_PORT as SPEC_KV_EVENTS_PORT
from pdserve.api.spec import WORKER_HTTP_PORT
from pdserve.api.vllm_versions import DEFAULT_VERSION, VERSIONS
from pdserve.kube.constants import API_VERSION, KIND, MANAGED_BY, ROLE_LABEL, SERVICE_LABEL

Role = Literal["prefill", "decode", "router"]
WORKER_ROLES: tuple[Role, Role] = ("prefill", "decode")
ROLES: tuple[Role, Role, Role] = ("prefill", "decode", "router")

# Defined next to the CRD's port rules (the handshake ports must stay clear of them).
HTTP_PORT = WORKER_HTTP_PORT
KV_EVENTS_PORT = SPEC_KV_EVENTS_PORT

DEFAULT_PDSERVE_IMAGE = f"ghcr.io/pdserve/pdserve:{__version__}"
# The image of the default supported vLLM version; a resource's engine.vllmVersion picks its own.
DEFAULT_VLLM_IMAGE = VERSIONS[DEFAULT_VERSION].image


@dataclass(frozen=True)
class RenderOptions:
    """Operator-wide settings that are not part of a resource's spec."""

    pdserve_image: str = DEFAULT_PDSERVE_IMAGE
    # None: each resource gets the image of its engine.vllmVersion from the version table.
    vllm_image: str | None = None
    cluster_domain: str = "cluster.local"


def child_name(svc: DisaggregatedService, role: Role) -> str:
    return f"{svc.metadata.name}-{role}"


def service_name(svc: DisaggregatedService) -> str:
    """The router's Service carries the resource's own name: it is the user-facing endpoint."""
    return svc.metadata.name


def selector_labels(svc: DisaggregatedService, role: Role) -> dict[str, str]:
    # Never change these: a Deployment's selector is immutable.
    return {SERVICE_LABEL: svc.metadata.name, ROLE_LABEL: role}


def labels(svc: DisaggregatedService, role: Role) -> dict[str, str]:
    return {
        **selector_labels(svc, role),
        "app.kubernetes.io/name": "pdserve",
        "app.kubernetes.io/instance": svc.metadata.name,
        "app.kubernetes.io/component": role,
        "app.kubernetes.io/managed-by": MANAGED_BY,
    }


def owner_reference(svc: DisaggregatedService) -> dict[str, object]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": svc.metadata.name,
        "uid": svc.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def endpoint_url(svc: DisaggregatedService, options: RenderOptions) -> str:
    return f"http://{service_name(svc)}.{svc.metadata.namespace}.svc.{options.cluster_domain}:{HTTP_PORT}/v1"
