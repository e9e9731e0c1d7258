"""One client request end to end: validate, route, prefill (P/D), decode, respond.

I/O only: where the request goes is the scheduler's decision (pdserve.router.core,
the same one the simulator calls); this module sends it there and reports back.
"""

from __future__ import annotations

import asyncio
import json
import logging
import itertools
import os
import time
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import aiohttp

from pdserve.router.core import pd
from pdserve.router.core.scheduler import Mode, RoutePlan
from pdserve.router.policies import Decision, Policy, RouteRequest
from pdserve.router.shell.exchange import Exchange, Reply, StreamOut, error_reply, json_reply
from pdserve.router.shell.relay import relay_stream
from pdserve.router.core.requests import Kind, ParsedRequest, RequestError, parse_request
from pdserve.router.shell.state import Choice, RouterState
from pdserve.router.shell.upstream import RETRYABLE, Attempt, UpstreamFailed, send_with_retries

if TYPE_CHECKING:  # the OpenTelemetry SDK is imported only when tracing is on
    from pdserve.router.shell.tracing import RequestTrace

ROUTE_HEADER = "x-pdserve-route"
# The router's request ids: a random prefix per process and a counter, unique across the
# processes of a pod and across restarts, as uuid4 is, at 0.14 instead of 4.1 µs a request
# (uuid4 reads the kernel's random source every call).
_ID_PREFIX = os.urandom(8).hex()
_ids = itertools.count(1)


def _reseed_ids() -> None:
    global _ID_PREFIX
    _ID_PREFIX = os.urandom(8).hex()  # a forked child must not repeat its parent's ids


os.register_at_fork(after_in_child=_reseed_ids)
log = logging.getLogger("pdserve.router")


@dataclass
class Flow:
    """What happened to one request, for the debug header and metrics.

    ``request_id`` is the router's own (unique per client request, keys the policies'
    ledgers); each P/D attempt sends prefill and decode ``attempt_id()``, unique per
    attempt, as their X-Request-Id (vLLM 0.11 pairs P and D on it). The client's
    X-Request-Id is only echoed back: two clients reusing one must not share KV."""

    request_id: str
    client_request_id: str | None
    parsed: ParsedRequest
    route: RouteRequest
    path: str
    mode: str = "colocated"  # colocated | pd | local (P/D pool, decode prefilled itself)
    prefill: Decision | None = None
    decode: Decision | None = None
    notes: list[str] = field(default_factory=list)
    arrived: float = field(default_factory=time.perf_counter)  # perf_counter() at the handler's entry
    overhead_seen: bool = False  # the arrival -> first upstream write time is recorded
    attempts: int = 0
    trace: RequestTrace | None = None  # None unless --otlp-traces-endpoint (shell/tracing.py)

    def attempt_id(self) -> str:
        self.attempts += 1
        return f"{self.request_id}-{self.attempts}"

    @property
    def correlation_id(self) -> str:
        """What the client sees as X-Request-Id: its own if it sent one."""
        return self.client_request_id or self.request_id

    def header(self) -> str:
        parts = [f"mode={self.mode}"]
        if self.prefill:
            parts.append(f"prefill={self.prefill.worker_id} [{self.prefill.header()}]")
        if self.decode:
            parts.append(f"decode={self.decode.worker_id} [{self.decode.header()}]")
        parts += self.notes
        return " | ".join(parts).replace("\n", " ")[:2000]


class CompletionHandler:
    def __init__(self, state: RouterState) -> None:
        self.state = state
        cfg = state.cfg
        # Built once: a ClientTimeout per request is measurable at hundreds of streams.
        self.prefill_timeout = aiohttp.ClientTimeout(total=cfg.prefill_timeout_s, sock_connect=cfg.connect_timeout_s)
        # A non-streamed answer is silent until complete: only the total timeout applies.
        self.decode_timeouts = {
            stream: aiohttp.ClientTimeout(total=cfg.request_timeout_s, sock_connect=cfg.connect_timeout_s,
                                          sock_read=cfg.read_timeout_s if stream else None)
            for stream in (True, False)}

    async def __call__(self, request: Exchange, kind: Kind) -> Reply | StreamOut:
        arrived = time.perf_counter()
        st = self.state
        route = request.path
        if st.active >= st.cfg.max_concurrency:
            st.metrics.admission.labels("concurrency").inc()
            st.metrics.request_done(route, "-", 429)
            return error_reply(429, f"too many concurrent requests (limit {st.cfg.max_concurrency})",
                                  "RateLimitError", headers={"Retry-After": "1"})
        st.active += 1
        st.metrics.inflight.inc()
        mode = "-"
        flow: Flow | None = None
        try:
            try:
                flow = self._prepare(await request.read_body(st.cfg.max_body_bytes), kind, request, arrived)
                mode = flow.mode
                resp = await self._serve(flow, request)
                mode = flow.mode
            except RequestError as e:
                resp = json_reply(e.body(), e.status, e.headers)
            except asyncio.CancelledError:
                raise
            except UpstreamFailed as e:
                # No worker at all is unavailability (503); workers that all failed, a bad gateway.
                resp = error_reply(503 if e.no_workers else 502, f"upstream {e.stage} failed: {e.detail}",
                                      "ServiceUnavailableError" if e.no_workers else "BadGatewayError")
            except Exception as e:  # a bug must answer in the OpenAI error shape, and be logged
                log.exception("request failed")
                resp = error_reply(500, f"internal router error: {type(e).__name__}: {e}", "InternalServerError")
            st.metrics.request_done(route, mode, resp.status)
            if flow is not None and flow.trace is not None:
                flow.trace.finish(resp.status, mode)
            return resp
        finally:
            st.active -= 1
            st.metrics.inflight.dec()

    def _prepare(self, raw: bytes, kind: Kind, request: Exchange, arrived: float) -> Flow:
        st = self.state
        parsed = parse_request(raw, kind, st.tokenizer)
        known = st.pool.known_models()
        if parsed.model is not None and known and parsed.model not in known:
            raise RequestError(f"The model `{parsed.model}` does not exist.", status=404, err_type="NotFoundError",
                               param="model")
        rid = f"{_ID_PREFIX}{next(_ids):x}"  # never the client's X-Request-Id: P/D pairing keys on it
        client_rid = request.headers.get("x-request-id") or None
        # Hashing every block (sha256) is wasted work for policies that ignore prefixes.
        hashes = (st.index.request_keys(parsed.prompt_ids, cache_salt=parsed.cache_salt, model=parsed.model)
                  if st.uses_prefixes else [])
        rreq = RouteRequest(rid, parsed.prompt_ids, hashes, len(parsed.prompt_ids))
        flow = Flow(rid, client_rid, parsed, rreq, "/v1/chat/completions" if kind == "chat" else "/v1/completions",
                    arrived=arrived)
        if st.tracing is not None:
            flow.trace = st.tracing.start(request.headers, request.path, rid)
            flow.trace.parsed(parsed.model, len(parsed.prompt_ids), parsed.stream)
        return flow

    def _sent(self, flow: Flow, att: Attempt) -> None:
        """Record the router's own time before the first upstream request went out."""
        if not flow.overhead_seen:
            flow.overhead_seen = True
            sent = getattr(att.resp, "sent_at", 0.0) or att.started
            self.state.metrics.overhead.observe(sent - flow.arrived)

    async def _serve(self, flow: Flow, request: Exchange) -> Reply | StreamOut:
        st = self.state
        headers: dict[str, str] = {}
        auth = request.headers.get("authorization")
        if auth:  # workers started with --api-key check it, as vLLM's proxy forwards it
            headers["Authorization"] = auth
        t0_ns = time.time_ns() if flow.trace is not None else 0
        t0 = time.perf_counter()
        plan = st.scheduler.plan(flow.route, st.pool_views(), st.clock.monotonic())
        st.metrics.decision_for("prefill" if plan.prefill else "decode").observe(time.perf_counter() - t0)
        flow.mode = plan.mode.value
        flow.notes += plan.notes
        if flow.trace is not None:
            flow.trace.routed(t0_ns, time.time_ns(), flow.mode, plan.prefill, plan.decode, plan.notes)
        if plan.mode is Mode.PD:
            assert plan.prefill is not None
            self._admit(plan, flow)
            resp = await self._serve_pd(flow, request, plan, headers)
            if resp is not None:
                return resp
            now = st.clock.monotonic()
            plan = st.scheduler.plan_local(flow.route, st.pool.views("decode", now), now)
            flow.mode = plan.mode.value
        return await self._serve_local(flow, request, plan, headers)

    async def _serve_pd(self, flow: Flow, request: Exchange, plan: RoutePlan,
                        headers: dict[str, str]) -> Reply | StreamOut | None:
        """Prefill then decode; None to fall back to a local prefill. A decode failure after
        which a worker may have read the KV goes back through prefill: never the same
        ``kv_transfer_params`` twice."""
        st = self.state
        prefill: Choice | None = Choice(plan.prefill, "prefill") if plan.prefill is not None else None
        spent_on: set[str] = set()
        for _round in range(st.cfg.max_retries + 1):
            attempt = {**headers, "X-Request-Id": flow.attempt_id()}
            kv = await (self._prefill(flow, prefill, attempt) if flow.trace is None else flow.trace.prefill(
                partial(self._prefill, flow, prefill), attempt, lambda: flow.prefill))
            if kv is None:
                return None
            body = pd.decode_request(flow.parsed.body, kv)
            # This round's KV is fresh, so a worker that failed an earlier round may take it; others
            # first, but when none is left (a lone decode worker whose read failed because a
            # scale-down stopped the prefill worker) it beats a certain 503.
            avoid = spent_on if any(u not in spent_on for u in st.pool.urls("decode")) else set()
            try:
                if flow.trace is not None:
                    return await flow.trace.decode_call(partial(
                        self._decode, flow, request, plan.decode_policy, None, body, exclude=avoid,
                        consumable=bool(kv)), attempt, lambda: flow.decode)
                return await self._decode(flow, request, plan.decode_policy, None, body,
                                          attempt, exclude=avoid, consumable=bool(kv))
            except UpstreamFailed as e:
                if not e.spent:
                    raise
                spent_on.update(e.tried)
                st.metrics.handoffs.labels("decode_failed_reprefill").inc()
                flow.notes.append(f"decode failed after a possible KV read ({e.detail[:200]}): prefill again")
                prefill = None  # the prefill policy picks again
        raise UpstreamFailed("decode", f"{sorted(spent_on)} failed after reading prefilled KV", tried=sorted(spent_on))

    async def _serve_local(self, flow: Flow, request: Exchange, plan: RoutePlan,
                           headers: dict[str, str]) -> Reply | StreamOut:
        st = self.state
        first: Choice | None = None
        if plan.decode is not None:
            first = Choice(plan.decode, "decode")
            self._admit(plan, flow)
            st.metrics.observe_prefix(flow.route.prompt_tokens,
                                      flow.route.prompt_tokens - plan.decode.new_prefill_tokens)
        # The client's body goes upstream byte for byte.
        body: dict[str, Any] | bytes = flow.parsed.raw or flow.parsed.body
        attempt = {**headers, "X-Request-Id": flow.attempt_id()}
        if flow.trace is not None:
            return await flow.trace.decode_call(partial(self._decode, flow, request, plan.decode_policy, first, body),
                                                attempt, lambda: flow.decode)
        return await self._decode(flow, request, plan.decode_policy, first, body, attempt)

    def _admit(self, plan: RoutePlan, flow: Flow) -> None:
        verdict = plan.verdict
        if verdict is None:
            return
        st = self.state
        if not verdict.admit:
            st.metrics.admission.labels("ttft_slo").inc()
            spec = st.cfg.routing.admission
            raise RequestError(
                f"predicted time to first token {verdict.predicted_ttft_s * 1000:.0f} ms exceeds "
                f"{spec.factor} x the {spec.ttft_slo_ms:.0f} ms SLO; retry later",
                status=503, err_type="ServiceUnavailableError", headers={"Retry-After": str(verdict.retry_after_s)})
        flow.notes.append(f"predicted_ttft_ms={verdict.predicted_ttft_s * 1000:.0f}")

    async def _prefill(self, flow: Flow, first: Choice | None, headers: dict[str, str]) -> dict[str, Any] | None:
        """Run the prefill step; returns the kv_transfer_params for decode, or None to
        fall back to a local prefill on the decode worker."""
        st = self.state
        timeout = self.prefill_timeout
        body = pd.prefill_request(flow.parsed.body)
        policy = st.prefill_policy
        try:
            att = await send_with_retries(st, stage="prefill", pool="prefill", policy=policy, req=flow.route,
                                          first=first, path=flow.path, body=body, headers=headers, timeout=timeout)
        except UpstreamFailed as e:
            st.metrics.handoffs.labels("prefill_failed").inc()
            flow.notes.append(f"prefill failed ({e.detail[:200]}): decode prefills locally")
            return None
        self._sent(flow, att)
        flow.prefill = att.choice.decision
        if len(att.tried) > 1:
            flow.notes.append(f"prefill retried after {att.tried[:-1]}")
        try:
            raw = await att.resp.read()
            status = att.resp.status
        except RETRYABLE as e:
            raw, status = b"", 599
            flow.notes.append(f"prefill response lost: {type(e).__name__}")
        finally:
            att.resp.release()
            st.scheduler.on_finished(policy, flow.route.request_id, att.url, st.clock.monotonic())
        if status != 200:
            if 400 <= status < 500:
                raise _passthrough_error(status, raw)
            st.metrics.handoffs.labels("prefill_failed").inc()
            return None
        st.scheduler.observe_prefill(att.choice.decision.new_prefill_tokens, time.perf_counter() - att.started)
        st.metrics.observe_prefix(flow.route.prompt_tokens,
                                  flow.route.prompt_tokens - att.choice.decision.new_prefill_tokens)
        try:
            kv = json.loads(raw).get("kv_transfer_params")
        except (ValueError, AttributeError):
            kv = None
        if not kv:
            st.metrics.handoffs.labels("no_kv_params").inc()
            flow.notes.append("prefill returned no kv_transfer_params: decode recomputes")
            return {}
        st.metrics.handoffs.labels("ok").inc()
        return kv

    async def _decode(self, flow: Flow, request: Exchange, policy: Policy, first: Choice | None,
                      body: dict[str, Any] | bytes, headers: dict[str, str], exclude: set[str] | None = None,
                      consumable: bool = False) -> Reply | StreamOut:
        """``consumable``: ``body`` carries KV transfer params; a failure after which they may
        have been read raises ``UpstreamFailed(spent=True)`` instead of resending them."""
        st = self.state
        cfg = st.cfg
        stream = flow.parsed.stream
        timeout = self.decode_timeouts[stream]
        tried: set[str] = set()
        while True:
            att = await send_with_retries(st, stage="decode", pool="decode", policy=policy, req=flow.route,
                                          first=first, path=flow.path, body=body, headers=headers, timeout=timeout,
                                          exclude=tried | (exclude or set()), consumable=consumable)
            first = None
            self._sent(flow, att)
            flow.decode = att.choice.decision
            if len(att.tried) > 1 or tried:
                flow.notes.append(f"decode retried after {sorted(tried) + att.tried[:-1]}")
            out_headers = {"X-Request-Id": flow.correlation_id}
            if cfg.debug_header:
                out_headers[ROUTE_HEADER] = flow.header()
            try:
                if att.resp.status == 200 and stream:
                    return await relay_stream(st, flow, request, att, policy, out_headers)
                try:
                    raw = await att.resp.read()
                except RETRYABLE as e:
                    # Cut off before anything reached the client: another worker can redo it
                    # (with fresh KV, through prefill again, if this one may have read it).
                    st.pool.mark_failed(att.url)
                    if consumable:
                        raise UpstreamFailed("decode", f"{att.url} failed mid-response: {type(e).__name__}",
                                             spent=True, tried=[att.url]) from None
                    tried.add(att.url)
                    st.metrics.retries.labels("decode").inc()
                    if len(tried) > cfg.max_retries:
                        return error_reply(502, f"decode workers {sorted(tried)} failed mid-response",
                                              "BadGatewayError")
                    continue
                if att.resp.status == 200:
                    latency = time.perf_counter() - flow.arrived
                    st.metrics.ttft_by_mode(flow.mode).observe(latency)
                    st.metrics.e2e.observe(latency)
                return Reply(att.resp.status, raw, out_headers, att.resp.content_type or "application/json")
            finally:
                att.resp.release()
                st.scheduler.on_finished(policy, flow.route.request_id, att.url, st.clock.monotonic())


def _passthrough_error(status: int, raw: bytes) -> RequestError:
    try:
        err = json.loads(raw).get("error") or {}
        message = err.get("message") or raw.decode(errors="replace")
        return RequestError(message, status=status, err_type=err.get("type") or "BadRequestError",
                            param=err.get("param"))
    except (ValueError, AttributeError):
        return RequestError(raw.decode(errors="replace")[:500] or f"worker answered HTTP {status}", status=status)
