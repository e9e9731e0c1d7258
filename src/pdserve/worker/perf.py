"""Roofline performance model of one engine step (pure; no I/O beyond reading a profile).

A step runs every scheduled token through the model once. Its time is::

    max(compute, memory) + communication + fixed overhead

- compute = FLOPs / (tp * peak_flops * mfu * tp_efficiency). FLOPs per token are
  ``2 * num_params`` for the dense layers plus ``4 * layers * (heads * head_dim) * ctx``
  for attention over ``ctx`` cached tokens (QK^T and AV, causal within a chunk).
- memory = bytes / (tp * bandwidth * mbu * tp_efficiency): every weight is read once
  per step, plus each sequence's KV cache (read) and the new tokens' KV (written).
- communication (tp > 1): two all-reduces of the step's activations per layer, each
  costing a fixed latency plus ``2 (tp-1)/tp * bytes / interconnect_bandwidth``.
- overhead: a fixed per-step cost (scheduling, launch, sampling) plus a small cost per
  scheduled sequence.

So small batches are memory-bound (weight reads dominate decode), prefill chunks of a
few hundred tokens or more are compute-bound, and a long prefill chunk mixed into a
decode batch stretches that step several-fold: the facts the simulator relies on.
The efficiency constants live in the JSON profiles next to the public specs they
scale (model config.json values, GPU datasheets), so the calibration is visible.
``frontend_latency_s`` is not part of a step: the engine applies it per request (see
``pdserve.worker.engine``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources

from pydantic import BaseModel, ConfigDict, Field

_PROFILE_PACKAGE = "pdserve.worker.profiles"


class ModelSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    num_params: float = Field(gt=0)
    num_layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    max_position_embeddings: int = Field(gt=0)
    dtype_bytes: int = Field(gt=0, description="bytes per weight / KV element (2 for bf16/fp16)")
    source: str


class GpuSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    peak_flops: float = Field(gt=0, description="dense bf16/fp16 tensor FLOP/s, no sparsity")
    memory_bandwidth: float = Field(gt=0, description="HBM bytes/s")
    memory_bytes: float = Field(gt=0)
    interconnect_bandwidth: float = Field(gt=0, description="per-GPU NVLink bytes/s, one direction")
    source: str


class Efficiency(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mfu: float = Field(gt=0, le=1, description="achieved fraction of peak FLOP/s in large GEMMs")
    mbu: float = Field(gt=0, le=1, description="achieved fraction of peak memory bandwidth")
    tp_efficiency: float = Field(gt=0, le=1, description="extra derate per GPU when tp > 1")
    step_overhead_s: float = Field(ge=0)
    per_seq_overhead_s: float = Field(ge=0)
    allreduce_latency_s: float = Field(ge=0)
    activation_reserve_bytes: float = Field(ge=0, description="per-GPU memory kept for activations / CUDA graphs")
    frontend_latency_s: float = Field(
        0.0, ge=0,
        description="time a request spends in vLLM outside the engine's steps (API server: HTTP, tokenisation, "
        "hand-off to the engine, the first token's way back); the engine holds each request this long before "
        "it can be scheduled. 0 = not modelled (only profiles with a measurement behind it set it)",
    )


class PerfProfile(BaseModel):
    """A model on a GPU type at a tensor-parallel size, from a packaged JSON file."""

    model_config = ConfigDict(extra="forbid")
    name: str
    description: str = ""
    model: ModelSpec
    gpu: GpuSpec
    tp: int = Field(ge=1)
    efficiency: Efficiency
    calibration: dict[str, object] = Field(default_factory=dict)

    def with_tp(self, tp: int) -> PerfProfile:
        if tp < 1:
            raise ValueError(f"tensor-parallel size must be >= 1, got {tp}")
        return self.model_copy(update={"tp": tp})


def available_profiles() -> list[str]:
    files = resources.files(_PROFILE_PACKAGE).iterdir()
    return sorted(f.name[: -len(".json")] for f in files if f.name.endswith(".json"))


def load_profile(name: str, tp: int | None = None) -> PerfProfile:
    """Load a packaged profile by name (e.g. ``llama-3.1-8b-h100``), optionally at another TP."""
    path = resources.files(_PROFILE_PACKAGE) / f"{name}.json"
    if not path.is_file():
        raise ValueError(f"unknown performance profile {name!r}; available: {', '.join(available_profiles())}")
    profile = PerfProfile.model_validate(json.loads(path.read_text()))
    return profile.with_tp(tp) if tp is not None and tp != profile.tp else profile


@dataclass(frozen=True, slots=True)
class StepBreakdown:
    compute_s: float
    memory_s: float
    comm_s: float
    overhead_s: float

    @property
    def total_s(self) -> float:
        return max(self.compute_s, self.memory_s) + self.comm_s + self.overhead_s


class PerfModel:
    """Step-time model for one profile. All methods are pure and cheap (O(batch))."""

    def __init__(self, profile: PerfProfile) -> None:
        self.profile = profile
        m, g, e, tp = profile.model, profile.gpu, profile.efficiency, profile.tp
        self.tp = tp
        derate = e.tp_efficiency if tp > 1 else 1.0
        self._flops_rate = tp * g.peak_flops * e.mfu * derate
        self._byte_rate = tp * g.memory_bandwidth * e.mbu * derate
        self._flops_per_token = 2.0 * m.num_params
        # attention FLOPs per (token, context token): QK^T + AV, 2 FLOPs per MAC
        self._attn_flops = 4.0 * m.num_layers * m.num_attention_heads * m.head_dim
        self.weight_bytes = m.num_params * m.dtype_bytes
        self.kv_bytes_per_token = 2 * m.num_layers * m.num_kv_heads * m.head_dim * m.dtype_bytes
        self._act_bytes_per_token = m.hidden_size * m.dtype_bytes
        self._allreduces = 2 * m.num_layers
        self._ar_bw = g.interconnect_bandwidth
        self._eff = e

    # --- memory sizing -------------------------------------------------------
    def kv_bytes_per_token_per_gpu(self) -> float:
        """KV heads are split across TP ranks; with fewer heads than ranks they replicate."""
        m = self.profile.model
        heads_per_gpu = max(1, math.ceil(m.num_kv_heads / self.tp))
        return 2 * m.num_layers * heads_per_gpu * m.head_dim * m.dtype_bytes

    def num_kv_blocks(self, block_size: int = 16, gpu_memory_utilization: float = 0.9) -> int:
        """KV blocks that fit after weights and the activation reserve, like vLLM's profiling run."""
        if not 0 < gpu_memory_utilization <= 1:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
        g, e = self.profile.gpu, self._eff
        free = g.memory_bytes * gpu_memory_utilization - self.weight_bytes / self.tp - e.activation_reserve_bytes
        if free <= 0:
            raise ValueError(
                f"{self.profile.model.name} does not fit on {g.name} x{self.tp} at "
                f"gpu_memory_utilization={gpu_memory_utilization}"
            )
        return int(free // (self.kv_bytes_per_token_per_gpu() * block_size))

    # --- step time -----------------------------------------------------------
    def breakdown(
        self,
        prefill_chunks: Iterable[tuple[int, int]] = (),
        decode_contexts: Sequence[int] = (),
    ) -> StepBreakdown:
        """Cost of one step: prefill chunks as (new_tokens, cached_context_len), decodes as context lengths."""
        new_tokens = 0
        attn_pairs = 0.0  # sum over new tokens of the context each attends to
        kv_read_tokens = 0
        n_seqs = 0
        for n, ctx in prefill_chunks:
            if n <= 0:
                continue
            new_tokens += n
            attn_pairs += n * ctx + n * (n + 1) / 2
            kv_read_tokens += ctx
            n_seqs += 1
        n_dec = len(decode_contexts)
        if n_dec:
            ctx_sum = sum(decode_contexts)
            new_tokens += n_dec
            attn_pairs += ctx_sum + n_dec
            kv_read_tokens += ctx_sum
            n_seqs += n_dec
        return self._breakdown(new_tokens, attn_pairs, kv_read_tokens, n_seqs)

    def step_time(
        self,
        prefill_chunks: Iterable[tuple[int, int]] = (),
        decode_contexts: Sequence[int] = (),
    ) -> float:
        return self.breakdown(prefill_chunks, decode_contexts).total_s

    def step_time_aggregate(self, new_tokens: int, attn_pairs: float, kv_read_tokens: int, n_seqs: int) -> float:
        """Same as ``step_time`` from precomputed sums (the engine keeps them per step)."""
        return self._breakdown(new_tokens, attn_pairs, kv_read_tokens, n_seqs).total_s

    def _breakdown(self, new_tokens: int, attn_pairs: float, kv_read_tokens: int, n_seqs: int) -> StepBreakdown:
        if new_tokens == 0:
            return StepBreakdown(0.0, 0.0, 0.0, 0.0)
        flops = self._flops_per_token * new_tokens + self._attn_flops * attn_pairs
        mem = self.weight_bytes + self.kv_bytes_per_token * (kv_read_tokens + new_tokens)
        comm = 0.0
        if self.tp > 1:
            ar_bytes = self._act_bytes_per_token * new_tokens * 2 * (self.tp - 1) / self.tp
            comm = self._allreduces * (self._eff.allreduce_latency_s + ar_bytes / self._ar_bw)
        overhead = self._eff.step_overhead_s + self._eff.per_seq_overhead_s * n_seqs
        return StepBreakdown(flops / self._flops_rate, mem / self._byte_rate, comm, overhead)
