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
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from pdserve.common import hashing
from pdserve.common.tokenizer import EOS_ID, WORD_IDS
from pdserve.worker.kvcache import BlockPool, KvEvents
from pdserve.worker.perf import PerfModel

FINISH_STOP = "stop"
FINISH_LENGTH = "length"
FINISH_ABORT = "abort"
_N_WORDS = len(WORD_IDS)


@dataclass(slots=True)
class EngineConfig:
    num_blocks: int
    block_size: int = 16
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int = 131072
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0  # 0 = no per-request cap on a chunk
    kv_lease_s: float = 480.0  # vLLM's VLLM_NIXL_ABORT_REQUEST_TIMEOUT default

    def __post_init__(self) -> None:
        for name in ("num_blocks", "block_size", "max_num_seqs", "max_num_batched_tokens", "max_model_len"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise ValueError("without chunked prefill, max_num_batched_tokens must be >= max_model_len")


@dataclass(slots=True)
class EngineRequest:
    request_id: str
    prompt_token_ids: list[int]
    max_tokens: int
    min_tokens: int = 0
    ignore_eos: bool = False
    eos_after: int | None = None  # the model "naturally" ends after this many tokens (None: never)
    stop_token_ids: tuple[int, ...] = ()
    seed: int = 0
    hold_kv: bool = False  # prefill for a remote decode: keep blocks until release()
    remote_prefilled: bool = False  # prompt KV came from a prefill worker
    kv_ready_time: float | None = None  # remote KV usable from this time (None: already there)
    extra_keys: tuple[object, ...] | None = None
    # --- engine state (not set by callers) ---
    arrival_time: float = 0.0
    output_token_ids: list[int] = field(default_factory=list)
    num_computed: int = 0
    block_ids: list[int] = field(default_factory=list)
    block_hashes: list[bytes] = field(default_factory=list)
    num_cached_blocks: int = 0
    started: bool = False
    looked_up: bool = False  # prefix lookup done for the current (re)start
    counted: bool = False  # prefix-cache query stats recorded
    num_cached_prompt_tokens: int = 0  # prompt tokens served from the local prefix cache at admission
    rng: int = 0

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    def token_range(self, start: int, end: int) -> list[int]:
        """Tokens ``start..end-1`` of prompt + output without concatenating the whole sequence."""
        n_prompt = len(self.prompt_token_ids)
        if end <= n_prompt:
            return self.prompt_token_ids[start:end]
        if start >= n_prompt:
            return self.output_token_ids[start - n_prompt : end - n_prompt]
        return self.prompt_token_ids[start:] + self.output_token_ids[: end - n_prompt]


@dataclass(slots=True)
class TokenEvent:
    request_id: str
    token_id: int
    index: int  # position in the output (0 = first token)
    finished: bool = False
    finish_reason: str | None = None
    held_block_ids: list[int] | None = None  # for hold_kv requests on finish


@dataclass(slots=True)
class StepOutput:
    duration: float
    tokens: list[TokenEvent] = field(default_factory=list)
    started: list[str] = field(default_factory=list)  # first scheduled in this step
    preempted: list[str] = field(default_factory=list)
    expired: list[str] = field(default_factory=list)  # held KV leases that ran out
    num_prefill_tokens: int = 0  # prompt tokens computed (excludes prefix hits and transferred KV)
    num_decode_tokens: int = 0
    num_scheduled: int = 0
    kv_events: KvEvents = field(default_factory=KvEvents)


@dataclass(slots=True)
class EngineStats:
    running: int
    waiting: int
    held: int
    kv_usage: float
    num_blocks: int
    free_blocks: int
    prefix_queries: int
    prefix_hits: int
    preemptions: int
    computed_prompt_tokens: int
    generated_tokens: int


@dataclass(slots=True)
class HeldKv:
    request: EngineRequest
    expires_at: float


class Engine:
    def __init__(self, config: EngineConfig, perf: PerfModel) -> None:
        self.config = config
        self.perf = perf
        self.pool = BlockPool(config.num_blocks, config.enable_prefix_caching)
        self.waiting: deque[EngineRequest] = deque()
        self.running: list[EngineRequest] = []
        self.held: dict[str, HeldKv] = {}
        self._requests: dict[str, EngineRequest] = {}
        self.prefix_queries = 0
        self.prefix_hits = 0
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
        if -(-n_prompt // cfg.block_size) > cfg.num_blocks:
            raise ValueError(f"prompt of {n_prompt} tokens needs more KV blocks than the engine has")
        req.arrival_time = now
        req.rng = (req.seed * 0x9E3779B1 + 0x7F4A7C15) & 0xFFFFFFFF
        self._requests[req.request_id] = req
        self.waiting.append(req)

    def abort(self, request_id: str) -> bool:
        """Drop a request wherever it is (queue, batch or held lease) and free its blocks."""
        if request_id in self.held:
            return self.release(request_id)
        req = self._requests.pop(request_id, None)
        if req is None:
            return False
        if req in self.running:
            self.running.remove(req)
        else:
            self.waiting.remove(req)
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

    def knows(self, request_id: str) -> bool:
        """Whether the id is in use (queued, running or holding KV)."""
        return request_id in self._requests or request_id in self.held

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def next_event_time(self) -> float | None:
        """Earliest time something changes without new input (a lease expiry or remote KV arriving)."""
        times = [next(iter(self.held.values())).expires_at] if self.held else []
        times += [r.kv_ready_time for r in self.waiting if r.kv_ready_time is not None]
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
    def step(self, now: float) -> StepOutput:
        out = StepOutput(duration=0.0)
        self._expire_leases(now, out)
        budget = self.config.max_num_batched_tokens
        scheduled: list[tuple[EngineRequest, int]] = []
        preempted_any = False

        # 1. running requests, oldest first
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            n = self._num_new_tokens(req, budget)
            if n <= 0:
                i += 1
                continue
            while not self._ensure_blocks(req, req.num_computed + n):
                victim = self.running.pop()
                self._preempt(victim, out)
                preempted_any = True
                if victim is req:
                    n = 0
                    break
            if n == 0:
                break  # req itself was preempted; everything after it is gone too
            scheduled.append((req, n))
            budget -= n
            i += 1

        # 2. admit waiting requests (vLLM skips admission in a step that preempted)
        if not preempted_any:
            budget = self._admit(now, budget, scheduled, out)

        # 3. cost of the step
        new_tokens = 0
        attn_pairs = 0.0
        kv_read = 0
        for req, n in scheduled:
            ctx = req.num_computed
            new_tokens += n
            attn_pairs += n * ctx + n * (n + 1) / 2
            kv_read += ctx
            if ctx < len(req.prompt_token_ids):
                out.num_prefill_tokens += min(n, len(req.prompt_token_ids) - ctx)
        out.num_scheduled = len(scheduled)
        out.num_decode_tokens = new_tokens - out.num_prefill_tokens
        out.duration = self.perf.step_time_aggregate(new_tokens, attn_pairs, kv_read, len(scheduled))
        self.computed_prompt_tokens += out.num_prefill_tokens

        # 4. advance, sample, finish
        bs = self.config.block_size
        finished: list[EngineRequest] = []
        for req, n in scheduled:
            req.num_computed += n
            full = req.num_computed // bs
            if full > req.num_cached_blocks:
                self._cache_full_blocks(req, full)
            if req.num_computed < req.num_tokens:
                continue  # prefill chunk not done yet: no token this step
            ev = self._sample(req)
            out.tokens.append(ev)
            if ev.finished:
                finished.append(req)
        if finished:
            done = {id(r) for r in finished}
            self.running = [r for r in self.running if id(r) not in done]
            for req in finished:
                self._finish(req, now + out.duration, out.tokens)
        out.kv_events = self.pool.drain_events()
        return out

    def _num_new_tokens(self, req: EngineRequest, budget: int) -> int:
        n = req.num_tokens - req.num_computed
        thr = self.config.long_prefill_token_threshold
        if thr and n > thr:
            n = thr
        return min(n, budget)

    def _admit(self, now: float, budget: int, scheduled: list[tuple[EngineRequest, int]], out: StepOutput) -> int:
        cfg = self.config
        bs = cfg.block_size
        skipped: list[EngineRequest] = []
        while self.waiting and budget > 0 and len(self.running) < cfg.max_num_seqs:
            req = self.waiting[0]
            if req.kv_ready_time is not None and req.kv_ready_time > now:
                skipped.append(self.waiting.popleft())  # its KV is still in flight; others may go
                continue
            if not req.looked_up:
                self._lookup_prefix(req)
            n = self._num_new_tokens(req, budget)
            if not cfg.enable_chunked_prefill and n < req.num_tokens - req.num_computed:
                break
            if not self._ensure_blocks(req, req.num_computed + n):
                break
            self.waiting.popleft()
            self.running.append(req)
            if not req.started:
                req.started = True
                out.started.append(req.request_id)
            full = req.num_computed // bs
            if full > req.num_cached_blocks:
                self._cache_full_blocks(req, full)  # transferred KV becomes cached
            scheduled.append((req, n))
            budget -= n
        for req in reversed(skipped):
            self.waiting.appendleft(req)
        return budget

    def _lookup_prefix(self, req: EngineRequest) -> None:
        """Start from the longest cached prefix; always leave >= 1 token to compute (for logits)."""
        bs = self.config.block_size
        n_tokens = req.num_tokens
        if self.config.enable_prefix_caching:
            self._extend_hashes(req, n_tokens // bs)
        hit = self.pool.find_prefix(req.block_hashes, (n_tokens - 1) // bs)
        self.pool.touch(hit)
        req.looked_up = True
        req.block_ids = hit
        req.num_cached_blocks = len(hit)
        if req.remote_prefilled:
            # The prompt KV arrives by transfer: only the last prompt token is recomputed.
            req.num_computed = n_tokens - 1
        else:
            req.num_computed = len(hit) * bs
        if not req.counted:
            req.counted = True
            req.num_cached_prompt_tokens = len(hit) * bs
            self.prefix_queries += n_tokens
            if not req.remote_prefilled:
                self.prefix_hits += len(hit) * bs

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
        self.pool.cache_blocks(
            req.block_ids, req.block_hashes, start, full, req.token_range(start * bs, full * bs), bs, start
        )
        req.num_cached_blocks = full

    def _extend_hashes(self, req: EngineRequest, n_blocks: int) -> None:
        bs = self.config.block_size
        hashes = req.block_hashes
        prev = hashes[-1] if hashes else None
        for i in range(len(hashes), n_blocks):
            prev = hashing.hash_block_tokens(prev, req.token_range(i * bs, (i + 1) * bs), req.extra_keys)
            hashes.append(prev)

    def _preempt(self, req: EngineRequest, out: StepOutput) -> None:
        self.pool.free_blocks(req.block_ids)
        req.block_ids = []
        req.num_computed = 0
        req.num_cached_blocks = 0
        req.looked_up = False
        req.remote_prefilled = False  # its KV now has to be recomputed here
        self.preemptions += 1
        out.preempted.append(req.request_id)
        self.waiting.appendleft(req)

    def _sample(self, req: EngineRequest) -> TokenEvent:
        idx = len(req.output_token_ids)
        n_out = idx + 1
        # Deterministic per-request stream (an LCG seeded from the request's seed).
        req.rng = (req.rng * 1664525 + 1013904223) & 0xFFFFFFFF
        eos_at = req.eos_after
        if eos_at is not None and not req.ignore_eos and n_out >= max(eos_at, req.min_tokens):
            token = EOS_ID
        else:
            token = WORD_IDS[(req.rng >> 8) % _N_WORDS]
        req.output_token_ids.append(token)
        self.generated_tokens += 1
        reason: str | None = None
        if n_out >= req.min_tokens and (
            (token == EOS_ID and not req.ignore_eos) or token in req.stop_token_ids
        ):
            reason = FINISH_STOP
        elif n_out >= req.max_tokens or req.num_tokens >= self.config.max_model_len:
            reason = FINISH_LENGTH
        return TokenEvent(req.request_id, token, idx, reason is not None, reason)

    def _finish(self, req: EngineRequest, t_done: float, events: list[TokenEvent]) -> None:
        del self._requests[req.request_id]
        if req.hold_kv:
            self.held[req.request_id] = HeldKv(req, t_done + self.config.kv_lease_s)
            for ev in reversed(events):
                if ev.request_id == req.request_id:
                    ev.held_block_ids = list(req.block_ids)
                    break
            return
        self.pool.free_blocks(req.block_ids)
        req.block_ids = []

    def _expire_leases(self, now: float, out: StepOutput) -> None:
        # Leases have one length, so insertion order is expiry order.
        expired = []
        for rid, h in self.held.items():
            if h.expires_at > now:
                break
            expired.append(rid)
        for rid in expired:
            self.release(rid)
            out.expired.append(rid)
