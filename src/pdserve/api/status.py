"""Pydantic models of the DisaggregatedService status.

The operator owns every key here except ``planner``, which the planner writes
(free-form, preserved as-is by the API server)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from pdserve.api.spec import ApiModel

CONDITION_TYPES = ("Ready", "Progressing", "Degraded", "ScalingLimited")


class PoolStatus(ApiModel):
    desired: int = Field(0, ge=0, description="Replicas the spec asks for.")
    ready: int = Field(0, ge=0, description="Replicas passing their readiness probe.")
    summary: str = Field("0/0", description="`ready/desired`, for printer columns.")


class Condition(ApiModel):
    type: Literal["Ready", "Progressing", "Degraded", "ScalingLimited"] = Field(description="Condition type.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(min_length=1, description="CamelCase reason for the last transition.")
    message: str = Field("", description="Human-readable detail.")
    last_transition_time: str = Field(description="When status last changed (RFC 3339).", json_schema_extra={"format": "date-time"})
    observed_generation: int | None = Field(None, ge=0, description="metadata.generation this condition was computed for.")


class DisaggregatedServiceStatus(ApiModel):
    """Observed state, written by the operator (all keys but planner) and the planner (planner)."""

    observed_generation: int | None = Field(None, description="metadata.generation the operator last reconciled.")
    prefill: PoolStatus | None = Field(None, description="Prefill pool replicas.")
    decode: PoolStatus | None = Field(None, description="Decode pool replicas.")
    router: PoolStatus | None = Field(None, description="Router replicas.")
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready, Progressing, Degraded and ScalingLimited.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    endpoint: str | None = Field(None, description="OpenAI-compatible base URL of the router Service (cluster DNS).")
    planner: dict[str, Any] | None = Field(None, description="Written by the planner only: lastDecision, reason, time, inputs.")
