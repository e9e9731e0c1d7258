"""Request traces: loaders for public formats, synthetic arrivals, rate/time scaling.

Formats (detected from the file's first non-empty line):

* ``azure``  — Azure LLM inference trace 2023 CSV: ``TIMESTAMP,ContextTokens,GeneratedTokens``
  with wall-clock timestamps (``2023-11-16 18:15:46.6805900``).
* ``mooncake`` — Mooncake FAST'25 JSONL: ``timestamp`` (ms), ``input_length``,
  ``output_length``, ``hash_ids`` (one id per 512-token prompt block; equal ids are
  identical blocks, so they become shared prefix-cache blocks in the simulator).
* ``lengths`` — a length distribution without timestamps: ShareGPT-style
  ``num_prefill_tokens,num_decode_tokens,...`` or ``input_tokens,output_tokens``;
  arrivals are synthesised (Poisson or gamma, seeded) at ``synthetic_rate``.

Every loader validates each line and raises :class:`TraceError` naming the file,
the 1-based line number and the field.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import random
from dataclasses import dataclass, replace
from datetime import datetime, UTC
from pathlib import Path
from typing import Literal

MOONCAKE_BLOCK_TOKENS = 512

TraceFormat = Literal["azure", "mooncake", "lengths"]
ArrivalProcess = Literal["poisson", "gamma"]


class TraceError(ValueError):
    """A trace file that cannot be replayed; the message names line and field."""


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request to replay. ``hash_ids`` empty means a prompt shared with nobody."""

    index: int  # position in the trace after sorting by arrival
    arrival_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Trace:
    requests: tuple[TraceRequest, ...]
    format: str  # azure | mooncake | lengths | synthetic
    source: str  # file path, or a description of the synthetic workload
    sha256: str  # of the file's bytes (of the description for synthetic traces)
    hash_block_tokens: int = MOONCAKE_BLOCK_TOKENS  # tokens per hash id

    @property
    def duration_s(self) -> float:
        return self.requests[-1].arrival_s - self.requests[0].arrival_s if self.requests else 0.0

    @property
    def mean_rate(self) -> float:
        d = self.duration_s
        return len(self.requests) / d if d > 0 else float("inf")

    def scaled(self, rate_scale: float = 1.0, time_scale: float = 1.0) -> Trace:
        """Replay ``rate_scale`` times faster (arrival times / rate_scale * time_scale)."""
        if not (rate_scale > 0 and math.isfinite(rate_scale)):
            raise TraceError(f"rate scale must be a positive number, got {rate_scale!r}")
        if not (time_scale > 0 and math.isfinite(time_scale)):
            raise TraceError(f"time scale must be a positive number, got {time_scale!r}")
        factor = time_scale / rate_scale
        if factor == 1.0:
            return self
        reqs = tuple(replace(r, arrival_s=r.arrival_s * factor) for r in self.requests)
        return replace(self, requests=reqs)

    def head(self, n: int | None) -> Trace:
        """The first ``n`` requests (all when ``n`` is None)."""
        if n is None or n >= len(self.requests):
            return self
        if n < 1:
            raise TraceError(f"request limit must be >= 1, got {n}")
        return replace(self, requests=self.requests[:n])


def _err(path: str, line: int, field: str, problem: str) -> TraceError:
    return TraceError(f"{path}:{line}: field {field!r}: {problem}")


def _int_field(path: str, line: int, field: str, raw: object, minimum: int) -> int:
    if isinstance(raw, bool):
        raise _err(path, line, field, f"expected an integer, got {raw!r}")
    if isinstance(raw, int):
        value = raw
    elif isinstance(raw, float) and raw.is_integer():
        value = int(raw)
    elif isinstance(raw, str):
        text = raw.strip()
        try:
            value = int(text)
        except ValueError:
            try:
                f = float(text)
            except ValueError:
                raise _err(path, line, field, f"expected an integer, got {raw!r}") from None
            if not f.is_integer():
                raise _err(path, line, field, f"expected an integer, got {raw!r}") from None
            value = int(f)
    else:
        raise _err(path, line, field, f"expected an integer, got {raw!r}")
    if value < minimum:
        kind = "negative" if value < 0 else "too small"
        raise _err(path, line, field, f"{kind} value {value} (must be >= {minimum})")
    return value


def detect_format(path: Path) -> TraceFormat:
    with path.open("r", encoding="utf-8", errors="replace") as fh:
        for raw in fh:
            line = raw.strip()
            if not line:
                continue
            if line.startswith("{"):
                return "mooncake"
            header = {h.strip().lower() for h in line.split(",")}
            if {"timestamp", "contexttokens", "generatedtokens"} <= header:
                return "azure"
            if {"num_prefill_tokens", "num_decode_tokens"} <= header or {
                "input_tokens",
                "output_tokens",
            } <= header:
                return "lengths"
            raise TraceError(
                f"{path}:1: unrecognised trace format (expected an Azure CSV header "
                "TIMESTAMP,ContextTokens,GeneratedTokens, Mooncake JSONL objects, or a length CSV "
                f"with num_prefill_tokens,num_decode_tokens / input_tokens,output_tokens); got {line[:80]!r}"
            )
    raise TraceError(f"{path}: empty trace file")


def _parse_azure_time(path: str, line: int, text: str) -> float:
    # Seven fractional digits are more than datetime parses; split them off.
    text = text.strip()
    base, _, frac = text.partition(".")
    try:
        ts = datetime.strptime(base, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()
        return ts + (float("0." + frac) if frac else 0.0)
    except ValueError:
        raise _err(path, line, "TIMESTAMP", f"not a 'YYYY-MM-DD HH:MM:SS[.frac]' time: {text!r}") from None


def _load_azure(path: Path, text: str) -> list[tuple[float, int, int, tuple[int, ...]]]:
    p = str(path)
    reader = csv.reader(io.StringIO(text))
    header = [h.strip() for h in next(reader)]
    cols = {h.lower(): i for i, h in enumerate(header)}
    it, ic, ig = cols["timestamp"], cols["contexttokens"], cols["generatedtokens"]
    rows: list[tuple[float, int, int, tuple[int, ...]]] = []
    for lineno, row in enumerate(reader, start=2):
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) < len(header):
            raise _err(p, lineno, header[min(len(row), len(header) - 1)], f"missing (got {len(row)} columns, expected {len(header)})")
        t = _parse_azure_time(p, lineno, row[it])
        isl = _int_field(p, lineno, "ContextTokens", row[ic], 1)
        osl = _int_field(p, lineno, "GeneratedTokens", row[ig], 1)
        rows.append((t, isl, osl, ()))
    return rows


def _load_mooncake(path: Path, text: str, block: int) -> list[tuple[float, int, int, tuple[int, ...]]]:
    p = str(path)
    rows = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as e:
            raise TraceError(f"{p}:{lineno}: not valid JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(obj, dict):
            raise TraceError(f"{p}:{lineno}: expected a JSON object, got {type(obj).__name__}")
        for field in ("timestamp", "input_length", "output_length"):
            if field not in obj:
                raise _err(p, lineno, field, "missing")
        ts = obj["timestamp"]
        if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts):
            raise _err(p, lineno, "timestamp", f"expected a number of milliseconds, got {ts!r}")
        if ts < 0:
            raise _err(p, lineno, "timestamp", f"negative value {ts}")
        isl = _int_field(p, lineno, "input_length", obj["input_length"], 1)
        osl = _int_field(p, lineno, "output_length", obj["output_length"], 1)
        hids = obj.get("hash_ids", [])
        if not isinstance(hids, list) or any(isinstance(h, bool) or not isinstance(h, int) or h < 0 for h in hids):
            raise _err(p, lineno, "hash_ids", "expected a list of non-negative integers")
        if hids and len(hids) != math.ceil(isl / block):
            raise _err(
                p, lineno, "hash_ids",
                f"{len(hids)} ids for input_length {isl}; expected ceil({isl}/{block}) = {math.ceil(isl / block)}",
            )
        rows.append((ts / 1000.0, isl, osl, tuple(hids)))
    return rows


def _load_lengths(path: Path, text: str) -> list[tuple[int, int]]:
    p = str(path)
    reader = csv.reader(io.StringIO(text))
    header = [h.strip() for h in next(reader)]
    cols = {h.lower(): i for i, h in enumerate(header)}
    if "num_prefill_tokens" in cols:
        fi, fo = "num_prefill_tokens", "num_decode_tokens"
    else:
        fi, fo = "input_tokens", "output_tokens"
    ii, io_ = cols[fi], cols[fo]
    out = []
    for lineno, row in enumerate(reader, start=2):
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) <= max(ii, io_):
            raise _err(p, lineno, fo if len(row) <= io_ else fi, "missing")
        out.append((_int_field(p, lineno, fi, row[ii], 1), _int_field(p, lineno, fo, row[io_], 1)))
    return out


def synth_arrivals(
    n: int, rate: float, *, process: ArrivalProcess = "poisson", cv: float = 1.0, seed: int = 0
) -> list[float]:
    """``n`` arrival times at mean ``rate`` req/s; gamma inter-arrivals have the given CV."""
    if not (rate > 0 and math.isfinite(rate)):
        raise TraceError(f"arrival rate must be a positive number, got {rate!r}")
    if process not in ("poisson", "gamma"):
        raise TraceError(f"arrival process must be 'poisson' or 'gamma', got {process!r}")
    if process == "gamma" and not (cv > 0 and math.isfinite(cv)):
        raise TraceError(f"gamma arrivals need a positive CV, got {cv!r}")
    rng = random.Random(seed)
    t = 0.0
    times = []
    for _ in range(n):
        times.append(t)
        if process == "poisson":
            t += rng.expovariate(rate)
        else:
            shape = 1.0 / (cv * cv)
            t += rng.gammavariate(shape, 1.0 / (shape * rate))
    return times


def load_trace(
    path: str | Path,
    *,
    synthetic_rate: float = 1.0,
    arrival_process: ArrivalProcess = "poisson",
    arrival_cv: float = 1.0,
    seed: int = 0,
) -> Trace:
    """Load any supported trace; arrival times start at 0 and are sorted (stable)."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path}: no such trace file")
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    fmt = detect_format(path)
    text = data.decode("utf-8", errors="replace")
    if fmt == "azure":
        rows = _load_azure(path, text)
    elif fmt == "mooncake":
        rows = _load_mooncake(path, text, MOONCAKE_BLOCK_TOKENS)
    else:
        lengths = _load_lengths(path, text)
        times = synth_arrivals(len(lengths), synthetic_rate, process=arrival_process, cv=arrival_cv, seed=seed)
        rows = [(t, i, o, ()) for t, (i, o) in zip(times, lengths)]
    if not rows:
        raise TraceError(f"{path}: the trace has no requests")
    return from_rows(rows, format=fmt, source=str(path), sha256=digest)


def from_rows(
    rows: list[tuple[float, int, int, tuple[int, ...]]], *, format: str, source: str, sha256: str | None = None
) -> Trace:
    """Build a trace from ``(arrival_s, input_tokens, output_tokens, hash_ids)`` rows."""
    order = sorted(range(len(rows)), key=lambda k: rows[k][0])
    t0 = rows[order[0]][0] if rows else 0.0
    reqs = tuple(
        TraceRequest(index=i, arrival_s=rows[k][0] - t0, input_tokens=rows[k][1], output_tokens=rows[k][2], hash_ids=rows[k][3])
        for i, k in enumerate(order)
    )
    if sha256 is None:
        sha256 = hashlib.sha256(source.encode()).hexdigest()
    return Trace(requests=reqs, format=format, source=source, sha256=sha256)


def synthetic_trace(
    n: int,
    rate: float,
    input_tokens: int | tuple[int, int],
    output_tokens: int | tuple[int, int],
    *,
    process: ArrivalProcess = "poisson",
    cv: float = 1.0,
    seed: int = 0,
) -> Trace:
    """A seeded workload: fixed lengths, or uniform in an inclusive ``(lo, hi)`` range."""
    if n < 1:
        raise TraceError(f"a synthetic trace needs n >= 1 requests, got {n}")
    rng = random.Random(seed + 1)

    def draw(spec: int | tuple[int, int], name: str) -> int:
        lo, hi = (spec, spec) if isinstance(spec, int) else spec
        if lo < 1 or hi < lo:
            raise TraceError(f"{name} range must satisfy 1 <= lo <= hi, got {spec!r}")
        return lo if lo == hi else rng.randint(lo, hi)

    times = synth_arrivals(n, rate, process=process, cv=cv, seed=seed)
    rows: list[tuple[float, int, int, tuple[int, ...]]] = [
        (t, draw(input_tokens, "input_tokens"), draw(output_tokens, "output_tokens"), ()) for t in times]
    desc = f"synthetic n={n} rate={rate} in={input_tokens} out={output_tokens} {process} cv={cv} seed={seed}"
    return from_rows(rows, format="synthetic", source=desc)


def default_block_size(trace: Trace) -> int:
    """16 like vLLM, or the trace's prefix-block size when it carries hash ids."""
    return trace.hash_block_tokens if any(r.hash_ids for r in trace.requests[:1000]) else 16
