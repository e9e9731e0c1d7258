"""Capacity profile: what one replica of each pool sustains within the SLOs.

File format (JSON, ``version: 1``)::

    {
      "version": 1,
      "kind": "pdserve.capacity-profile",
      "model": "llama-3.1-8b", "hardware": "H100-80GB",
      "source": "sweep http://... | sim:<perf profile>",
      "tailQuantile": 0.99,
      "prefill": {
        "tensorParallelSize": 1,
        "points": [  # one replica, increasing load at each ISL
          {"isl": 1024, "throughputTokensPerS": 12000.0, "ttftMeanMs": 95.0, "ttftTailMs": 180.0},
          ...
        ]
      },
      "decode": {
        "tensorParallelSize": 1,
        "points": [  # one replica, increasing concurrency at each context length
          {"context": 2048, "concurrency": 32, "throughputTokensPerS": 1400.0, "itlMeanMs": 22.8, "itlTailMs": 24.0},
          ...
        ]
      },
      "kvLink": {"kvBytesPerToken": 131072, "gbps": 100}  # optional: the P/D KV link per instance
    }

Semantics:
- prefill capacity at ISL *s* under a TTFT SLO *T* = the largest prompt-token throughput
  whose tail TTFT stays <= *T*, found per measured ISL (linear interpolation between the
  last point under the SLO and the first above it), then linearly interpolated over ISL;
- decode capacity at context *c* under an ITL SLO *I* = the largest generated-token
  throughput whose tail ITL stays <= *I*, per measured context, interpolated over context;
- an ISL or context outside the measured range is *not covered*: the planner holds
  rather than extrapolate a curve it has not seen;
- ``expected_*`` give the mean latency the profile predicts at a given per-replica load;
  the planner compares them with observed latency to correct the profile.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, NamedTuple
from collections.abc import Callable, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from pdserve.planner.core.pool_queueing import mean_utilization, tail_utilization

PROFILE_VERSION = 1


class PrefillPoint(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid")
    isl: float = Field(gt=0)
    throughput: float = Field(alias="throughputTokensPerS", ge=0)
    ttft_mean_ms: float = Field(alias="ttftMeanMs", ge=0)
    ttft_tail_ms: float = Field(alias="ttftTailMs", ge=0)


class DecodePoint(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid")
    context: float = Field(gt=0)
    concurrency: float = Field(gt=0)
    throughput: float = Field(alias="throughputTokensPerS", ge=0)
    itl_mean_ms: float = Field(alias="itlMeanMs", ge=0)
    itl_tail_ms: float = Field(alias="itlTailMs", ge=0)


class PrefillCurve(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid")
    tensor_parallel_size: int = Field(1, alias="tensorParallelSize", ge=1)
    points: list[PrefillPoint] = Field(min_length=1)


class DecodeCurve(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid")
    tensor_parallel_size: int = Field(1, alias="tensorParallelSize", ge=1)
    points: list[DecodePoint] = Field(min_length=1)


class KvLink(BaseModel):
    """The P/D KV-cache link: every prompt token's KV crosses it once, through one link
    at the prefill end and one at the decode end (each instance has its own)."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid")
    kv_bytes_per_token: float = Field(alias="kvBytesPerToken", gt=0)
    gbps: float = Field(alias="gbps", gt=0, description="per instance, Gbit/s")

    @property
    def tokens_per_s(self) -> float:
        """Prompt tokens' KV one instance's link moves per second at saturation."""
        return self.gbps * 1e9 / 8 / self.kv_bytes_per_token


class CapacityProfile(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid")
    version: int = PROFILE_VERSION
    kind: Literal["pdserve.capacity-profile"] = "pdserve.capacity-profile"
    model: str = ""
    hardware: str = ""
    source: str = ""
    tail_quantile: float = Field(0.99, alias="tailQuantile", gt=0, lt=1)
    prefill: PrefillCurve
    decode: DecodeCurve
    kv_link: KvLink | None = Field(None, alias="kvLink")  # None: the link is not modelled

    @model_validator(mode="after")
    def _known_version(self) -> CapacityProfile:
        if self.version != PROFILE_VERSION:
            raise ValueError(f"capacity profile version {self.version} is not supported (expected {PROFILE_VERSION})")
        return self

    # ---- persistence -------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path) -> CapacityProfile:
        try:
            data = json.loads(Path(path).read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"capacity profile {path}: not JSON ({exc})") from exc
        return cls.model_validate(data)

    def dump(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.model_dump(by_alias=True), indent=2) + "\n")

    def time_scaled(self, speedup: float) -> CapacityProfile:
        """The same hardware seen through a mock worker running ``speedup`` x real time:
        throughput x speedup, latencies / speedup (what its wall-clock metrics report)."""
        if speedup <= 0:
            raise ValueError(f"speedup must be > 0, got {speedup}")
        data = self.model_dump(by_alias=True)
        for p in data["prefill"]["points"]:
            p["throughputTokensPerS"] *= speedup
            p["ttftMeanMs"] /= speedup
            p["ttftTailMs"] /= speedup
        for p in data["decode"]["points"]:
            p["throughputTokensPerS"] *= speedup
            p["itlMeanMs"] /= speedup
            p["itlTailMs"] /= speedup
        data["source"] = f"{self.source} (x{speedup:g} speed-up)"
        return CapacityProfile.model_validate(data)

    # ---- queries -----------------------------------------------------------------
    def isl_range(self) -> tuple[float, float]:
        xs = [p.isl for p in self.prefill.points]
        return min(xs), max(xs)

    def context_range(self) -> tuple[float, float]:
        xs = [p.context for p in self.decode.points]
        return min(xs), max(xs)

    def prefill_capacity(self, isl: float, ttft_slo_ms: float, replicas: int = 1) -> float | None:
        """Prompt tokens/s one prefill replica sustains at ``isl`` within the TTFT SLO, as one of a pool of
        ``replicas`` behind the router (``pdserve.planner.core.pool_queueing``; 1: the profile as measured).

        None when ``isl`` is outside the profile; 0.0 when the SLO is unattainable there.
        """
        groups = _group(self.prefill.points, lambda p: p.isl)
        tail = lambda p: p.ttft_tail_ms  # noqa: E731
        if replicas <= 1:
            return _interp_over({x: _max_under(pts, tail, ttft_slo_ms) for x, pts in groups.items()}, isl)
        caps = {x: _pool_capacity(tuple((p.throughput, p.ttft_tail_ms) for p in pts), replicas, ttft_slo_ms,
                                  self.tail_quantile) for x, pts in groups.items()}
        return _interp_over(caps, isl)

    def prefill_saturated(self, isl: float) -> float | None:
        """Prompt tokens/s one prefill replica reaches at its highest measured load (any TTFT):
        the rate at which it drains a queue."""
        groups = _group(self.prefill.points, lambda p: p.isl)
        return _interp_over({x: max(p.throughput for p in pts) for x, pts in groups.items()}, isl)

    def decode_saturated(self, context: float, itl_slo_ms: float) -> float | None:
        """Generated tokens/s one decode replica reaches at ``context`` with mean ITL within
        the SLO (KV memory caps the concurrency measured): the bound's decode rate."""
        return self._decode_under(context, itl_slo_ms, lambda p: p.itl_mean_ms)

    def decode_capacity(self, context: float, itl_slo_ms: float) -> float | None:
        """Generated tokens/s one decode replica sustains at ``context`` within the ITL SLO."""
        return self._decode_under(context, itl_slo_ms, lambda p: p.itl_tail_ms)

    def _decode_under(self, context: float, itl_slo_ms: float, itl_ms: Callable[[Any], float]) -> float | None:
        """The most tokens/s at ``context`` whose ``itl_ms`` stays within the SLO (the two
        decode rates differ only in which ITL they hold to it: mean or tail)."""
        groups = _group(self.decode.points, lambda p: p.context)
        caps = {x: _max_under(pts, itl_ms, itl_slo_ms) for x, pts in groups.items()}
        return _interp_over(caps, context)

    def expected_ttft_ms(self, isl: float, throughput_per_replica: float, replicas: int = 1) -> float | None:
        """Mean TTFT at a per-replica load, for a pool of ``replicas`` (read at its equivalent utilisation)."""
        groups = _group(self.prefill.points, lambda p: p.isl)
        lat = {x: _latency_at(pts, lambda p: p.ttft_mean_ms,
                              _equivalent(pts, throughput_per_replica, lambda rho: mean_utilization(replicas, rho)))
               for x, pts in groups.items()}
        return _interp_over(lat, isl)

    def expected_itl_ms(self, context: float, throughput_per_replica: float) -> float | None:
        groups = _group(self.decode.points, lambda p: p.context)
        lat = {x: _latency_at(pts, lambda p: p.itl_mean_ms, throughput_per_replica) for x, pts in groups.items()}
        return _interp_over(lat, context)


def _group(points: Sequence, key) -> dict[float, list]:
    out: dict[float, list] = {}
    for p in points:
        out.setdefault(float(key(p)), []).append(p)
    for pts in out.values():
        pts.sort(key=lambda p: p.throughput)
    return out


def _max_under(points: list, latency, slo: float) -> float:
    """Largest throughput with latency <= slo; interpolates into the first violating step."""
    best = 0.0
    prev = None
    for p in points:  # sorted by throughput
        lat = latency(p)
        if lat <= slo:
            best = max(best, p.throughput)
        elif prev is not None and latency(prev) <= slo and lat > latency(prev):
            frac = (slo - latency(prev)) / (lat - latency(prev))
            best = max(best, prev.throughput + frac * (p.throughput - prev.throughput))
            break
        else:
            break
        prev = p
    return best


class _PoolPoint(NamedTuple):
    throughput: float
    latency: float


def _equivalent(points: list, throughput: float, utilization: Callable[[float], float]) -> float:
    """The one-replica throughput whose latency a pool member at ``throughput`` has: utilisation taken against
    the group's highest measured throughput (its flat-out rate), at most 0.999; at or past that rate, itself."""
    top = points[-1].throughput
    if top <= 0 or throughput <= 0:
        return throughput
    return utilization(min(throughput / top, 0.999)) * top if throughput < top else throughput


def _pooled(points: list, latency, utilization: Callable[[float], float]) -> list[_PoolPoint]:
    """The group's points as a pool member sees them: each throughput at the one-replica latency of its
    equivalent utilisation (the flat-out point keeps its own: past it nothing is measured)."""
    return [_PoolPoint(p.throughput, _latency_at(points, latency, _equivalent(points, p.throughput, utilization)))
            for p in points]


@lru_cache(maxsize=4096)
def _pool_capacity(points: tuple[tuple[float, float], ...], replicas: int, slo_ms: float, quantile: float) -> float:
    """One ISL group's per-member capacity in a pool of ``replicas`` (points: (throughput, tail TTFT), sorted by
    throughput). Cached: each costs a bisection per point, and the planner asks for the same few every tick."""
    pts = [_PoolPoint(x, lat) for x, lat in points]
    pooled = _pooled(pts, lambda p: p.latency, lambda rho: tail_utilization(replicas, rho, quantile))
    return _max_under(pooled, lambda p: p.latency, slo_ms)


def _latency_at(points: list, latency, throughput: float) -> float:
    xs = np.array([p.throughput for p in points])
    ys = np.array([latency(p) for p in points])
    if xs.size == 1:
        return float(ys[0])
    if throughput <= xs[-1]:
        return float(np.interp(throughput, xs, ys))
    # Past the last measured load: continue the last segment's slope (queueing only grows).
    dx = xs[-1] - xs[-2]
    slope = (ys[-1] - ys[-2]) / dx if dx > 0 else 0.0
    return float(ys[-1] + max(slope, 0.0) * (throughput - xs[-1]))


def _interp_over(values: dict[float, float], x: float) -> float | None:
    if not math.isfinite(x):
        return None
    xs = sorted(values)
    if x < xs[0] * (1 - 1e-9) or x > xs[-1] * (1 + 1e-9):
        return None
    return float(np.interp(x, xs, [values[k] for k in xs]))
