"""The DisaggregatedService resource as a whole, and its API coordinates."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from pdserve.api.status import DisaggregatedServiceStatus
from pdserve.api.spec import DisaggregatedServiceSpec

GROUP = "pdserve.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "DisaggregatedService"
PLURAL = "disaggregatedservices"
SINGULAR = "disaggregatedservice"
SHORT_NAMES = ("dsvc",)
CRD_NAME = f"{PLURAL}.{GROUP}"
# The longest child name is "<name>-prefill-<rs hash>-<pod hash>" (a pod); keep it a DNS label.
MAX_NAME_LENGTH = 42
# The router Service carries the resource's name, and Service names are DNS-1035 labels.
NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"


class ObjectMeta(BaseModel):
    """The metadata fields the operator reads; everything else is kept verbatim."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    name: str = Field(min_length=1, max_length=MAX_NAME_LENGTH, pattern=NAME_PATTERN)
    namespace: str = "default"
    uid: str = ""
    generation: int = 0
    labels: dict[str, str] = Field(default_factory=dict)


class DisaggregatedService(BaseModel):
    """A whole resource as read from the API server (or a manifest)."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")
    api_version: Literal["pdserve.io/v1alpha1"] = Field("pdserve.io/v1alpha1", alias="apiVersion")
    kind: Literal["DisaggregatedService"] = "DisaggregatedService"
    metadata: ObjectMeta
    spec: DisaggregatedServiceSpec
    status: DisaggregatedServiceStatus = Field(default_factory=DisaggregatedServiceStatus)

    @classmethod
    def from_body(cls, body: Any) -> DisaggregatedService:
        """Parse a manifest or a kopf body (any mapping)."""
        data = dict(body)
        return cls.model_validate(
            {k: dict(data[k]) if k in data and data[k] is not None else None for k in ("metadata", "spec")}
            | {"apiVersion": data.get("apiVersion", API_VERSION), "kind": data.get("kind", KIND), "status": dict(data.get("status") or {})}
        )
