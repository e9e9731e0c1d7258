"""CEL validation rules attached to the API models (become ``x-kubernetes-validations``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CelRule:
    """One rule; ``field_path`` (relative to the object the rule sits on) makes the
    API server name the offending field in its error message."""

    rule: str
    message: str
    field_path: str | None = None
    reason: str = "FieldValueInvalid"

    def to_schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rule": self.rule, "message": self.message}
        if self.field_path:
            out["fieldPath"] = self.field_path
        out["reason"] = self.reason
        return out
