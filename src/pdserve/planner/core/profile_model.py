"""Derive a capacity profile from the engine's performance model (no endpoint needed).

Prefill: a replica with chunked prefill runs up to ``max_num_batched_tokens`` prompt
tokens per step, so its saturated throughput at ISL *s* is the tokens of a full step
over that step's time. Requests arrive at random (Poisson), so at utilisation rho the
TTFT is the time to prefill one request alone plus a queueing wait; we use the M/M/1
wait (mean rho*S/(1-rho), tail ln(rho/(1-q))*S/(1-rho)) because prompt lengths vary
as much as exponential service times do in real traces (CV ~1), which M/D/1 would
under-state.

Decode: ITL at concurrency *n* and context *c* is one decode step of *n* sequences
of context *c*; throughput is n / ITL. Concurrency stops where the KV cache is full.
Tail ITL adds a margin for steps that also carry arriving requests' first tokens.
"""

from __future__ import annotations

import math

from pdserve.planner.core.profile import PROFILE_VERSION, CapacityProfile

ISLS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
CONTEXTS = (16, 64, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
CONCURRENCY = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512)
UTILISATION = (0.05, 0.2, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95)
ITL_TAIL_MARGIN = 1.15


def derive_profile(
    perf_profile: str,
    *,
    prefill_tp: int | None = None,
    decode_tp: int | None = None,
    max_num_batched_tokens: int = 8192,
    block_size: int = 16,
    tail_quantile: float = 0.99,
    kv_link_gbps: float | None = 100.0,
    include_frontend: bool = False,
) -> CapacityProfile:
    """``include_frontend``: the TTFTs hold the engine's front end (the perf profile's
    ``efficiency.frontend_latency_s``: API server, tokenisation, hand-off to the engine), as a sweep against a
    prefill endpoint measures them and as the prefill pods' TTFT histogram reports them; off: the engine's steps
    and queue only (the planner's correction then reads a fixed 22 ms on 8B as a slower engine)."""
    from pdserve.worker.perf import PerfModel, load_profile

    pm_p = PerfModel(load_profile(perf_profile, tp=prefill_tp))  # None: the profile's own TP
    pm_d = PerfModel(load_profile(perf_profile, tp=decode_tp))
    max_len = pm_p.profile.model.max_position_embeddings
    tail_k = math.log(1.0 / (1.0 - tail_quantile))
    front = pm_p.profile.efficiency.frontend_latency_s if include_frontend else 0.0

    pre = []
    for isl in (s for s in ISLS if s <= max_len):
        alone = _prefill_alone_s(pm_p, isl, max_num_batched_tokens)
        mu_tok = prefill_flat_out(pm_p, isl, max_num_batched_tokens)
        service = isl / mu_tok
        for rho in UTILISATION:
            mean_wait = rho * service / (1 - rho)
            tail_wait = max(0.0, math.log(rho) + tail_k) * service / (1 - rho)
            pre.append({
                "isl": isl, "throughputTokensPerS": rho * mu_tok,
                "ttftMeanMs": 1000 * (front + alone + mean_wait), "ttftTailMs": 1000 * (front + alone + tail_wait),
            })

    kv_tokens = pm_d.num_kv_blocks(block_size) * block_size
    dec = []
    for ctx in (c for c in CONTEXTS if c <= max_len):
        for n in CONCURRENCY:
            if n * (ctx + block_size) > kv_tokens:
                break
            itl = pm_d.step_time(decode_contexts=[ctx] * n)
            dec.append({
                "context": ctx, "concurrency": n, "throughputTokensPerS": n / itl,
                "itlMeanMs": 1000 * itl, "itlTailMs": 1000 * itl * ITL_TAIL_MARGIN,
            })
    return CapacityProfile.model_validate({
        "version": PROFILE_VERSION,
        "model": pm_p.profile.model.name,
        "hardware": pm_p.profile.gpu.name,
        "source": f"sim:{perf_profile} (max_num_batched_tokens={max_num_batched_tokens}"
                  + (", front end included)" if include_frontend else ")"),
        "tailQuantile": tail_quantile,
        "prefill": {"tensorParallelSize": pm_p.tp, "points": pre},
        "decode": {"tensorParallelSize": pm_d.tp, "points": dec},
        "kvLink": None if kv_link_gbps is None else {"kvBytesPerToken": pm_p.kv_bytes_per_token, "gbps": kv_link_gbps},
    })


def prefill_flat_out(pm, isl: int, max_num_batched_tokens: int) -> float:
    """Prompt tokens/s one replica prefills flat out at ``isl``: as many whole prompts per step as the token budget
    holds (vLLM's scheduler packs them), or one prompt chunk by chunk where it does not fit."""
    if isl <= max_num_batched_tokens:
        per_step = max(1, max_num_batched_tokens // isl)
        return per_step * isl / pm.step_time([(isl, 0)] * per_step)
    return isl / _prefill_alone_s(pm, isl, max_num_batched_tokens)


def _prefill_alone_s(pm, isl: int, chunk: int) -> float:
    """One request's prefill on an idle replica, chunk by chunk like vLLM's chunked prefill."""
    t, done = 0.0, 0
    while done < isl:
        n = min(chunk, isl - done)
        t += pm.step_time([(n, done)])
        done += n
    return t
