"""Metric source: PromQL over vLLM's metric names, through prometheus-api-client.

Workers are selected by a label selector (by default the labels the chart's
PodMonitors attach by relabeling: ``namespace``, ``pdserve_service`` and
``pdserve_role``). Every query is written as
``(new name, this role) or (new name, any role) or (old name, ...)`` so one query
covers vLLM >= 0.10 names, older names (``vllm:time_per_output_token_seconds``,
``vllm:gpu_cache_usage_perc``, ``vllm:gpu_prefix_cache_*``) and pools without a role
label (colocated). Anything Prometheus cannot answer comes back NaN; an unreachable
Prometheus yields an ``Observation`` with ``error`` set, never an exception.
``PrometheusSource.history`` reads the same queries over a past span (one range query each):
what a restarted planner replays to start where the running one was (``core.warm_start``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, get_type_hints

from pdserve.planner.core.observation import Observation, PoolState


@dataclass(frozen=True)
class Names:
    """Metric names, newest first: the first that has data wins."""

    requests: tuple[str, ...] = ("vllm:request_success_total",)
    prompt_hist: tuple[str, ...] = ("vllm:request_prompt_tokens",)
    gen_hist: tuple[str, ...] = ("vllm:request_generation_tokens",)
    ttft: tuple[str, ...] = ("vllm:time_to_first_token_seconds",)
    itl: tuple[str, ...] = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
    running: tuple[str, ...] = ("vllm:num_requests_running",)
    waiting: tuple[str, ...] = ("vllm:num_requests_waiting",)
    kv: tuple[str, ...] = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
    hits: tuple[str, ...] = ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
    queries: tuple[str, ...] = ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
    router_requests: tuple[str, ...] = ("pdserve_router_requests_total",)
    router_inflight: tuple[str, ...] = ("pdserve_router_inflight_requests",)
    router_prompt_tokens: tuple[str, ...] = ("pdserve_router_prompt_tokens_total",)
    router_burst: tuple[str, ...] = ("pdserve_router_prompt_tokens_burst_rate",)


class PromQL:
    """Builds the planner's queries for one service (pure, testable without a server)."""

    def __init__(self, selector: str, *, role_label: str = "pdserve_role", window: str = "1m",
                 quantile: float = 0.9, names: Names = Names(), peak_range: str = "30s",
                 scrape: str = "15s", burst_budget_s: float | None = None,
                 burst_fit_budget_s: float | None = None) -> None:
        self.selector = selector.strip().strip("{}")
        self.role_label = role_label
        self.window = window
        self.quantile = quantile
        self.names = names
        self.peak_range = peak_range  # the planner's interval: peaks since the last tick
        self.scrape = scrape  # the scrape period: irate's resolution
        self.burst_budget_s = burst_budget_s  # which series of the router's burst gauge is the peak
        self.burst_fit_budget_s = burst_fit_budget_s  # ... and the wide peak (the policy fits the burst from both)

    def _sel(self, role: str | None, *, exclude: str | None = None) -> str:
        parts = [p for p in (self.selector, f'{self.role_label}="{role}"' if role else "",
                             f'{self.role_label}!="{exclude}"' if exclude else "") if p]
        return "{" + ",".join(parts) + "}"

    def _alts(self, names: tuple[str, ...], role: str | None, build, *, fallback: bool = True,
              exclude: str | None = None) -> str:
        """``build(name, selector)`` for each name and for the role, then without it (``fallback``;
        ``exclude``: without it but not from that role's pods).

        Each ``vllm:x`` name is followed by ``vllm_x``: a Prometheus 2.x that scrapes vLLM
        without the chart's metric relabeling stores that spelling (prometheus/client_python#1177)."""
        sels = [self._sel(role), self._sel(None, exclude=exclude)] if role and fallback else [self._sel(role)]
        spelled = [*names, *(e for n in names if (e := n.replace(":", "_")) not in names)]
        return " or ".join(f"({build(n, sel)})" for n in spelled for sel in sels)

    def rate_sum(self, names, role, suffix: str = "") -> str:
        return self._alts(names, role, lambda n, s: f"sum(rate({n}{suffix}{s}[{self.window}]))")

    # ``a or b`` falls back to ``b`` only where ``a`` is an empty vector, not where it is NaN.
    # A role whose series exist but saw nothing in the window (a pod that just replaced one
    # that served, or a pool the router bypassed) gives 0/0 = NaN, which would hide the other
    # role's answer: so each mean/ratio drops a zero denominator and each quantile drops NaN
    # (``NaN >= 0`` is false), and the next alternative answers.
    def mean_of_hist(self, names, role, *, fallback: bool = True, exclude: str | None = None) -> str:
        w = self.window
        return self._alts(names, role, lambda n, s: f"sum(rate({n}_sum{s}[{w}])) / (sum(rate({n}_count{s}[{w}])) > 0)",
                          fallback=fallback, exclude=exclude)

    def quantile_of_hist(self, names, role, *, fallback: bool = True) -> str:
        q, w = self.quantile, self.window
        return self._alts(names, role,
                          lambda n, s: f"histogram_quantile({q}, sum by (le) (rate({n}_bucket{s}[{w}]))) >= 0",
                          fallback=fallback)

    def gauge(self, names, role, agg: str = "sum") -> str:
        return self._alts(names, role, lambda n, s: f"{agg}({n}{s})")

    def ratio(self, num, den, role) -> str:
        w = self.window
        return " or ".join(
            f"(sum(rate({a}{self._sel(r)}[{w}])) / (sum(rate({b}{self._sel(r)}[{w}])) > 0))"
            for a, b in zip(num, den) for r in ([role, None] if role else [None])
        )

    def queries(self) -> dict[str, str]:
        n = self.names
        return {
            "request_rate": self.rate_sum(n.requests, "decode"),
            "mean_isl": self.mean_of_hist(n.prompt_hist, "prefill"),
            # Not from the prefill pods: they generate the one token of a P/D prefill (max_tokens=1), so where the
            # decode pods' series saw nothing in the window (a decode pod first scraped after its only request) the
            # fallback read OSL 1 (session 21's CI) and would size decode for it.
            "mean_osl": self.mean_of_hist(n.gen_hist, "decode", exclude="prefill"),
            "ttft_mean_s": self.mean_of_hist(n.ttft, "prefill"),
            "ttft_tail_s": self.quantile_of_hist(n.ttft, "prefill"),
            # the prefill pods' own TTFT only: no fallback to the untyped (client-facing) series
            "prefill_ttft_mean_s": self.mean_of_hist(n.ttft, "prefill", fallback=False),
            "prefill_ttft_tail_s": self.quantile_of_hist(n.ttft, "prefill", fallback=False),
            "itl_mean_s": self.mean_of_hist(n.itl, "decode"),
            "itl_tail_s": self.quantile_of_hist(n.itl, "decode"),
            "running": self.gauge(n.running, None),
            "waiting": self.gauge(n.waiting, None),
            "prefill_waiting": self._alts(n.waiting, "prefill", lambda m, s: f"sum({m}{s})"),
            "decode_waiting": self._alts(n.waiting, "decode", lambda m, s: f"sum({m}{s})"),
            "kv_usage": self.gauge(n.kv, "decode", agg="avg"),
            "prefix_hit_ratio": self.ratio(n.hits, n.queries, "prefill"),
            "router_request_rate": self.rate_sum(n.router_requests, None),
            "router_inflight": self.gauge(n.router_inflight, None),
            "router_prompt_tokens_rate": self.rate_sum(n.router_prompt_tokens, None),
            "router_prompt_tokens_peak": self.peak(),
        } | ({"router_prompt_tokens_peak_wide": self.peak(self.burst_fit_budget_s)}
             if self.burst_fit_budget_s is not None else {})

    def pods(self, role: str) -> str:
        """How many of the role's pods Prometheus scraped: a pool's ready size at a past instant (the planner's
        PoolState comes from the resource now, and the resource keeps no history)."""
        return self._alts(self.names.running, role, lambda m, s: f"count({m}{s})", fallback=False)

    def peak(self, budget_s: float | None = None) -> str:
        """The router's burst gauge at the budget (default: ``burst_budget_s``), highest since the
        last tick; where no router exports it, the highest per-scrape rate of its prompt-token counter."""
        n = self.names
        scraped = self._alts(
                n.router_prompt_tokens, None,
                lambda m, s: f"max_over_time((sum(irate({m}{s}[{self.window}])))[{self.peak_range}:{self.scrape}])")
        if budget_s is None:
            budget_s = self.burst_budget_s
        if budget_s is None:
            return scraped
        sel = self._sel(None)[1:-1]
        budget = ",".join(p for p in (sel, f'budget="{budget_s:g}"') if p)
        gauge = " or ".join(f"(max_over_time((sum({m}{{{budget}}}))[{self.peak_range}:{self.scrape}]))"
                            for m in n.router_burst)
        return f"{gauge} or {scraped}"


class PrometheusSource:
    def __init__(self, url: str, query: PromQL, *, timeout_s: float = 5.0) -> None:
        from prometheus_api_client import PrometheusConnect
        from urllib3.util.retry import Retry

        self.url = url
        self.query = query
        self.timeout_s = timeout_s
        # One quick retry: a dead Prometheus must turn into a held decision fast,
        # not stall the loop through the client's default exponential backoff.
        self._prom = PrometheusConnect(url=url, disable_ssl=True, timeout=timeout_s,
                                       retry=Retry(total=1, backoff_factor=0.1))

    def observe(self, now: float, prefill: PoolState, decode: PoolState) -> Observation:
        """Each query evaluated at ``now`` (wall-clock seconds), not at whenever Prometheus receives it: the
        observation is the store's state at its own timestamp, so ``history`` at the same tick reads back what
        this read (a warm start rebuilds the live memory; a decision can be audited from the store)."""
        values: dict[str, float] = {}
        at = {"time": f"{now:.3f}"}
        try:
            for key, q in self.query.queries().items():
                values[key] = _scalar(self._prom.custom_query(query=q, params=at))
        except Exception as exc:  # network errors, HTTP 5xx, bad JSON: all mean "no data"
            return Observation.failed(now, prefill, decode, f"prometheus {self.url}: {failure_reason(exc, self.timeout_s)}")
        return Observation(timestamp=now, prefill=prefill, decode=decode, **_metric_fields(values))

    def history(self, ticks: Sequence[float], prefill: PoolState, decode: PoolState) -> list[Observation]:
        """What ``observe`` would have read at each of ``ticks`` (one interval apart, oldest first), each query as
        one range query. A pool's size at a tick is its pods' series count there; where there is none (a pool
        without a role label, or no pods), ``prefill`` / ``decode``: the pools now. Raises where Prometheus
        cannot answer (the caller starts cold and says why)."""
        if not ticks:
            return []
        step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
        start, end = (datetime.fromtimestamp(t, tz=UTC) for t in (ticks[0], ticks[-1]))
        # (the client rounds start and end to whole seconds; its params win, so the ticks' own times are sent)
        params = {"start": f"{ticks[0]:.3f}", "end": f"{ticks[-1]:.3f}"}

        def series(q: str) -> dict[int, float]:
            res = self._prom.custom_query_range(query=q, start_time=start, end_time=end, step=f"{step:g}",
                                                params=params)
            return _points(res, ticks[0], step)

        cols = {key: series(q) for key, q in self.query.queries().items()}
        sizes = {role: series(self.query.pods(role)) for role in ("prefill", "decode")}
        out = []
        for i, t in enumerate(ticks):
            values = {key: col.get(i, math.nan) for key, col in cols.items()}
            pools = [PoolState(replicas=int(n), ready=int(n)) if math.isfinite(n := sizes[role].get(i, math.nan))
                     else now for role, now in (("prefill", prefill), ("decode", decode))]
            out.append(Observation(timestamp=t, prefill=pools[0], decode=pools[1], **_metric_fields(values)))
        return out


# Longest "why" kept from a failed query: it lands in status.planner.reason and a Warning Event.
REASON_LIMIT = 160


def failure_reason(exc: BaseException, timeout_s: float | None = None) -> str:
    """Why a query failed, in a line a user reads in ``kubectl describe``.

    requests/urllib3 wrap the socket error in three layers whose messages each repeat the
    full query URL (kilobytes of URL-encoded PromQL); the innermost cause says what went
    wrong (``Connection refused``, ``timed out``), so that one is kept, after what kind of
    failure it was."""
    import requests

    from urllib3.exceptions import ReadTimeoutError

    chain, root = [exc], exc
    while True:  # MaxRetryError keeps its cause in .reason, requests in args[0], urllib3 in __cause__
        candidates = (getattr(root, "reason", None), root.args[0] if root.args else None, root.__cause__)
        nxt = next((c for c in candidates if isinstance(c, BaseException) and all(c is not x for x in chain)), None)
        if nxt is None:
            break
        chain.append(nxt)
        root = nxt
    # A read timeout after retries reaches us as requests' ConnectionError: look down the chain
    # (not for urllib3's ConnectTimeoutError: a refused connection's NewConnectionError is one).
    kind = ("timed out" if isinstance(root, TimeoutError) or any(isinstance(e, (requests.Timeout, ReadTimeoutError)) for e in chain)
            else "unreachable" if isinstance(exc, requests.ConnectionError)
            else type(exc).__name__)
    if kind == "timed out" and timeout_s is not None:
        detail = f"no answer within {timeout_s:g} s"  # the socket's own message is only "timed out"
    else:
        detail = str(root) if root is exc else f"{type(root).__name__}: {root}"
    if "?query=" in detail or len(detail) > REASON_LIMIT:
        detail = detail.split("?query=", 1)[0][:REASON_LIMIT] + "..."
    return f"{kind}: {detail}"


# Observation's float fields: the names PromQL.queries() may use as keys.
METRIC_FIELDS = frozenset(k for k, t in get_type_hints(Observation).items() if t is float and k != "timestamp")


def _metric_fields(values: dict[str, float]) -> dict[str, Any]:
    """The query table's values as Observation keyword arguments.

    The keys are only known at run time, so the type checker cannot tie them to fields;
    this check does: a key naming ``error``, ``extra`` or a pool would be a bug.
    """
    if unknown := sorted(set(values) - METRIC_FIELDS):
        raise ValueError(f"not an Observation metric field: {', '.join(unknown)}")
    return dict(values)


def _points(result: list, start: float, step: float) -> dict[int, float]:
    """A range query's first series (as ``_scalar`` reads an instant one) as {step index from ``start``: value}
    (Prometheus stamps its points in whole milliseconds: the index, not the float time, matches a tick)."""
    out: dict[int, float] = {}
    for t, v in (result[0].get("values", []) if result else []):
        try:
            out[round((float(t) - start) / step)] = float(v)
        except (TypeError, ValueError):
            continue
    return out


def _scalar(result: list) -> float:
    if not result:
        return math.nan
    try:
        return float(result[0]["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return math.nan
