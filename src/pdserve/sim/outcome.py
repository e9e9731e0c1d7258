"""What a simulation run returns."""

from __future__ import annotations

from dataclasses import dataclass, field

from pdserve.sim.autoscale import ScalingEvent
from pdserve.sim.config import SimConfig
from pdserve.sim.instance import Instance
from pdserve.sim.metrics import RequestRecord, Summary


@dataclass(slots=True)
class SimResult:
    config: SimConfig
    records: list[RequestRecord]
    summary: Summary
    gpus: int  # GPUs of the initial (static) deployment
    gpu_seconds: float  # over every instance's lifetime
    end_time_s: float
    kv_recomputes: int  # decode had to recompute because the prefill lease expired
    rejected: int  # refused by an engine (prompt too long for max_model_len / KV)
    preemptions: int
    steps: int
    instances: list[dict[str, object]] = field(default_factory=list)
    scaling_events: list[ScalingEvent] = field(default_factory=list)


def instance_report(i: Instance) -> dict[str, object]:
    """One instance's lifetime and counters, as written to result.json."""
    e = i.engine
    return {
        "id": i.instance_id,
        "pool": i.pool,
        "profile": i.spec.profile_name,
        "tp": i.tp,
        "kv_blocks": i.spec.engine_config.num_blocks,
        "requested_at_s": round(i.requested_at, 6),
        "released_at_s": round(i.released_at, 6),
        "prefix_hits_tokens": e.prefix_hits,
        "prefix_queries_tokens": e.prefix_queries,
        "preemptions": e.preemptions,
        "computed_prompt_tokens": e.computed_prompt_tokens,
        "generated_tokens": e.generated_tokens,
        "kv_link_bytes": i.link.bytes_moved,
        "kv_link_busy_s": round(i.link.busy_s, 6),
    }
