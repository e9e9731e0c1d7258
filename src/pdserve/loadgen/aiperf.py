"""The pure half of driving a server with aiperf: its input file, its command line, its export.

The demo's requests become an aiperf ``mooncake_trace`` file with literal prompts
(``text_input``), the output length to force (``output_length``, sent with
``ignore_eos``) and the send time in milliseconds (``timestamp``), which aiperf
replays on a fixed schedule, open loop, as the built-in replay does. Each row carries
a ``session_id`` naming the request, so that aiperf's per-request records
(``profile_export.jsonl``: its ``conversation_id``) map back to the request they
measured. Times in the records are wall-clock nanoseconds (``time.time_ns``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pdserve.demo.replay import RequestResult, error_message

# The aiperf release this module is written and tested against (the `load` extra pins it).
AIPERF_VERSION = "0.13.0"
SESSION_PREFIX = "pdserve-"
RECORDS_FILE = "profile_export.jsonl"
SUMMARY_FILE = "profile_export_aiperf.json"


class Scheduled(Protocol):
    """What aiperf needs of a request (``pdserve.demo.workload.DemoRequest`` has it)."""

    @property
    def index(self) -> int: ...
    @property
    def send_at_s(self) -> float: ...
    @property
    def prompt(self) -> str: ...
    @property
    def prompt_tokens(self) -> int: ...
    @property
    def max_tokens(self) -> int: ...


@dataclass(frozen=True, slots=True)
class AiperfSettings:
    executable: str  # the `aiperf` program
    # aiperf counts tokens client side with it: a hub id or a local directory (vLLM's --tokenizer).
    tokenizer: str
    endpoint_type: str = "completions"  # the demo sends completion prompts, as the built-in replay does
    request_timeout_s: float = 60.0
    api_key: str | None = None


def session_id(index: int) -> str:
    return f"{SESSION_PREFIX}{index}"


def dataset_rows(requests: Iterable[Scheduled]) -> list[str]:
    """One JSON line per request for ``--custom-dataset-type mooncake_trace``."""
    return [
        json.dumps({"session_id": session_id(r.index), "timestamp": round(r.send_at_s * 1000.0, 3),
                    "text_input": r.prompt, "output_length": r.max_tokens})
        for r in requests
    ]


def command(settings: AiperfSettings, url: str, model: str, input_file: Path, artifact_dir: Path) -> list[str]:
    cmd = [
        settings.executable, "profile",
        "--model", model, "--url", url,
        "--endpoint-type", settings.endpoint_type, "--streaming",
        "--tokenizer", settings.tokenizer,
        "--input-file", str(input_file), "--custom-dataset-type", "mooncake_trace", "--fixed-schedule",
        # Replay the trace's output lengths (aiperf sends them as max_tokens), as the built-in
        # replay and vLLM's benchmark clients do.
        "--extra-inputs", "ignore_eos:true",
        "--request-timeout-seconds", f"{settings.request_timeout_s:g}",
        "--artifact-dir", str(artifact_dir), "--export-level", "records",
        # The terminal belongs to the demo's own view; no GPU here to read DCGM from; the
        # server's /metrics are read by the demo itself.
        "--ui-type", "none", "--no-gpu-telemetry", "--no-server-metrics",
    ]  # fmt: skip
    if settings.api_key:
        cmd += ["--api-key", settings.api_key]
    return cmd


@dataclass(frozen=True, slots=True)
class Record:
    """One aiperf record read back: the demo's result plus its wall-clock send and end times."""

    result: RequestResult
    scheduled_s: float  # when the schedule said to send it (the request's send_at_s)
    sent_wall_s: float
    end_wall_s: float


def _value(metrics: Mapping[str, Any], name: str, scale: float = 1.0) -> float | None:
    m = metrics.get(name)
    if not isinstance(m, Mapping) or not isinstance(m.get("value"), int | float):
        return None
    unit = m.get("unit")
    if unit not in (None, "ms", "tokens", "count"):
        raise ValueError(f"aiperf record: {name} in {unit!r}, expected ms")
    return float(m["value"]) * scale


def parse_record(obj: Mapping[str, Any], requests: Mapping[int, Scheduled]) -> Record | None:
    """A line of ``profile_export.jsonl`` as the demo's result; None for rows that are not ours
    (another phase, or a session id this run did not write)."""
    meta = obj.get("metadata") or {}
    if meta.get("benchmark_phase", "profiling") != "profiling":
        return None
    sid = str(meta.get("conversation_id", ""))
    if not sid.startswith(SESSION_PREFIX) or not sid[len(SESSION_PREFIX):].isdigit():
        return None
    req = requests.get(int(sid[len(SESSION_PREFIX):]))
    if req is None:
        return None
    start = float(meta["request_start_ns"]) / 1e9
    end = float(meta.get("request_end_ns") or meta["request_start_ns"]) / 1e9
    metrics = obj.get("metrics") or {}
    res = RequestResult(req.index, req.send_at_s, req.prompt_tokens)
    error = obj.get("error")
    if error:
        code = error.get("code") if isinstance(error, Mapping) else None
        msg = error_message(error)
        res.error = (f"HTTP {code}: {msg}" if code else msg)[:200]
        return Record(res, req.send_at_s, start, end)
    res.ttft_s = _value(metrics, "time_to_first_token", 1e-3)
    chunks = metrics.get("inter_chunk_latency", {}).get("value")
    # The gaps between streamed chunks, as the built-in replay times them (one token a chunk from vLLM).
    res.gaps_s = [float(v) * 1e-3 for v in chunks] if isinstance(chunks, list) else []
    res.e2e_s = _value(metrics, "request_latency", 1e-3)
    tokens = _value(metrics, "usage_completion_tokens") or _value(metrics, "output_sequence_length")
    res.output_tokens = int(tokens or 0)
    if res.ttft_s is None:
        res.error = "aiperf recorded no first token"
    return Record(res, req.send_at_s, start, end)


def parse_lines(lines: Iterable[str], requests: Mapping[int, Scheduled]) -> list[Record]:
    out = []
    for line in lines:
        if line.strip():
            rec = parse_record(json.loads(line), requests)
            if rec is not None:
                out.append(rec)
    return out


def schedule_start(records: Sequence[Record]) -> float | None:
    """Wall-clock time of the schedule's zero, as the built-in replay's: the earliest of each
    request's send time less its scheduled offset. (aiperf itself starts at the first timestamp
    (fixed-schedule auto offset); the first request of the demo's workload is at ~0 s.)"""
    if not records:
        return None
    return min(rec.sent_wall_s - rec.scheduled_s for rec in records)


def summary_stats(path: Path) -> dict[str, float | str]:
    """aiperf's own aggregate numbers (seconds; counts as they are), for the report's cross-check."""
    data = json.loads(path.read_text())
    out: dict[str, float | str] = {"aiperf_version": str(data.get("aiperf_version", "unknown"))}
    for name, key in (("time_to_first_token", "ttft"), ("inter_chunk_latency", "itl")):
        m = data.get(name) or {}
        for q in ("p50", "p90", "p99"):
            if isinstance(m.get(q), int | float):
                out[f"{key}_{q}"] = float(m[q]) * 1e-3
    for name in ("request_count", "error_request_count"):
        m = data.get(name) or {}
        if isinstance(m.get("avg"), int | float):
            out[name] = float(m["avg"])
    return out
