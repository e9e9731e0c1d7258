"""What a simulation run returns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from pdserve.sim.autoscale import ScalingEvent
from pdserve.sim.config import SimConfig
from pdserve.sim.instance import Instance, State
from pdserve.sim.metrics import RequestRecord, Summary, summarize


@dataclass(slots=True)
class SimResult:
    config: SimConfig
    records: list[RequestRecord]
    summary: Summary
    gpus: int  # GPUs of the initial (static) deployment
    gpu_seconds: float  # over every instance's lifetime (from ``config.gpu_seconds_from_s`` on)
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


def collect_result(cfg: SimConfig, records: list[RequestRecord], itl: Sequence[float] | np.ndarray,
                   instances: list[Instance],
                   end: float, *, gpus: int, kv_recomputes: int, rejected: int, steps: int,
                   scaling_events: list[ScalingEvent]) -> SimResult:
    """Close every instance still held at ``end`` and total the run."""
    for i in instances:
        if i.state is not State.RELEASED:
            i.released_at = end
    # Each prompt counts where it was prefilled: on a prefill engine, or on a decode engine that
    # prefilled it locally (P/D skipped); a decode engine's queries for KV it received are left out.
    hits = sum(i.engine.prefix_hits for i in instances)
    queries = sum(i.engine.prefix_queries - i.engine.remote_prefix_queries for i in instances)
    summary = summarize(records, cfg.slo, itl_samples=itl, prefix_hits=hits, prefix_queries=queries)
    return SimResult(
        config=cfg,
        records=records,
        summary=summary,
        gpus=gpus,
        gpu_seconds=sum(i.gpu_seconds(end, cfg.gpu_seconds_from_s) for i in instances),
        end_time_s=end,
        kv_recomputes=kv_recomputes,
        rejected=rejected,
        preemptions=sum(i.engine.preemptions for i in instances),
        steps=steps,
        instances=[instance_report(i) for i in instances],
        scaling_events=scaling_events,
    )
