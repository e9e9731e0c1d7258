"""Streaming relay: pass upstream SSE bytes through untouched, time tokens, and on a
decode worker lost mid-stream migrate to another worker and keep streaming.

Migration resumes on another worker with a /v1/completions request whose prompt is
the model's token ids: the request's prompt ids (as vLLM computed them, see
``requests``) followed by the ids generated so far. Those come from the stream
itself when it carries them (vLLM's ``return_token_ids``, which the router asks for
on its own continuation requests), else from re-encoding the streamed text with the
model's tokenizer: in vocabulary by construction, but BPE's canonical split of the
text, which may differ from the sampled split (documented approximation).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

import aiohttp
from prometheus_client import Histogram

from pdserve.router.shell import sse
from pdserve.router.core import pd
from pdserve.router.shell.exchange import ClientGone, Exchange, StreamOut
from pdserve.router.shell.http1 import Response as Http1Response
from pdserve.router.shell.metrics import HistogramBatch
from pdserve.router.policies import Policy
from pdserve.router.shell.upstream import RETRYABLE, Attempt, UpstreamFailed, send_with_retries
from pdserve.tokenization import ModelTokenizer

if TYPE_CHECKING:
    from pdserve.router.shell.handler import Flow
    from pdserve.router.shell.state import RouterState

log = logging.getLogger("pdserve.router.shell.relay")
_ClientGone = ClientGone


class RouterShuttingDown(Exception):
    """Raised into a relay whose stream the router ends because it is shutting down."""


SHUTDOWN_MESSAGE = "the router is shutting down and ended this stream before it finished; retry the request"


def end_streams(state: RouterState) -> int:
    """End every stream being relayed (the router is shutting down): each relay then writes
    an error event and [DONE] and returns. Returns how many. A migration still placing its
    continuation request gives up too (``state.ending``), and none starts after this."""
    state.ending.set()
    streams = list(state.relaying)
    if streams:
        log.warning("shutting down: ending %d streams still in flight with an error event", len(streams))
    for upstream in streams:
        if isinstance(upstream, Http1Response):
            upstream.set_sink(None)
            upstream.abort(RouterShuttingDown())
        else:  # aiohttp's ClientResponse
            upstream.content.set_exception(RouterShuttingDown())
    return len(streams)


class _Clock:
    """Client-side TTFT and inter-token latency."""

    __slots__ = ("state", "flow", "policy", "last", "_itl")

    def __init__(self, state: RouterState, flow: Flow, policy: Policy | None = None) -> None:
        self.state, self.flow, self.policy = state, flow, policy
        self.last: float | None = None
        self._itl = HistogramBatch(state.metrics.itl)

    def tokens(self, n: int) -> None:
        """``n`` content chunks reached the client in one read: the first after the
        gap since the previous read, the rest right behind it (gap 0), as seen."""
        if n <= 0:
            return
        now = time.perf_counter()
        if self.last is None:
            self.state.metrics.ttft_by_mode(self.flow.mode).observe(now - self.flow.arrived)
            if self.flow.trace is not None:
                self.flow.trace.first_token()
            if self.policy is not None:
                # The prompt is computed: its tokens no longer weigh on that worker's queue.
                self.state.scheduler.on_prefill_done(self.policy, self.flow.route.request_id,
                                                     self.state.clock.monotonic())
        else:
            self._itl.observe(now - self.last)
        if n > 1:
            self._itl.observe(0.0, n - 1)
        self.last = now

    def flush(self) -> None:
        self._itl.flush()


# Client write buffer (bytes) above which the worker is no longer read, and below
# which reading resumes: a slow client holds up its own stream, not the router's memory.
_HIGH_WATER = 256 * 1024
_LOW_WATER = 64 * 1024


class _Pipe:
    """Forwards a worker's streamed body to the client from the upstream socket's read
    callback: no task wake-up and no aiohttp writer call per chunk (on 256 streams the
    wake-ups alone put ~20 ms between a token's arrival and its relay, as every stream's
    token lands in the same engine step). A read that is exactly one chunk is written
    to the client as it came, chunk framing included.

    One socket write per upstream read, the response head and the body's end included:
    the head the server holds (``StreamOut.take_head``) goes out with the first chunk (or
    alone after ``HEAD_WAIT_S``), and the chunk completing the stream's ``data: [DONE]``
    carries the body's terminating chunk. Two writes fewer per request; on loopback each
    write is a send() that also runs the receiver's TCP input."""

    __slots__ = ("transport", "upstream", "chunked", "feed", "tokens", "first_chunk", "first", "paused", "loop",
                 "stream", "out", "done", "head_timer", "ended")

    def __init__(self, transport: asyncio.Transport, upstream: Http1Response, out: StreamOut,
                 tracker: sse.PassThroughTracker, clock: _Clock, first_chunk: Histogram,
                 head_timer: asyncio.TimerHandle | None = None) -> None:
        self.transport, self.upstream, self.chunked = transport, upstream, out.chunked
        self.feed, self.tokens, self.first_chunk = tracker.feed, clock.tokens, first_chunk
        self.done = lambda: tracker.done
        # The response, when its end may be written here (None: the server writes it itself).
        self.out = out if out.ends_inline else None
        self.stream = out
        self.head_timer = head_timer
        self.ended = False  # the client's body was ended with the stream's [DONE]
        self.first = True
        self.paused = False
        self.loop = asyncio.get_running_loop()

    def __call__(self, payload: bytes, raw: bytes | None) -> None:
        t = self.transport
        try:
            if t.is_closing():
                self.upstream.abort(_ClientGone())
                return
            if self.ended:
                return  # bytes after the stream's [DONE]: the client's body is already complete
            n = -1
            if not self.chunked:
                data = payload
            else:
                data = raw if raw is not None else b"%x\r\n%b\r\n" % (len(payload), payload)
                if self.out is not None and b"[DONE]" in payload:
                    # The stream's last event: when it is complete, end the client's body in the
                    # same write (the server's own end is marked sent), not in one more write when
                    # the worker's terminating chunk comes.
                    n = self.feed(payload)
                    if self.done():
                        data += b"0\r\n\r\n"
                        self.out.mark_ended()
                        self.ended = True
            if self.first:
                self.first = False
                t.write(self._head() + data)
                # router time from the first upstream byte to the client
                self.first_chunk.observe(time.perf_counter() - self.upstream.first_body_at)
            else:
                t.write(data)
            if n < 0:
                n = self.feed(payload)
            if n:
                self.tokens(n)
            if t.get_write_buffer_size() > _HIGH_WATER and not self.paused:
                self.paused = True
                self.upstream.pause()
                self.loop.call_later(0.005, self._drained)
        except Exception as e:  # noqa: BLE001 - reported by the relay as a router error
            self.upstream.abort(e)

    def _head(self) -> bytes:
        """The response head the server holds, taken (and marked sent) to go out with the first chunk."""
        if self.head_timer is None:
            return b""  # never held, or already sent alone
        self.head_timer.cancel()
        self.head_timer = None
        return self.stream.take_head()

    def _drained(self) -> None:
        if self.upstream.finished:
            return
        if self.transport.is_closing():
            self.upstream.abort(_ClientGone())
        elif self.transport.get_write_buffer_size() <= _LOW_WATER:
            self.paused = False
            self.upstream.resume()
        else:
            self.loop.call_later(0.005, self._drained)


# The longest the head waits for the first chunk: past it the head goes out alone, so a
# client (or a proxy with a header timeout) sees the response start before a long prefill ends.
HEAD_WAIT_S = 0.2


async def relay_stream(state: RouterState, flow: Flow, ex: Exchange, att: Attempt, policy: Policy,
                       headers: dict[str, str]) -> StreamOut:
    upstream = att.resp
    transport = ex.transport
    piped = isinstance(upstream, Http1Response) and transport is not None
    resp = await ex.open_stream({**headers, "Content-Type": "text/event-stream", "Cache-Control": "no-cache"},
                                hold_head=piped)
    head_timer = asyncio.get_running_loop().call_later(HEAD_WAIT_S, resp.send_head) if resp.head_held else None
    # Raw payloads are kept only when a migration could use them.
    tracker = sse.PassThroughTracker(flow.parsed.kind, keep=state.cfg.migrate and flow.parsed.n == 1)
    clock = _Clock(state, flow, policy)
    state.relaying.add(upstream)
    pipe: _Pipe | None = None
    try:
        try:
            if piped:
                assert isinstance(upstream, Http1Response) and transport is not None
                pipe = _Pipe(transport, upstream, resp, tracker, clock, state.metrics.first_chunk, head_timer)
                upstream.set_sink(pipe)
                await upstream.readany()  # returns b"" at the end, raises if it failed
                upstream.set_sink(None)
            else:
                await _relay_by_reads(state, resp, att, tracker, clock)
        except RouterShuttingDown:
            if pipe is None or not pipe.ended:  # (an ended body takes no more events)
                await _fail(resp, SHUTDOWN_MESSAGE)
        except RETRYABLE as e:
            if not tracker.done:
                await _migrate(state, flow, resp, tracker, clock, failed=att.url, why=f"{type(e).__name__}")
        else:
            if not tracker.done:
                # The worker closed the stream cleanly but without [DONE]: also a loss.
                await _migrate(state, flow, resp, tracker, clock, failed=att.url, why="stream ended without [DONE]")
        state.metrics.e2e.observe(time.perf_counter() - flow.arrived)
        await _write_eof(resp)
    except _ClientGone:
        # Leaving the handler releases the upstream connection, which aborts the
        # request on the worker: no orphaned generation.
        pass
    except Exception as e:  # a router bug must still end the stream well-formed, never hang it
        log.exception("stream relay failed")
        if pipe is not None and pipe.ended:
            return resp  # the client's body is complete already
        try:
            await _fail(resp, f"router error while streaming: {type(e).__name__}")
            await _write_eof(resp)
        except (_ClientGone, RuntimeError):
            pass
    finally:
        if head_timer is not None:
            head_timer.cancel()  # the stream ended before its first chunk: the server's end sent the head
        state.relaying.discard(upstream)
        clock.flush()
    return resp


async def _relay_by_reads(state: RouterState, resp: StreamOut, att: Attempt,
                          tracker: sse.PassThroughTracker, clock: _Clock) -> None:
    """The relay for aiohttp's client (https:// workers, --upstream-client aiohttp):
    one read and one write per chunk."""
    # The per-chunk hot path: no coroutine wrapper per write, bound methods hoisted.
    read, write, feed, tokens = att.resp.content.readany, resp.write, tracker.feed, clock.tokens
    first: float | None = None
    while chunk := await read():
        if first is None:  # the first byte's arrival is not visible here: timed from its read
            first = time.perf_counter()
        await write(chunk)  # raises ClientGone
        if first:
            state.metrics.first_chunk.observe(time.perf_counter() - first)
            first = 0.0
        n = feed(chunk)
        if n:
            tokens(n)


async def _write(resp: StreamOut, data: bytes) -> None:
    await resp.write(data)  # raises ClientGone


async def _write_eof(resp: StreamOut) -> None:
    """End the chunked body. A client may close as soon as it has read ``data: [DONE]``
    (many do), before this terminating chunk: that is a client gone (ClientGone), not a
    router error (no traceback in the log; at 256 streams about one in six closed that early)."""
    await resp.write_eof()


async def _migrate(state: RouterState, flow: Flow, resp: StreamOut, passthrough: sse.PassThroughTracker,
                   clock: _Clock, failed: str, why: str) -> None:
    if flow.trace is None:
        return await _resume(state, flow, resp, passthrough, clock, failed, why)
    span = flow.trace.migration(failed, why)
    try:
        await _resume(state, flow, resp, passthrough, clock, failed, why)
    finally:
        span.set_attribute("pdserve.migration.notes", [n for n in flow.notes if n.startswith("migrated")])
        span.end()
        flow.trace.migrating = None


async def _unless_ending(state: RouterState, placing: Coroutine[Any, Any, Attempt]) -> Attempt:
    """``placing``'s result, or RouterShuttingDown when the router's drain ends first (the
    handler is cancelled a second later, which would cut the client's stream mid-body).
    An attempt given up is cancelled (at shutdown: its scheduler bookkeeping no longer matters)."""
    if state.ending.is_set():
        placing.close()  # never started
        raise RouterShuttingDown()
    task = asyncio.ensure_future(placing)
    ending = asyncio.ensure_future(state.ending.wait())
    try:
        await asyncio.wait((task, ending), return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        ending.cancel()
    if task.done():
        return task.result()
    task.cancel()
    await asyncio.wait((task,))
    if not task.cancelled() and task.exception() is None:
        task.result().resp.release()  # it answered just as the drain ended
    raise RouterShuttingDown()


async def _resume(state: RouterState, flow: Flow, resp: StreamOut, passthrough: sse.PassThroughTracker,
                  clock: _Clock, failed: str, why: str) -> None:
    """Continue the stream on another decode worker. Also while the router drains after SIGTERM:
    the continuation is relayed like any stream (``state.relaying``), so it finishes if it can
    before the deadline and otherwise ends with the shutdown error event, never a cut."""
    m = state.metrics
    state.pool.mark_failed(failed)
    if not state.cfg.migrate or flow.parsed.n != 1:
        m.migrations.labels("unsupported").inc()
        await _fail(resp, f"decode worker {failed} was lost mid-stream ({why}) and the stream cannot be resumed")
        return
    tracker = passthrough.parsed()
    model = tracker.model or flow.parsed.model or ""
    tok = state.tokenizer
    generated = _generated_ids(tracker, tok)
    if 0 in tracker.finished:
        # The choice had ended (a stop, or its length) and the worker was lost before the usage event and [DONE]:
        # nothing is left to generate, and a continuation would write on past the model's own end (CI, session 42:
        # the chaos test's decode node lost between a 16-token stream's last token and its usage).
        m.migrations.labels("finished").inc()
        await _close(resp, flow, tracker, model, len(generated))
        return
    tried = {failed}
    while True:
        left = pd.remaining_tokens(flow.parsed.body, len(generated))
        if left == 0:
            m.migrations.labels("budget_spent").inc()
            await _write(resp, sse.reframe(flow.parsed.kind, "", "length", tracker, model))
            await _close(resp, flow, tracker, model, len(generated))
            return
        body = pd.continuation_request(flow.parsed.body, flow.parsed.prompt_ids, generated)
        body["return_token_ids"] = True  # exact ids if this worker is lost too (vLLM >= 0.10.2)
        timeout = aiohttp.ClientTimeout(total=state.cfg.request_timeout_s, sock_connect=state.cfg.connect_timeout_s,
                                        sock_read=state.cfg.read_timeout_s)
        policy = state.decode_policy
        try:
            att = await _unless_ending(state, send_with_retries(
                state, stage="migration", pool="decode", policy=policy, req=flow.route, first=None,
                path="/v1/completions", body=body, headers=_traced({"X-Request-Id": f"{flow.request_id}-m{len(tried)}"}, flow),
                timeout=timeout, exclude=tried))
        except RouterShuttingDown:
            m.migrations.labels("shutdown").inc()
            await _fail(resp, SHUTDOWN_MESSAGE)
            return
        except UpstreamFailed as e:
            m.migrations.labels("failed").inc()
            await _fail(resp, f"decode worker {failed} was lost mid-stream ({why}); no worker could resume: {e.detail}")
            return
        flow.notes.append(f"migrated {failed} -> {att.url} after {len(generated)} tokens")
        cont = sse.StreamTracker("completions", collect=True)
        lost: str | None = None
        ended = False  # by the shutdown drain (end_streams)
        state.relaying.add(att.resp)  # end_streams ends it like the stream it continues
        try:
            if att.resp.status != 200:
                lost = f"HTTP {att.resp.status}"
            else:
                try:
                    async for chunk in att.resp.content.iter_any():
                        clock.tokens(cont.feed(chunk))
                        for idx, text, reason in cont.drain():
                            if idx == 0:
                                await _write(resp, sse.reframe(flow.parsed.kind, text, reason, tracker, model))
                        if cont.error:
                            lost = f"error event: {cont.error.get('message')}"
                            break
                except RETRYABLE as e:
                    lost = type(e).__name__
                if lost is None and not cont.done:
                    lost = "stream ended without [DONE]"
        except RouterShuttingDown:
            ended = True
        finally:
            state.relaying.discard(att.resp)
            att.resp.release()
            state.scheduler.on_finished(policy, flow.route.request_id, att.url, state.clock.monotonic())
        if ended:
            m.migrations.labels("shutdown").inc()
            await _fail(resp, SHUTDOWN_MESSAGE)
            return
        if lost is None:
            m.migrations.labels("ok").inc()
            if cont.usage:
                await _close(resp, flow, tracker, model, len(generated) + int(cont.usage.get("completion_tokens", 0)))
            else:
                await _write(resp, sse.DONE)
            return
        # The new worker failed too: carry on from what it had streamed.
        generated = generated + _generated_ids(cont, tok)
        state.pool.mark_failed(att.url)
        tried.add(att.url)
        failed, why = att.url, lost
        if len(tried) > state.cfg.max_retries + 1:
            m.migrations.labels("failed").inc()
            await _fail(resp, f"stream could not be resumed after {len(tried)} workers failed (last: {why})")
            return


async def _close(resp: StreamOut, flow: Flow, tracker: sse.StreamTracker, model: str, completion_tokens: int) -> None:
    """End a resumed stream as vLLM ends one: the usage event where the client asked for it (``include_usage``) and
    has not had it yet, then [DONE]."""
    if flow.parsed.include_usage and tracker.usage is None:
        prompt = len(flow.parsed.prompt_ids)
        usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion_tokens,
                                 "total_tokens": prompt + completion_tokens}
        await _write(resp, sse.usage_event(flow.parsed.kind, tracker, model, usage))
    await _write(resp, sse.DONE)


def _traced(headers: dict[str, str], flow: Flow) -> dict[str, str]:
    return headers if flow.trace is None else flow.trace.inject(headers)


def _generated_ids(tracker: sse.StreamTracker, tok: ModelTokenizer) -> list[int]:
    ids = tracker.ids_of(0)
    if ids is not None:
        return ids
    return tok.encode(tracker.text_of(0), add_special_tokens=False)


async def _fail(resp: StreamOut, message: str) -> None:
    await _write(resp, sse.error_event(message))
    await _write(resp, sse.DONE)
