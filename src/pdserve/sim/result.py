"""Serialising a run: ``result.json`` (deterministic bytes), ``requests.csv``, plots."""

from __future__ import annotations

import csv
import hashlib
import json
from dataclasses import asdict
from pathlib import Path

from pdserve.sim.config import SimConfig
from pdserve.sim.goodput import GoodputResult
from pdserve.sim.instance import resolve_profile
from pdserve.sim.metrics import CSV_COLUMNS, csv_rows
from pdserve.sim.simulator import SimResult
from pdserve.sim.traces import Trace

SCHEMA_VERSION = 1


def profile_digests(config: SimConfig) -> dict[str, dict[str, object]]:
    """SHA-256 of each used profile's canonical JSON (name, TP and digest)."""
    pools = ("prefill", "decode") if config.topology == "disagg" else ("colocated",)
    out: dict[str, dict[str, object]] = {}
    for pool in pools:
        name, tp = config.pool_profile(pool)
        prof = resolve_profile(name, tp)
        blob = json.dumps(prof.model_dump(mode="json"), sort_keys=True, separators=(",", ":")).encode()
        out[pool] = {"profile": prof.name, "tp": prof.tp, "sha256": hashlib.sha256(blob).hexdigest()}
    return out


def trace_header(trace: Trace) -> dict[str, object]:
    return {
        # The file name only, so the same file gives the same bytes from any directory.
        "name": Path(trace.source).name if trace.format != "synthetic" else trace.source,
        "format": trace.format,
        "sha256": trace.sha256,
        "requests": len(trace.requests),
        "duration_s": round(trace.duration_s, 6),
        "mean_rate_rps": round(trace.mean_rate, 6) if trace.duration_s > 0 else None,
    }


def sweep_entry(label: str, res: GoodputResult, gpus: int) -> dict[str, object]:
    d = res.as_dict()
    d["config"] = label
    d["gpus"] = gpus
    d["goodput_per_gpu"] = round(res.goodput_rps / gpus, 6) if gpus else 0.0
    return d


def result_document(
    trace: Trace,
    result: SimResult,
    *,
    rate_scale: float,
    time_scale: float,
    request_limit: int | None,
    sweep: list[dict[str, object]] | None = None,
) -> dict[str, object]:
    cfg = result.config
    summary = result.summary.as_dict()
    summary.update(
        gpus=result.gpus,
        gpu_seconds=round(result.gpu_seconds, 6),
        throughput_per_gpu_rps=round(result.summary.throughput_rps / result.gpus, 6) if result.gpus else None,
        kv_recomputes=result.kv_recomputes,
        rejected=result.rejected,
        preemptions=result.preemptions,
        engine_steps=result.steps,
        end_time_s=round(result.end_time_s, 6),
    )
    return {
        "header": {
            "tool": "pdserve sim",
            "schema_version": SCHEMA_VERSION,
            "trace": trace_header(trace),
            "profiles": profile_digests(cfg),
            "rate_scale": rate_scale,
            "time_scale": time_scale,
            "request_limit": request_limit,
        },
        "config": {"layout": cfg.label, **cfg.model_dump(mode="json")},
        "summary": summary,
        "instances": result.instances,
        "scaling_events": [
            {"time_s": round(e.time_s, 6), "before": asdict(e.before), "after": asdict(e.after), "note": e.note}
            for e in result.scaling_events
        ],
        "sweep": sweep or [],
    }


def dumps(doc: dict[str, object]) -> str:
    # Sorted keys and fixed separators: byte-identical output for identical runs.
    return json.dumps(doc, sort_keys=True, indent=2, allow_nan=False) + "\n"


def write_requests_csv(result: SimResult, path: Path) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(CSV_COLUMNS)
        w.writerows(csv_rows(result.records, result.config.slo))
    return path
