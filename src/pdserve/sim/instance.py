"""One simulated serving instance: the worker's own ``Engine`` plus lifecycle and KV link.

The engine is production code (``pdserve.worker.engine``); this module only builds
its configuration from a :class:`SimConfig` pool, feeds it requests with synthetic
prompts, and tracks what the simulator needs around it (start-up, draining, GPU time).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache
from typing import TYPE_CHECKING, cast

from pdserve.router.policies import WorkerView
from pdserve.sim.config import SimConfig, SimConfigError
from pdserve.sim.prompts import KeyHasher, ZeroPrompt
from pdserve.common.kvlink import Link
from pdserve.worker.engine import Engine, EngineConfig, EngineRequest, StepOutput
from pdserve.worker.perf import PerfModel, PerfProfile, load_profile

if TYPE_CHECKING:
    from pdserve.sim.coast import Coast

# Prefill engines (and decode engines receiving transferred prompts) chunk long
# prompts at vLLM's default max_num_batched_tokens for P/D deployments.
PD_BATCHED_TOKENS = 8192


class State(Enum):
    STARTING = "starting"
    READY = "ready"
    DRAINING = "draining"
    RELEASED = "released"


@lru_cache(maxsize=64)
def resolve_profile(name: str, tp: int | None) -> PerfProfile:
    try:
        return load_profile(name, tp)
    except ValueError as e:
        raise SimConfigError(str(e)) from None


@dataclass(slots=True)
class PoolSpec:
    """Resolved settings of one pool's engines."""

    pool: str  # colocated | prefill | decode
    perf: PerfModel
    engine_config: EngineConfig
    tp: int

    @property
    def profile_name(self) -> str:
        return self.perf.profile.name


def pool_spec(config: SimConfig, pool: str) -> PoolSpec:
    """Build a pool's engine configuration; a model that does not fit names the problem."""
    name, tp = config.pool_profile(pool)
    profile = resolve_profile(name, tp)
    perf = PerfModel(profile)
    try:
        num_blocks = perf.num_kv_blocks(config.block_size or 16, config.gpu_memory_utilization)
    except ValueError as e:
        weights_gb = perf.weight_bytes / 1e9
        mem_gb = profile.gpu.memory_bytes * config.gpu_memory_utilization * profile.tp / 1e9
        raise SimConfigError(
            f"{pool} pool: profile {profile.name!r}: model {profile.model.name} needs {weights_gb:.0f} GB of "
            f"weights but {profile.gpu.name} x TP{profile.tp} offers {mem_gb:.0f} GB at "
            f"gpu_memory_utilization={config.gpu_memory_utilization} ({e}); raise the tensor-parallel size"
        ) from None
    if num_blocks < 1:
        raise SimConfigError(f"{pool} pool: profile {profile.name!r} leaves no memory for KV blocks")
    chunked = pool != "colocated" or config.topology == "chunked"
    if pool == "colocated" and config.topology == "chunked":
        budget = config.token_budget
    elif pool == "colocated":
        budget = config.max_model_len  # no chunking: a prompt is prefilled whole
    elif pool == "decode" and config.decode_token_budget is not None:
        budget = config.decode_token_budget
    else:
        budget = max(PD_BATCHED_TOKENS, config.token_budget)
    ecfg = EngineConfig(
        num_blocks=num_blocks,
        block_size=config.block_size or 16,
        max_num_seqs=config.max_num_seqs,
        max_num_batched_tokens=budget,
        max_model_len=config.max_model_len,
        enable_prefix_caching=config.enable_prefix_caching,
        enable_chunked_prefill=chunked,
        kv_lease_s=config.kv_lease_s,
        # vLLM's front-end time (API server, tokenisation, hand-off) is part of the
        # profile, so the simulator and the live mock worker charge the same.
        frontend_latency_s=profile.efficiency.frontend_latency_s,
        kv_event_token_ids=False,  # RouterView indexes the hashes only
        hasher=KeyHasher(),  # keys of output-filled blocks, chained to the prompt's (pdserve.sim.prompts)
    )
    return PoolSpec(pool=pool, perf=perf, engine_config=ecfg, tp=profile.tp)


@dataclass(slots=True)
class Instance:
    """An engine with an identity, a lifecycle and a KV link."""

    instance_id: str
    spec: PoolSpec
    engine: Engine
    link: Link
    requested_at: float
    ready_at: float
    state: State = State.STARTING
    released_at: float = -1.0
    busy: bool = False  # a step is in flight (its results land at step_end)
    kicked: bool = False  # a step start is already scheduled
    step_start: float = 0.0
    step_out: StepOutput | None = None  # the step in flight
    scraped_view: WorkerView | None = None  # the router's last scrape (view_refresh_s > 0)
    inflight_prefill: int = 0  # prompt tokens routed here that have not produced a token
    incoming: int = 0  # decode: requests whose KV transfer to here has not landed
    prefill_of: dict[str, int] = field(default_factory=dict)
    pool: str = ""  # copied from spec: read on every step, so a plain attribute
    coast: Coast | None = None  # plain decode steps in flight as one event (pdserve.sim.coast)

    @classmethod
    def create(cls, instance_id: str, spec: PoolSpec, link_gbps: float, now: float, ready_at: float) -> Instance:
        engine = Engine(spec.engine_config, spec.perf)
        inst = cls(instance_id, spec, engine, Link(link_gbps), requested_at=now, ready_at=ready_at, pool=spec.pool)
        if ready_at <= now:
            inst.state = State.READY
        return inst

    @property
    def tp(self) -> int:
        return self.spec.tp

    def view(self, load: bool = True, prefill_tokens: bool = True) -> WorkerView:
        """What the router sees; ``load=False`` before the first scrape (all zero); ``prefill_tokens=False``:
        without the queued prompt tokens (0), as a /metrics scrape sees it."""
        if not load:
            return WorkerView(worker_id=self.instance_id)
        e = self.engine
        return WorkerView(self.instance_id, len(e.running), len(e.waiting) + self.incoming,
                          self.inflight_prefill if prefill_tokens else 0, e.pool.usage())

    def add(
        self,
        request_id: str,
        input_tokens: int,
        output_tokens: int,
        keys: list[int],
        now: float,
        *,
        hold_kv: bool = False,
        remote_prefilled: bool = False,
    ) -> None:
        # Token values only matter for hashing, and the prompt's block hashes are
        # supplied precomputed (see pdserve.sim.prompts), so a zero-filled prompt
        # is enough, and it need not exist as a list (the engine reads its length and slices).
        req = EngineRequest(
            request_id=request_id,
            prompt_token_ids=cast("list[int]", ZeroPrompt(input_tokens)),
            max_tokens=output_tokens,
            ignore_eos=True,
            hold_kv=hold_kv,
            remote_prefilled=remote_prefilled,
        )
        # The engine only compares and hashes these keys: the simulator's int keys stand in
        # for the worker's bytes hashes (see pdserve.sim.prompts.block_keys).
        req.block_hashes = cast("list[bytes]", list(keys))
        self.engine.add_request(req, now)
        if not remote_prefilled:
            self.inflight_prefill += input_tokens
            self.prefill_of[request_id] = input_tokens

    def prefill_finished(self, request_id: str) -> None:
        self.inflight_prefill -= self.prefill_of.pop(request_id, 0)

    def cached_prefix_blocks(self, keys: list[int], input_tokens: int) -> int:
        """Blocks of this prompt already in this engine's prefix cache (a read-only probe)."""
        bs = self.spec.engine_config.block_size
        return len(self.engine.pool.find_prefix(cast("list[bytes]", keys), (input_tokens - 1) // bs))

    @property
    def idle(self) -> bool:
        return not self.engine.has_work() and not self.engine.held

    def gpu_seconds(self, end: float, since: float = 0.0) -> float:
        """Held from its request to its release (or ``end``), counted from ``since`` on."""
        stop = self.released_at if self.released_at >= 0 else end
        return self.tp * max(0.0, stop - max(self.requested_at, since))
