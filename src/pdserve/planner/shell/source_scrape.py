"""Metric source: scrape the workers' /metrics directly (local demo, no Prometheus).

Rates come from consecutive scrapes of the same target (delta / elapsed), so the
first call after start has no rates and the policy holds; a target that restarts
(counter went down) contributes its new value; a target that disappears or fails
simply drops out of the sum. Histogram quantiles are interpolated within buckets
the way PromQL's ``histogram_quantile`` does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypedDict

import httpx
from prometheus_client.parser import text_string_to_metric_families

from pdserve.planner.core.observation import Observation, PoolState
from pdserve.planner.shell.source_prometheus import Names

Snapshot = dict[str, float]  # "name" or "name|le" -> value summed over label sets


@dataclass(frozen=True)
class Target:
    url: str  # base URL; /metrics is appended unless present
    role: str | None = None  # "prefill", "decode", "router", or None (a worker serving both)

    @property
    def metrics_url(self) -> str:
        return self.url if self.url.rstrip("/").endswith("/metrics") else self.url.rstrip("/") + "/metrics"


def parse_target(spec: str) -> Target:
    """``URL`` or ``ROLE=URL`` (role prefill|decode|router), as given to ``--scrape``."""
    role, sep, url = spec.partition("=")
    if not sep or role.startswith("http"):
        return Target(spec)
    if role not in ("prefill", "decode", "router"):
        raise ValueError(f"--scrape {spec!r}: role must be prefill, decode or router, got {role!r}")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"--scrape {spec!r}: expected an http(s) URL after '='")
    return Target(url, role)


def parse_snapshot(text: str) -> Snapshot:
    out: Snapshot = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.endswith("_bucket") and "le" in s.labels:
                key = f"{s.name}|{s.labels['le']}"
            elif "budget" in s.labels:  # the router's burst gauge: one series per budget
                key = f"{s.name}|{s.labels['budget']}"
            else:
                key = s.name
            out[key] = out.get(key, 0.0) + float(s.value)
    return out


def counter_delta(prev: Snapshot, cur: Snapshot) -> Snapshot:
    return {k: (v - prev[k] if k in prev and v >= prev[k] else v) for k, v in cur.items()}


def histogram_quantile(q: float, buckets: dict[float, float]) -> float:
    """Quantile from cumulative bucket counts {le: count} (le may be inf), like PromQL."""
    if not buckets:
        return math.nan
    edges = sorted(buckets)
    total = buckets[edges[-1]]
    if total <= 0:
        return math.nan
    rank = q * total
    lo_edge, lo_count = 0.0, 0.0
    for le in edges:
        c = buckets[le]
        if c >= rank:
            if math.isinf(le):
                return lo_edge  # PromQL returns the last finite upper bound
            if c == lo_count:
                return le
            return lo_edge + (le - lo_edge) * (rank - lo_count) / (c - lo_count)
        lo_edge, lo_count = le, c
    return lo_edge


class _RouterMetrics(TypedDict):
    """The router's own series, as Observation fields (typed so ``**`` unpacking is checked)."""

    router_request_rate: float
    router_inflight: float
    router_prompt_tokens_rate: float
    router_prompt_tokens_peak: float
    router_prompt_tokens_peak_wide: float


class ScrapeSource:
    def __init__(self, targets: Iterable[Target] | Callable[[], Iterable[Target]], *, quantile: float = 0.9,
                 timeout_s: float = 2.0, names: Names = Names(), burst_budget_s: float | None = None,
                 burst_fit_budget_s: float | None = None) -> None:
        self._targets = targets if callable(targets) else (lambda ts=list(targets): ts)
        self.quantile = quantile
        self.names = names
        self.burst_budget_s = burst_budget_s
        self.burst_fit_budget_s = burst_fit_budget_s
        self._client = httpx.Client(timeout=timeout_s)
        self._prev: dict[str, tuple[float, Snapshot]] = {}

    def close(self) -> None:
        self._client.close()

    def observe(self, now: float, prefill: PoolState, decode: PoolState) -> Observation:
        targets = list(self._targets())
        if not targets:
            return Observation(timestamp=now, prefill=prefill, decode=decode)  # nothing to scrape
        # role -> (summed counter rates, summed gauges)
        rates: dict[str | None, Snapshot] = {}
        gauges: dict[str | None, Snapshot] = {}
        errors, have_rates = [], False
        for t in targets:
            try:
                resp = self._client.get(t.metrics_url)
                resp.raise_for_status()
                snap = parse_snapshot(resp.text)
            except (httpx.HTTPError, ValueError) as exc:
                errors.append(f"{t.metrics_url}: {type(exc).__name__}")
                continue
            _add(gauges.setdefault(t.role, {}), snap)
            prev = self._prev.get(t.metrics_url)
            self._prev[t.metrics_url] = (now, snap)
            if prev and now > prev[0]:
                dt = now - prev[0]
                _add(rates.setdefault(t.role, {}), {k: v / dt for k, v in counter_delta(prev[1], snap).items()})
                have_rates = True
        live = {t.metrics_url for t in targets}
        for url in list(self._prev):
            if url not in live:
                del self._prev[url]
        if len(errors) == len(targets):
            return Observation.failed(now, prefill, decode, "scrape failed: " + "; ".join(errors))
        n = self.names
        prompt_rate = _first(rates.get("router", {}), n.router_prompt_tokens)
        router: _RouterMetrics = {
            "router_request_rate": _first(rates.get("router", {}), n.router_requests),
            "router_inflight": _first(gauges.get("router", {}), n.router_inflight),
            "router_prompt_tokens_rate": prompt_rate,
            # The router's burst gauge at the budget; without it, one scrape per tick: the
            # peak since the last tick is that tick's own rate.
            "router_prompt_tokens_peak": self._burst(gauges.get("router", {}), prompt_rate, self.burst_budget_s),
            # ... and at the fit budget; no fallback: without both series the policy does not fit
            "router_prompt_tokens_peak_wide": self._burst(gauges.get("router", {}), math.nan, self.burst_fit_budget_s),
        }
        rates.pop("router", None)
        gauges.pop("router", None)
        if not have_rates:
            return Observation(timestamp=now, prefill=prefill, decode=decode, running=self._g(gauges, None, n.running),
                               waiting=self._g(gauges, None, n.waiting), **router)
        return Observation(
            timestamp=now, prefill=prefill, decode=decode,
            request_rate=self._pick(rates, "decode", lambda s: _first(s, n.requests)),
            mean_isl=self._pick(rates, "prefill", lambda s: _mean(s, n.prompt_hist)),
            mean_osl=self._pick(rates, "decode", lambda s: _mean(s, n.gen_hist)),
            ttft_mean_s=self._pick(rates, "prefill", lambda s: _mean(s, n.ttft)),
            ttft_tail_s=self._pick(rates, "prefill", lambda s: _quant(s, n.ttft, self.quantile)),
            # the prefill pods' own TTFT only (no fallback to another role: the client's TTFT is another quantity)
            prefill_ttft_mean_s=_mean(rates.get("prefill", {}), n.ttft),
            prefill_ttft_tail_s=_quant(rates.get("prefill", {}), n.ttft, self.quantile),
            itl_mean_s=self._pick(rates, "decode", lambda s: _mean(s, n.itl)),
            itl_tail_s=self._pick(rates, "decode", lambda s: _quant(s, n.itl, self.quantile)),
            running=self._g(gauges, None, n.running),
            waiting=self._g(gauges, None, n.waiting),
            prefill_waiting=_first(gauges.get("prefill", {}), n.waiting),
            decode_waiting=_first(gauges.get("decode", {}), n.waiting),
            kv_usage=self._pick(gauges, "decode", lambda s: _first(s, n.kv) / max(1, _count(targets, "decode"))),
            prefix_hit_ratio=self._pick(rates, "prefill", lambda s: _ratio(s, n.hits, n.queries)),
            extra={"scrape_errors": float(len(errors))}, **router,
        )

    def _burst(self, gauges: Snapshot, fallback: float, budget_s: float | None) -> float:
        if budget_s is None:
            return fallback
        keys = [f"{m}|{budget_s:g}" for m in self.names.router_burst]
        return next((gauges[k] for k in keys if k in gauges), fallback)

    @staticmethod
    def _pick(by_role: dict[str | None, Snapshot], role: str, fn) -> float:
        """The role's own targets first; untyped targets (colocated) as the fallback."""
        for r in (role, None):
            if r in by_role:
                v = fn(by_role[r])
                if math.isfinite(v):
                    return v
        return math.nan

    @staticmethod
    def _g(by_role: dict[str | None, Snapshot], _role, names) -> float:
        vals = [_first(s, names) for s in by_role.values()]
        vals = [v for v in vals if math.isfinite(v)]
        return sum(vals) if vals else math.nan


def _add(acc: Snapshot, snap: Snapshot) -> None:
    for k, v in snap.items():
        acc[k] = acc.get(k, 0.0) + v


def _count(targets: list[Target], role: str) -> int:
    n = sum(1 for t in targets if t.role == role)
    return n or sum(1 for t in targets if t.role is None)


def _first(s: Snapshot, names: tuple[str, ...]) -> float:
    for n in names:
        if n in s:
            return s[n]
    return math.nan


def _mean(s: Snapshot, names: tuple[str, ...]) -> float:
    for n in names:
        c = s.get(n + "_count")
        if c is not None:
            return s.get(n + "_sum", math.nan) / c if c > 0 else math.nan
    return math.nan


def _ratio(s: Snapshot, num: tuple[str, ...], den: tuple[str, ...]) -> float:
    for a, b in zip(num, den):
        if b in s:
            return s.get(a, 0.0) / s[b] if s[b] > 0 else math.nan
    return math.nan


def _quant(s: Snapshot, names: tuple[str, ...], q: float) -> float:
    for n in names:
        prefix = n + "_bucket|"
        buckets = {float(k[len(prefix):]): v for k, v in s.items() if k.startswith(prefix)}
        if buckets:
            return histogram_quantile(q, buckets)
    return math.nan
