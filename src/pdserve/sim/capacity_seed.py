"""A capacity-profile seed for the planner, measured in the simulator.

Writes the planner's format (:class:`pdserve.planner.core.profile.CapacityProfile`).
Prefill points are measured: one prefill engine under Poisson arrivals of a fixed
prompt length at increasing load, TTFT taken when its KV is ready (queueing and
batching included). Decode points come from the engine's step model at each
concurrency and context, the same cost the simulated decode engines pay.
"""

from __future__ import annotations

from collections.abc import Sequence

from pdserve.planner.core.profile import PROFILE_VERSION, CapacityProfile
from pdserve.sim.config import SimConfig
from pdserve.sim.instance import pool_spec
from pdserve.sim.metrics import percentile
from pdserve.sim.simulator import run_simulation
from pdserve.sim.traces import Trace, synthetic_trace

UTILISATION = (0.1, 0.3, 0.5, 0.7, 0.85, 0.95)
CONCURRENCY = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def _bins(values: Sequence[int]) -> list[int]:
    """Powers of two spanning the values' 5th to 99th percentile."""
    lo = max(16, int(percentile(sorted(values), 5) or 16))
    hi = max(lo, int(percentile(sorted(values), 99) or lo))
    out, x = [], 16
    while x < lo:
        x *= 2
    out.append(max(16, x // 2))
    while x <= hi * 2:
        out.append(x)
        x *= 2
    return out[:8]


def capacity_seed(trace: Trace, config: SimConfig, *, requests_per_point: int = 150) -> CapacityProfile:
    pspec = pool_spec(config.model_copy(update={"topology": "disagg"}), "prefill")
    dspec = pool_spec(config.model_copy(update={"topology": "disagg"}), "decode")
    isls = _bins([r.input_tokens for r in trace.requests])
    ctxs = _bins([r.input_tokens + r.output_tokens // 2 for r in trace.requests])
    one = config.model_copy(update={"topology": "disagg", "prefill_instances": 1, "decode_instances": 1,
                                    "kv_link_gbps": 1e6})
    pre = []
    for isl in isls:
        if isl >= config.max_model_len:
            continue
        service = pspec.perf.step_time([(isl, 0)])
        for rho in UTILISATION:
            rate = rho / service
            res = run_simulation(synthetic_trace(requests_per_point, rate, isl, 2, seed=isl), one)
            ttfts = [r.prefill_done_s - r.arrival_s for r in res.records if r.prefill_done_s >= 0]
            pre.append({
                "isl": isl, "throughputTokensPerS": rate * isl,
                "ttftMeanMs": 1000 * sum(ttfts) / len(ttfts),
                "ttftTailMs": 1000 * (percentile(ttfts, 99) or 0.0),
            })
    kv_tokens = dspec.engine_config.num_blocks * dspec.engine_config.block_size
    dec = []
    for ctx in ctxs:
        for n in CONCURRENCY:
            if n * (ctx + dspec.engine_config.block_size) > kv_tokens or n > config.max_num_seqs:
                break
            itl = dspec.perf.step_time([], [ctx] * n)
            dec.append({"context": ctx, "concurrency": n, "throughputTokensPerS": n / itl,
                        "itlMeanMs": 1000 * itl, "itlTailMs": 1000 * itl})
    prof = pspec.perf.profile
    return CapacityProfile.model_validate({
        "version": PROFILE_VERSION,
        "model": prof.model.name,
        "hardware": prof.gpu.name,
        "source": f"sim:{prof.name} (pdserve advise, trace sha256 {trace.sha256[:12]})",
        "tailQuantile": 0.99,
        "prefill": {"tensorParallelSize": pspec.tp, "points": pre},
        "decode": {"tensorParallelSize": dspec.tp, "points": dec},
        "kvLink": {"kvBytesPerToken": pspec.perf.kv_bytes_per_token, "gbps": config.kv_link_gbps},
    })
