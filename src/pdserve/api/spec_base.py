"""The base of every CRD model and the Kubernetes quantity type (shared by spec.py and pods.py)."""

from __future__ import annotations

import re
from typing import Annotated, ClassVar

from pydantic import BaseModel, ConfigDict, WithJsonSchema
from pydantic.alias_generators import to_camel

from pdserve.api.cel import CelRule

# Kubernetes quantity syntax (resource.Quantity), e.g. 500m, 16Gi, 1.5, 2e3.
QUANTITY_PATTERN = r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+|[KMGTPE]i|[numkMGTPE])?$"
QUANTITY_RE = re.compile(QUANTITY_PATTERN)
# Structural int-or-string with the quantity pattern, as controller-gen emits for resource.Quantity.
Quantity = Annotated[int | str, WithJsonSchema({"anyOf": [{"type": "integer"}, {"type": "string"}], "pattern": QUANTITY_PATTERN})]


class ApiModel(BaseModel):
    """CRD objects: camelCase on the wire, unknown fields refused (the API server prunes them)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")
    __cel__: ClassVar[tuple[CelRule, ...]] = ()
