"""Pure rendering: a DisaggregatedService in, the manifests of its children out (no I/O)."""

from __future__ import annotations

from typing import Any

from pdserve.api import DisaggregatedService
from pdserve.operator.names import RenderOptions
from pdserve.operator.render_network import worker_network_policy
from pdserve.operator.render_router import router_deployment, router_rbac, router_service
from pdserve.operator.render_workers import worker_deployment


def render(service: DisaggregatedService, options: RenderOptions | None = None) -> list[dict[str, Any]]:
    """Every child object, in apply order (RBAC before the pods that use it)."""
    opts = options or RenderOptions()
    return [
        *router_rbac(service),
        worker_deployment(service, "prefill", opts),
        worker_deployment(service, "decode", opts),
        router_deployment(service, opts),
        router_service(service),
        *worker_network_policy(service),
    ]
