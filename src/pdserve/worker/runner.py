"""Drives the engine model from one asyncio task and hands tokens to waiting requests.

The engine runs on a simulated clock that advances ``speedup`` times faster than the
wall clock: each step is computed at ``now``, the task sleeps until the wall time
matching ``now + duration``, then delivers the step's tokens. Per-request latency
metrics are recorded in wall-clock seconds, as a client sees them.

Timer granularity: uvloop rounds a sleep to the nearest millisecond (a 3.4 ms step
ended at 3 ms) and epoll rounds a timeout up to one, so a step's wake-up is off by up
to ~1 ms of wall time, S times that in model time. Back-to-back steps therefore
start where the previous one ended in model time (as on a GPU), not at the late or
early wake-up, unless the loop is more than ``CATCH_UP_WALL_S`` behind (a loaded
host: that lag is real and shows). Sleeps are rounded up to whole milliseconds, so a
step's tokens are never delivered before the step has ended, only up to ~1 ms late,
and those delays do not add up from step to step.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pdserve.common.clock import WALL, Clock
from pdserve.worker.engine import FINISH_ABORT, Engine, EngineRequest, StepOutput, TokenEvent
from pdserve.worker.kv_events import ZmqEventPublisher, encode_events
from pdserve.worker.metrics import WorkerMetrics

if TYPE_CHECKING:
    from pdserve.worker.tracing import WorkerTracer


# Wake-up error the model clock absorbs: timer rounding (<= 1 ms) plus a wake-up's latency.
CATCH_UP_WALL_S = 0.002


@dataclass(slots=True)
class Tracked:
    req: EngineRequest
    queue: asyncio.Queue[TokenEvent]
    max_tokens_param: int | None
    arrival: float
    scheduled: float | None = None
    first_token: float | None = None
    last_token: float | None = None
    n_out: int = 0
    done: bool = False
    external_tokens: int = 0  # prompt tokens whose KV came by transfer
    held_block_ids: list[int] = field(default_factory=list)
    # --otlp-traces-endpoint only: the request's W3C trace headers and sampling parameters
    trace_headers: dict[str, str] | None = None
    trace_params: dict[str, float | int | None] | None = None


class EngineRunner:
    def __init__(
        self,
        engine: Engine,
        metrics: WorkerMetrics,
        speedup: float = 1.0,
        publisher: ZmqEventPublisher | None = None,
        clock: Clock = WALL,
    ) -> None:
        if speedup <= 0:
            raise ValueError(f"speedup must be positive, got {speedup}")
        self.engine = engine
        self.metrics = metrics
        self.speedup = speedup
        # vLLM counts queue time from the engine's receipt of a request, after its API server: leave it out
        self._frontend_wall = engine.config.frontend_latency_s / speedup
        self.publisher = publisher
        self.clock = clock  # now(): timestamps (KV events, spans); monotonic(): the model clock and latencies
        self._clock = clock.monotonic
        self._t0 = self._clock()
        self._reqs: dict[str, Tracked] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._lag_task: asyncio.Task[None] | None = None
        self.steps = 0
        self.max_lag_s = 0.0
        self.deliver_slice = 16
        self._step_start = 0.0  # simulated time the current step started at
        self._prev_end: float | None = None  # simulated end of the last step, while steps run back to back
        self._last_submit = 0.0  # simulated time of the latest submit (a step never starts before it)
        self.tracer: WorkerTracer | None = None  # --otlp-traces-endpoint (worker/tracing.py)

    # --- clock ---------------------------------------------------------------
    def sim_now(self) -> float:
        return (self._clock() - self._t0) * self.speedup

    def _wall_at(self, sim_t: float) -> float:
        return self._t0 + sim_t / self.speedup

    # --- lifecycle -----------------------------------------------------------
    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._loop(), name="engine-loop")
        self._lag_task = loop.create_task(self._watch_lag(), name="loop-lag")

    async def _watch_lag(self, period: float = 0.005) -> None:
        loop = asyncio.get_running_loop()
        while True:
            t, cpu = loop.time(), time.thread_time()
            await asyncio.sleep(period)
            lag = max(0.0, loop.time() - t - period)
            self.metrics.loop_lag.observe(lag)
            self.metrics.loop_cpu_lag.observe(min(lag, time.thread_time() - cpu))

    async def stop(self) -> None:
        if self._lag_task is not None:
            self._lag_task.cancel()
            self._lag_task = None
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        if self.publisher is not None:
            self.publisher.shutdown()

    @property
    def inflight(self) -> int:
        return len(self._reqs)

    # --- requests ------------------------------------------------------------
    def submit(self, req: EngineRequest, max_tokens_param: int | None = None, external_tokens: int = 0) -> Tracked:
        """Queue a request; raises ValueError for requests the engine cannot take."""
        if self._task is None or self._task.done():
            raise RuntimeError("engine loop is not running")
        now = self.sim_now()
        self.engine.add_request(req, now)
        self._last_submit = now
        t = Tracked(req, asyncio.Queue(), max_tokens_param, self._clock(), external_tokens=external_tokens)
        self._reqs[req.request_id] = t
        self._wake.set()
        return t

    def finish_early(self, request_id: str, reason: str) -> None:
        """End a request before the engine would (stop string matched, client went away)."""
        t = self._reqs.get(request_id)
        if t is None or t.done:
            return
        self.engine.abort(request_id)
        self._complete(t, reason, self._clock())

    def reset_prefix_cache(self) -> bool:
        ok = self.engine.reset_prefix_cache()
        events = self.engine.drain_kv_events()
        if self.publisher is not None and (events.cleared or events.removed or events.stored):
            self.publisher.publish(encode_events(events, self.engine.config.block_size, self.publisher.encoding,
                                                 self.publisher.int_hashes), self.clock.now())
        return ok

    def release_kv(self, request_id: str) -> bool:
        released = self.engine.release(request_id)
        self._wake.set()
        return released

    # --- the loop ------------------------------------------------------------
    async def _loop(self) -> None:
        while True:
            eng = self.engine
            if not eng.has_work():
                await self._idle(eng.next_event_time())
                if not eng.has_work():
                    self._step_once()  # expire KV leases even when idle
                continue
            started = self._clock()
            out = self._step_once(self._next_start())
            if out.num_scheduled == 0:
                self._prev_end = None
                await self._idle(eng.next_event_time(self._step_start))
                continue
            end = self._step_start + out.duration
            target = self._wall_at(end)
            delay = target - self._clock()
            if delay > 0:
                await asyncio.sleep(math.ceil(delay * 1000) / 1000)  # uvloop rounds to the nearest ms
            else:
                await asyncio.sleep(0)  # let HTTP handlers run between back-to-back steps
            self._prev_end = end
            self.max_lag_s = max(self.max_lag_s, self._clock() - max(target, started))
            tokens = out.tokens
            for i in range(0, len(tokens), self.deliver_slice):
                if i:
                    # Each delivered token wakes one stream handler (one socket send). Yielding between
                    # slices keeps a 256-request step from monopolising the loop for tens of ms.
                    await asyncio.sleep(0)
                self._deliver(tokens[i : i + self.deliver_slice])

    async def _idle(self, next_event_sim: float | None) -> None:
        self._wake.clear()
        timeout = None
        if next_event_sim is not None:
            timeout = max(0.0, self._wall_at(next_event_sim) - self._clock())
        try:
            await asyncio.wait_for(self._wake.wait(), timeout)
        except TimeoutError:
            pass

    def _next_start(self) -> float:
        """Model time for the next step: the previous step's end while the loop keeps up with it."""
        now = self.sim_now()
        prev = self._prev_end
        if prev is None or now - prev > CATCH_UP_WALL_S * self.speedup:
            return now
        return max(prev, self._last_submit)

    def _step_once(self, start: float | None = None) -> StepOutput:
        self._step_start = self.sim_now() if start is None else start
        out = self.engine.step(self._step_start)
        self.steps += 1
        now = self._clock()
        for rid in out.started:
            t = self._reqs.get(rid)
            if t is not None and t.scheduled is None:
                t.scheduled = now
        if out.num_scheduled:
            self.metrics.iteration_tokens.observe(out.num_prefill_tokens + out.num_decode_tokens)
        if self.publisher is not None and (out.kv_events.stored or out.kv_events.removed or out.kv_events.cleared):
            self.publisher.publish(encode_events(out.kv_events, self.engine.config.block_size,
                                                 self.publisher.encoding, self.publisher.int_hashes), self.clock.now())
        self.metrics.update_engine(self.engine.stats())
        return out

    def _deliver(self, events: list[TokenEvent]) -> None:
        now = self._clock()
        m = self.metrics
        for ev in events:
            t = self._reqs.get(ev.request_id)
            if t is None or t.done:
                continue
            if t.first_token is None:
                t.first_token = now
                m.ttft.observe(now - t.arrival)
                self._count_prompt(t)
            else:
                assert t.last_token is not None
                m.itl.observe(now - t.last_token)
            t.last_token = now
            t.n_out += 1
            m.generation_tokens.inc()
            if ev.held_block_ids is not None:
                t.held_block_ids = ev.held_block_ids
            t.queue.put_nowait(ev)
            if ev.finished:
                assert ev.finish_reason is not None
                self._complete(t, ev.finish_reason, now, notify=False)

    def _count_prompt(self, t: Tracked) -> None:
        req = t.req
        n_prompt = len(req.prompt_token_ids)
        m = self.metrics
        m.prompt_tokens.inc(n_prompt)
        cached = min(req.num_cached_prompt_tokens, n_prompt)
        external = min(t.external_tokens, n_prompt - cached)
        m.prompt_by_source["local_cache_hit"].inc(cached)
        m.prompt_by_source["external_kv_transfer"].inc(external)
        m.prompt_by_source["local_compute"].inc(n_prompt - cached - external)
        m.prompt_tokens_cached.inc(cached + external)

    def _complete(self, t: Tracked, reason: str, now: float, notify: bool = True) -> None:
        t.done = True
        self._reqs.pop(t.req.request_id, None)
        m = self.metrics
        m.request_success[reason if reason in m.request_success else FINISH_ABORT].inc()
        m.e2e.observe(now - t.arrival)
        scheduled = t.scheduled if t.scheduled is not None else now
        m.queue_time.observe(max(0.0, scheduled - t.arrival - self._frontend_wall))
        first = t.first_token if t.first_token is not None else now
        m.prefill_time.observe(first - scheduled)
        m.decode_time.observe(now - first)
        m.inference_time.observe(now - scheduled)
        if t.n_out > 1:
            m.tpot.observe((now - first) / (t.n_out - 1))
        m.request_prompt_tokens.observe(len(t.req.prompt_token_ids))
        m.request_generation_tokens.observe(t.n_out)
        if t.max_tokens_param is not None:
            m.request_max_tokens.observe(t.max_tokens_param)
        if self.tracer is not None:
            queued = max(0.0, scheduled - t.arrival - self._frontend_wall)
            self.tracer.request_done(
                headers=t.trace_headers, arrival_ns=int((self.clock.now() - (self._clock() - t.arrival)) * 1e9),
                request_id=t.req.request_id, prompt_tokens=len(t.req.prompt_token_ids), completion_tokens=t.n_out,
                ttft_s=first - t.arrival, e2e_s=now - t.arrival, queued_s=queued, prefill_s=first - scheduled,
                decode_s=now - first, inference_s=now - scheduled, params=t.trace_params or {})
        if notify:
            t.queue.put_nowait(TokenEvent(t.req.request_id, -1, t.n_out, True, reason))
