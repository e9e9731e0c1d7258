"""The DisaggregatedService API: pydantic models, CRD schema generation, shared types."""

from pdserve.api.resource import (
    API_VERSION,
    CRD_NAME,
    GROUP,
    KIND,
    PLURAL,
    VERSION,
    DisaggregatedService,
)
from pdserve.api.spec import DisaggregatedServiceSpec, EngineSpec, KvConnectorSpec, PoolSpec, RouterSpec
from pdserve.api.status import Condition, DisaggregatedServiceStatus, PoolStatus

__all__ = [
    "API_VERSION",
    "CRD_NAME",
    "GROUP",
    "KIND",
    "PLURAL",
    "VERSION",
    "Condition",
    "DisaggregatedService",
    "DisaggregatedServiceSpec",
    "DisaggregatedServiceStatus",
    "EngineSpec",
    "KvConnectorSpec",
    "PoolSpec",
    "PoolStatus",
    "RouterSpec",
]
