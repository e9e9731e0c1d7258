"""The engine model: vLLM v1's scheduler on a simulated clock (pure, no I/O).

One ``step(now)`` is one forward pass. Like vLLM's v1 scheduler it first gives each
running request its next tokens (1 for decode, a chunk for an unfinished prefill)
within ``max_num_batched_tokens``, preempting the most recently admitted request
(recompute: its blocks are freed and it restarts from the waiting queue's head) when
KV blocks run out; then, if nothing was preempted, it admits waiting requests FCFS
up to ``max_num_seqs``, starting each from its longest cached prefix. The step's cost
comes from the ``PerfModel``; its tokens take effect at ``now + duration``.

P/D: a request with ``hold_kv`` (prefill for remote decode) keeps its blocks after it
finishes until ``release`` or until its lease expires; a ``remote_prefilled`` request
arrives with its prompt KV already transferred, so only the last prompt token is
recomputed (vLLM recomputes it to get logits), once ``kv_ready_time`` has passed.

Front-end latency: ``EngineConfig.frontend_latency_s`` (from a profile's
``efficiency.frontend_latency_s``) is the time a request spends in vLLM outside the
engine's steps (API server: HTTP, tokenisation, hand-off to the engine process, and the
first token's way back to the client). The mock's own front-end is far lighter than
vLLM's, so the engine models it: a request cannot be scheduled before
``arrival + frontend_latency_s``. Every request pays it once per engine it passes
through, so a P/D request pays it on the prefill and on the decode worker, as it does
behind vLLM's disaggregation proxy. It is 0 unless the caller sets it (the worker CLI
takes the profile's value; see bench/worker/calibration_results.md for where it comes from).
"""

from __future__ import annotations

from collections import deque

from pdserve.worker.engine_types import (
    FINISH_ABORT,
    FINISH_LENGTH,
    FINISH_STOP,
    EngineConfig,
    EngineRequest,
    EngineStats,
    HeldKv,
    StepOutput,
    TokenEvent,
)
from pdserve.worker.kvcache import BlockPool, KvEvents
from pdserve.worker.perf import PerfModel
from pdserve.worker.step_cost import step_cost_fn, step_ends_fn

__all__ = [
    "FINISH_ABORT", "FINISH_LENGTH", "FINISH_STOP", "Engine", "EngineConfig", "EngineRequest", "EngineStats",
    "StepOutput", "TokenEvent",
]


# The events of a step that stored and removed nothing: one shared instance, because building an empty
# KvEvents is ~7 % of a decode step's cost in the simulator. Consumers (the runner's publisher, the simulator's
# router view) only read a step's events; nothing may append to them.
_NO_KV_EVENTS = KvEvents([], [], False)


def initial_rng(seed: int) -> int:
    """The sampler's state before a request's first token (an LCG mod 2**32, see ``Engine._sample``)."""
    return (seed * 0x9E3779B1 + 0x7F4A7C15) & 0xFFFFFFFF


def _drop(queue: list[EngineRequest] | deque[EngineRequest], req: EngineRequest) -> bool:
    """Remove ``req`` by identity (``EngineRequest.__eq__`` would build and compare tuples of every field)."""
    for j, r in enumerate(queue):
        if r is req:
            del queue[j]
            return True
    return False


class Engine:
    def __init__(self, config: EngineConfig, perf: PerfModel) -> None:
        self.config = config
        self.perf = perf
        self._step_cost = step_cost_fn(perf)
        self._step_ends = step_ends_fn(perf)  # runs of plain decode steps (pdserve.worker.decode_run)
        self._frontend_s = config.frontend_latency_s
        self.pool = BlockPool(config.num_blocks, config.enable_prefix_caching, config.free_uncached_first)
        self.waiting: deque[EngineRequest] = deque()
        self.running: list[EngineRequest] = []
        self.held: dict[str, HeldKv] = {}
        self._requests: dict[str, EngineRequest] = {}
        # initial sampler state -> (tokens, states) of that stream so far: pdserve.worker.decode_run's cache
        # (requests with one seed sample one stream, so a run of steps is a slice of it)
        self.sample_streams: dict[int, tuple[list[int], list[int]]] = {}
        self.prefix_queries = 0
        self.prefix_hits = 0
        # prompt tokens of requests whose KV came from a prefill worker (counted in prefix_queries, never
        # in prefix_hits): the simulator leaves them out of the system's hit ratio, which counts each
        # prompt where it was prefilled
        self.remote_prefix_queries = 0
        self.preemptions = 0
        self.computed_prompt_tokens = 0
        self.generated_tokens = 0

    # --- requests ------------------------------------------------------------
    def add_request(self, req: EngineRequest, now: float) -> None:
        cfg = self.config
        if req.request_id in self._requests or req.request_id in self.held:
            raise ValueError(f"duplicate request id {req.request_id!r}")
        n_prompt = len(req.prompt_token_ids)
        if n_prompt == 0:
            raise ValueError("prompt must contain at least one token")
        if n_prompt >= cfg.max_model_len:
            raise ValueError(f"prompt of {n_prompt} tokens does not fit max_model_len={cfg.max_model_len}")
        if req.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {req.max_tokens}")
        longest = min(n_prompt + req.max_tokens, cfg.max_model_len)
        if -(-longest // cfg.block_size) > cfg.num_blocks:
            # it could never be scheduled once it grew that long: refuse now instead of stalling later
            raise ValueError(f"a request of up to {longest} tokens needs more KV blocks than the engine has "
                             f"({cfg.num_blocks} x {cfg.block_size} tokens)")
        req.arrival_time = now
        req.num_prompt_tokens = n_prompt
        req.num_tokens = n_prompt + len(req.output_token_ids)
        req.rng = initial_rng(req.seed)
        gate = req.kv_ready_time
        if self._frontend_s > 0.0:
            # the front-end runs alongside a caller-modelled KV arrival: whichever ends later gates the request
            ready = now + self._frontend_s
            gate = ready if gate is None or gate < ready else gate
        req.schedulable_at = gate
        self._requests[req.request_id] = req
        self.waiting.append(req)

    def abort(self, request_id: str) -> bool:
        """Drop a request wherever it is (queue, batch or held lease) and free its blocks."""
        if request_id in self.held:
            return self.release(request_id)
        req = self._requests.pop(request_id, None)
        if req is None:
            return False
        if not _drop(self.running, req):
            _drop(self.waiting, req)
        self.pool.free_blocks(req.block_ids)
        req.block_ids = []
        return True

    def release(self, request_id: str) -> bool:
        """Free the blocks a finished ``hold_kv`` request kept for its remote decode."""
        held = self.held.pop(request_id, None)
        if held is None:
            return False
        self.pool.free_blocks(held.request.block_ids)
        held.request.block_ids = []
        return True

    def get_held(self, request_id: str) -> EngineRequest | None:
        held = self.held.get(request_id)
        return held.request if held else None

    def reset_prefix_cache(self) -> bool:
        """Forget all cached blocks (vLLM's /reset_prefix_cache); refused while any block is in use.
        The AllBlocksCleared event comes out of the next ``step`` or ``drain_kv_events``."""
        return self.pool.reset_prefix_cache()

    def drain_kv_events(self) -> KvEvents:
        """KV events recorded outside a step (e.g. by ``reset_prefix_cache``)."""
        return self.pool.drain_events()

    def knows(self, request_id: str) -> bool:
        """Whether the id is in use (queued, running or holding KV)."""
        return request_id in self._requests or request_id in self.held

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def next_event_time(self, now: float | None = None) -> float | None:
        """Earliest time something changes without new input (a lease expiry, remote KV arriving, a request
        leaving the modelled front-end). With ``now``, gates already passed are left out: such a request is
        blocked by something else (KV, batch limits), and a caller waiting for this time would spin."""
        times = [next(iter(self.held.values())).expires_at] if self.held else []
        if now is None:
            times += [r.schedulable_at for r in self.waiting if r.schedulable_at is not None]
        else:
            times += [r.schedulable_at for r in self.waiting if r.schedulable_at is not None and r.schedulable_at > now]
        return min(times) if times else None

    def stats(self) -> EngineStats:
        return EngineStats(
            running=len(self.running),
            waiting=len(self.waiting),
            held=len(self.held),
            kv_usage=self.pool.usage(),
            num_blocks=self.pool.num_blocks,
            free_blocks=self.pool.num_free,
            prefix_queries=self.prefix_queries,
            prefix_hits=self.prefix_hits,
            preemptions=self.preemptions,
            computed_prompt_tokens=self.computed_prompt_tokens,
            generated_tokens=self.generated_tokens,
        )

    # --- the step ------------------------------------------------------------
    # The simulator calls this millions of times at small batch sizes, so it is written for speed:
    # locals instead of attribute lookups, sampling inlined, and StepOutput built once at the end.
    # tests/worker/test_engine_golden.py pins its outputs to those of the plainer version it replaced.
    def step(self, now: float) -> StepOutput:
        if not self.held and not self.waiting:
            out = self._decode_step(now)
            if out is not None:
                return out
        started: list[str] = []
        preempted: list[str] = []
        expired: list[str] = []
        if self.held:
            self._expire_leases(now, expired)
        cfg = self.config
        budget = cfg.max_num_batched_tokens
        bs = cfg.block_size
        thr = cfg.long_prefill_token_threshold
        scheduled: list[tuple[EngineRequest, int]] = []
        preempted_any = False

        # 1. running requests, oldest first
        running = self.running
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            n = req.num_tokens - req.num_computed
            if thr and n > thr:
                n = thr
            if n > budget:
                n = budget
            if n <= 0:
                i += 1
                continue
            if req.num_computed + n > len(req.block_ids) * bs:
                while not self._ensure_blocks(req, req.num_computed + n):
                    victim = running.pop()
                    self._preempt(victim, preempted)
                    preempted_any = True
                    if victim is req:
                        n = 0
                        break
                if n == 0:
                    break  # req itself was preempted; everything after it is gone too
            scheduled.append((req, n))
            budget -= n
            i += 1
            if (req.num_computed + n) // bs > req.num_cached_blocks:
                self._cache_full_blocks(req, min(req.num_computed + n, req.num_tokens) // bs)

        # 2. admit waiting requests (vLLM skips admission in a step that preempted)
        if not preempted_any and self.waiting:
            budget = self._admit(now, budget, scheduled, started)

        # 3. cost, advance, sample: the cost terms use the context *before* this step.
        # attn_pairs is summed as an int: every term is a whole number (n(n+1) is even), so this equals
        # the float sum exactly while it stays below 2**53.
        new_tokens = 0
        attn_pairs = 0
        kv_read = 0
        prefill = 0
        sampling: list[EngineRequest] = []  # requests whose prompt is done: one token each
        for req, n in scheduled:
            ctx = req.num_computed
            new_tokens += n
            if n == 1:
                attn_pairs += ctx + 1
            else:
                attn_pairs += n * ctx + n * (n + 1) // 2
            kv_read += ctx
            n_prompt = req.num_prompt_tokens
            if ctx < n_prompt:
                prefill += n if n < n_prompt - ctx else n_prompt - ctx
            req.num_computed = ctx = ctx + n
            if ctx // bs > req.num_cached_blocks:
                self._cache_full_blocks(req, ctx // bs)
            if ctx < req.num_tokens:
                continue  # prefill chunk not done yet: no token this step
            sampling.append(req)
        tokens, finished = self._sample(sampling)
        self.generated_tokens += len(tokens)
        self.computed_prompt_tokens += prefill
        duration = self._step_cost(new_tokens, float(attn_pairs), kv_read, len(scheduled))
        return StepOutput(duration, tokens, started, preempted, expired, prefill, new_tokens - prefill,
                          len(scheduled), self._end_step(now, duration, finished))

    def _decode_step(self, now: float) -> StepOutput | None:
        """``step`` for its commonest case, in one pass: nothing waiting or held, every running request
        decoding (one token each) within the budget and its blocks. None when that does not hold (nothing
        changed yet); then ``step`` takes the general path. Same arithmetic, order and outputs as it."""
        running = self.running
        cfg = self.config
        if len(running) > cfg.max_num_batched_tokens or cfg.long_prefill_token_threshold < 0:
            return None
        bs = cfg.block_size
        for req in running:
            ctx = req.num_computed
            if req.num_tokens - ctx != 1 or ctx + 1 > len(req.block_ids) * bs:
                return None
        attn_pairs = 0
        kv_read = 0
        prefill = 0
        for req in running:
            ctx = req.num_computed
            attn_pairs += ctx + 1
            kv_read += ctx
            if ctx < req.num_prompt_tokens:
                prefill += 1  # a remote-prefilled request recomputes its last prompt token
            req.num_computed = ctx = ctx + 1
            if ctx // bs > req.num_cached_blocks:
                self._cache_full_blocks(req, ctx // bs)
        tokens, finished = self._sample(running)
        n_seqs = len(tokens)
        self.generated_tokens += n_seqs
        self.computed_prompt_tokens += prefill
        duration = self._step_cost(n_seqs, float(attn_pairs), kv_read, n_seqs)
        return StepOutput(duration, tokens, [], [], [], prefill, n_seqs - prefill, n_seqs,
                          self._end_step(now, duration, finished))

    def _sample(self, reqs: list[EngineRequest]) -> tuple[list[TokenEvent], list[tuple[EngineRequest, TokenEvent]]]:
        """One token for each of ``reqs`` (prompt computed), in order: a deterministic per-request stream (an
        LCG seeded from the request's seed). Returns the token events and the requests this token finishes.
        Both step paths call it once per step, so the per-token loop stays one tight loop."""
        cfg = self.config
        max_model_len = cfg.max_model_len
        eos_id = cfg.eos_token_id
        words = cfg.output_token_ids
        n_words = len(words)
        tokens: list[TokenEvent] = []
        finished: list[tuple[EngineRequest, TokenEvent]] = []
        for req in reqs:
            out_ids = req.output_token_ids
            idx = len(out_ids)
            n_out = idx + 1
            req.rng = rng = (req.rng * 1664525 + 1013904223) & 0xFFFFFFFF
            eos_at = req.eos_after
            if eos_at is not None and not req.ignore_eos and n_out >= eos_at and n_out >= req.min_tokens:
                token = eos_id
            else:
                token = words[(rng >> 8) % n_words]
            out_ids.append(token)
            req.num_tokens = num_tokens = req.num_tokens + 1
            if n_out >= req.min_tokens and (
                (token == eos_id and not req.ignore_eos) or (req.stop_token_ids and token in req.stop_token_ids)
            ):
                ev = TokenEvent(req.request_id, token, idx, True, FINISH_STOP)
                finished.append((req, ev))
            elif n_out >= req.max_tokens or num_tokens >= max_model_len:
                ev = TokenEvent(req.request_id, token, idx, True, FINISH_LENGTH)
                finished.append((req, ev))
            else:
                ev = TokenEvent(req.request_id, token, idx, False, None)
            tokens.append(ev)
        return tokens, finished

    def _end_step(self, now: float, duration: float, finished: list[tuple[EngineRequest, TokenEvent]]) -> KvEvents:
        """Retire the requests the step finished (at its end) and collect the step's KV events."""
        if finished:
            self._remove_finished(finished)
            t_done = now + duration
            for req, ev in finished:
                self._finish(req, t_done, ev)
        ev_pending = self.pool.events
        if ev_pending.stored or ev_pending.removed or ev_pending.cleared:
            return self.pool.drain_events()
        return _NO_KV_EVENTS

    def _remove_finished(self, finished: list[tuple[EngineRequest, TokenEvent]]) -> None:
        if len(finished) == 1:
            _drop(self.running, finished[0][0])
            return
        done = {id(r) for r, _ in finished}
        self.running[:] = [r for r in self.running if id(r) not in done]

    def _admit(self, now: float, budget: int, scheduled: list[tuple[EngineRequest, int]], started: list[str]) -> int:
        cfg = self.config
        bs = cfg.block_size
        thr = cfg.long_prefill_token_threshold
        pool = self.pool
        skipped: list[EngineRequest] = []
        while self.waiting and budget > 0 and len(self.running) < cfg.max_num_seqs:
            req = self.waiting[0]
            if req.schedulable_at is not None and req.schedulable_at > now:
                skipped.append(self.waiting.popleft())  # its KV is in flight or it is in the front-end; others may go
                continue
            # Like vLLM, a waiting request holds no blocks: the prefix hit is looked up on every attempt and
            # only taken together with the fresh blocks it needs (holding hits while blocked can deadlock).
            n_tokens = req.num_tokens
            if cfg.enable_prefix_caching:
                self._extend_hashes(req, n_tokens // bs)
            hit = pool.find_prefix(req.block_hashes, (n_tokens - 1) // bs)
            # transferred KV: only the last prompt token is recomputed (vLLM does it to get logits)
            computed = n_tokens - 1 if req.remote_prefilled else len(hit) * bs
            n = n_tokens - computed
            if thr and n > thr:
                n = thr
            if n > budget:
                if not cfg.enable_chunked_prefill:
                    break
                n = budget
            fresh = -(-(computed + n) // bs) - len(hit)
            # hit blocks nobody holds leave the free queue when taken; counted in C because a blocked
            # request re-runs this on every step over a prefix of possibly thousands of blocks
            reused_free = list(map(pool.ref_cnt.__getitem__, hit)).count(0)
            if fresh + reused_free > pool.num_free:
                break
            pool.touch(hit)
            req.block_ids = hit + pool.allocate(fresh)
            req.num_cached_blocks = len(hit)
            req.num_computed = computed
            if not req.counted:
                req.counted = True
                req.num_cached_prompt_tokens = len(hit) * bs
                self.prefix_queries += n_tokens
                if not req.remote_prefilled:
                    self.prefix_hits += len(hit) * bs
                else:
                    self.remote_prefix_queries += n_tokens
            self.waiting.popleft()
            self.running.append(req)
            if not req.started:
                req.started = True
                started.append(req.request_id)
            # vLLM's allocate_slots caches the blocks this step will fill when it allocates them, before the
            # next waiting request looks up its prefix: a request admitted after this one in the same step
            # (or a running one's chunk, cached in part 1) hits them. Transferred KV becomes cached too.
            if (computed + n) // bs > req.num_cached_blocks:
                self._cache_full_blocks(req, min(computed + n, req.num_tokens) // bs)
            scheduled.append((req, n))
            budget -= n
        for req in reversed(skipped):
            self.waiting.appendleft(req)
        return budget

    def _ensure_blocks(self, req: EngineRequest, num_tokens: int) -> bool:
        need = -(-num_tokens // self.config.block_size) - len(req.block_ids)
        if need <= 0:
            return True
        if need > self.pool.num_free:
            return False
        req.block_ids.extend(self.pool.allocate(need))
        return True

    def _cache_full_blocks(self, req: EngineRequest, full: int) -> None:
        if not self.config.enable_prefix_caching:
            req.num_cached_blocks = full
            return
        bs = self.config.block_size
        start = req.num_cached_blocks
        self._extend_hashes(req, full)
        tokens = req.token_range(start * bs, full * bs) if self.config.kv_event_token_ids else ()
        self.pool.cache_blocks(req.block_ids, req.block_hashes, start, full, tokens, bs, start, req.extra_keys)
        req.num_cached_blocks = full

    def _extend_hashes(self, req: EngineRequest, n_blocks: int) -> None:
        bs = self.config.block_size
        hashes = req.block_hashes
        prev = hashes[-1] if hashes else None
        hash_block = self.config.hasher.hash_block
        for i in range(len(hashes), n_blocks):
            prev = hash_block(prev, req.token_range(i * bs, (i + 1) * bs), req.extra_keys if i == 0 else None)
            hashes.append(prev)

    def _preempt(self, req: EngineRequest, preempted: list[str]) -> None:
        self.pool.free_blocks(req.block_ids)
        req.block_ids = []
        req.num_computed = 0
        req.num_cached_blocks = 0
        req.remote_prefilled = False  # its KV now has to be recomputed here
        self.preemptions += 1
        preempted.append(req.request_id)
        self.waiting.appendleft(req)

    def _finish(self, req: EngineRequest, t_done: float, ev: TokenEvent) -> None:
        del self._requests[req.request_id]
        if req.hold_kv:
            self.held[req.request_id] = HeldKv(req, t_done + self.config.kv_lease_s)
            ev.held_block_ids = list(req.block_ids)
            return
        self.pool.free_blocks(req.block_ids)
        req.block_ids = []

    def _expire_leases(self, now: float, expired_ids: list[str]) -> None:
        # Leases have one length, so insertion order is expiry order.
        expired = []
        for rid, h in self.held.items():
            if h.expires_at > now:
                break
            expired.append(rid)
        for rid in expired:
            self.release(rid)
            expired_ids.append(rid)
