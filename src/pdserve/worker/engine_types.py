"""The engine model's value types: configuration, requests and what a step reports."""

from __future__ import annotations

from dataclasses import dataclass, field

from pdserve.tokenization.mock import EOS_ID, WORD_IDS
from pdserve.worker.kvcache import KvEvents
from pdserve.worker.vllm_hash import BlockHasher

FINISH_STOP = "stop"
FINISH_LENGTH = "length"
FINISH_ABORT = "abort"


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
    # a request waits this long after add_request before it can be scheduled: vLLM's API-server time, from a
    # profile's efficiency.frontend_latency_s; 0 = not modelled (callers opt in, see pdserve.worker.engine)
    frontend_latency_s: float = 0.0
    # vLLM's prefix-cache hashing (algorithm + the NONE_HASH drawn at start-up); the default is
    # the current release's default (sha256 over pickle, fixed root without PYTHONHASHSEED)
    hasher: BlockHasher = field(default_factory=BlockHasher)
    # what the mock model emits: EOS and the ids it samples text from (the served tokenizer's)
    eos_token_id: int = EOS_ID
    output_token_ids: tuple[int, ...] = WORD_IDS
    # BlockStored events carry the blocks' token ids, as vLLM's do; the simulator's router reads only the
    # hashes, so it turns them off (copying a long prompt's ids into every event is a good part of its CPU)
    kv_event_token_ids: bool = True
    # freed blocks without reusable content go to the head of the free queue (vLLM 0.33's
    # BlockPool.free_blocks); False: to the tail like cached ones (0.11). See pdserve.worker.kvcache.
    free_uncached_first: bool = True

    def __post_init__(self) -> None:
        for name in ("num_blocks", "block_size", "max_num_seqs", "max_num_batched_tokens", "max_model_len"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if not self.frontend_latency_s >= 0:
            raise ValueError(f"frontend_latency_s must be >= 0, got {self.frontend_latency_s}")
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise ValueError("without chunked prefill, max_num_batched_tokens must be >= max_model_len")
        if not self.output_token_ids:
            raise ValueError("output_token_ids must not be empty")


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
    extra_keys: tuple[object, ...] | None = None  # the first block's hash extra keys (cache_salt)
    # --- engine state (not set by callers) ---
    arrival_time: float = 0.0
    output_token_ids: list[int] = field(default_factory=list)
    num_computed: int = 0
    block_ids: list[int] = field(default_factory=list)
    block_hashes: list[bytes] = field(default_factory=list)
    num_cached_blocks: int = 0
    started: bool = False
    counted: bool = False  # prefix-cache query stats recorded
    num_cached_prompt_tokens: int = 0  # prompt tokens served from the local prefix cache at admission
    rng: int = 0
    num_prompt_tokens: int = 0
    num_tokens: int = 0  # prompt + output so far, kept in step with output_token_ids
    # not scheduled before this time: the later of kv_ready_time and arrival + the profile's front-end latency
    schedulable_at: float | None = None


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
