"""NVIDIA Dynamo's offline trace replay on one window, as the peer in routing_quality.py.

Runs under a Python that has the peers installed (``pip install '.[peers]'`` then
``pip install --no-deps ai-dynamo==1.6.1``, see bench/router/README.md); imports nothing
from pdserve, so routing_quality.py can run it with that interpreter as a subprocess:

    PEER_PY bench/router/dynamo_replay.py --trace window.jsonl --workers 8 \\
        --block-size 512 --num-gpu-blocks 848 --token-budget 2048 --router-mode kv_router --runs 5

The trace is Mooncake-format JSONL (timestamp ms, input_length, output_length, hash_ids
of ``--block-size``-token blocks), replayed by ``dynamo.replay.run_trace_replay`` with
``trace_block_size`` = the block size and every engine's KV cache fixed at
``--num-gpu-blocks`` blocks, as pdserve's simulator sizes them. Prints one JSON object:
per run the prefix hit ratio Dynamo reports (``prefix_cache_reused_ratio``: reused input
tokens / input tokens, the same definition as pdserve's), TTFT percentiles, requests per
routed worker, max/mean requests, and the run's wall and CPU seconds. Dynamo's router
breaks ties at random without a seed argument, so ``--runs`` repeats the replay.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import sys
import time
from collections import Counter
from typing import Any


# Dynamo's logging setup (dynamo.runtime.logging.configure_sglang_logging) writes an SGLang logging-config file into
# the temp folder at each start and never removes it (thousands after a sweep); this script runs no SGLang. Its own
# switch skips that step.
os.environ.setdefault("DYN_SKIP_SGLANG_LOG_FORMATTING", "1")


def engine_args(block_size: int, num_blocks: int, budget: int, worker_type: str) -> dict[str, Any]:
    return {
        "engine": {
            "block_size": block_size,
            "num_gpu_blocks": num_blocks,
            "enable_prefix_caching": True,
            "enable_chunked_prefill": True,
            "max_num_batched_tokens": budget,
            "worker_type": worker_type,
        },
        "num_gpu_blocks_is_explicit": True,
    }


def key_of(args: argparse.Namespace) -> str:
    """The per-request field naming the routed worker: the prefill worker in P/D, else the aggregated one."""
    return "prefill_worker_idx" if args.prefill_workers else "decode_worker_idx"


def one_run(args: argparse.Namespace) -> dict[str, Any]:
    from dynamo.replay import run_trace_replay

    kw: dict[str, Any] = {}
    if args.prefill_workers:
        kw.update(num_prefill_workers=args.prefill_workers, num_decode_workers=args.workers,
                  prefill_engine_args=engine_args(args.block_size, args.num_gpu_blocks, args.prefill_budget, "prefill"),
                  decode_engine_args=engine_args(args.block_size, args.num_gpu_blocks, args.token_budget, "decode"))
    else:
        kw.update(num_workers=args.workers,
                  extra_engine_args=engine_args(args.block_size, args.num_gpu_blocks, args.token_budget, "aggregated"))
    if args.router_mode == "kv_router" and args.overlap_score_weight is not None:
        from dynamo.llm import KvRouterConfig

        kw["router_config"] = KvRouterConfig(overlap_score_weight=args.overlap_score_weight)
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    rep = run_trace_replay(args.trace, router_mode=args.router_mode, trace_block_size=args.block_size,
                           capture_per_request=True, replay_mode="offline", **kw)
    wall = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    s = rep.summary
    if args.per_request:
        # One line per request and run: where its prefill went, what the router saw there and anywhere at that
        # instant (blocks), and what the engine reused at admission (tokens); routing_gap.py pairs these with pdserve's.
        with open(args.per_request, "a") as fh:
            fh.write(json.dumps([[r["arrival_time_ms"], r["input_length"], r[key_of(args)],
                                  r["routing_history"][0]["selected_overlap_blocks"],
                                  r["routing_history"][0]["best_available_overlap_blocks"],
                                  r["reused_input_tokens"]] for r in rep.per_request]) + "\n")
    key = key_of(args)
    n_routed = args.prefill_workers or args.workers
    counts = Counter(r[key] for r in rep.per_request)
    per_worker = [counts.get(i, 0) for i in range(n_routed)]
    mean = sum(per_worker) / n_routed
    return {
        "prefix_hit_ratio": round(float(s["prefix_cache_reused_ratio"]), 4),
        "ttft_p50_s": round(s["median_ttft_ms"] / 1000, 6),
        "ttft_p90_s": round(s["p90_ttft_ms"] / 1000, 6),
        "ttft_p99_s": round(s["p99_ttft_ms"] / 1000, 6),
        "requests_per_worker": per_worker,
        "max_mean_requests": round(max(per_worker) / mean, 3) if mean else None,
        "finished": int(s["completed_requests"]),
        "requests": int(s["num_requests"]),
        "wall_s": round(wall, 3),
        "cpu_s": round((cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime), 3),
        "replay_wall_ms_reported": round(float(s.get("wall_time_ms", 0.0)), 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", required=True, help="Mooncake-format JSONL window")
    ap.add_argument("--workers", type=int, required=True, help="aggregated workers, or decode workers with --prefill-workers")
    ap.add_argument("--prefill-workers", type=int, default=0, help="disaggregated: routed prefill workers")
    ap.add_argument("--block-size", type=int, default=512)
    ap.add_argument("--num-gpu-blocks", type=int, required=True)
    ap.add_argument("--token-budget", type=int, default=2048, help="max_num_batched_tokens (aggregated / decode)")
    ap.add_argument("--prefill-budget", type=int, default=8192, help="max_num_batched_tokens of prefill workers")
    ap.add_argument("--router-mode", choices=["round_robin", "kv_router"], required=True)
    ap.add_argument("--overlap-score-weight", type=float, default=None, help="KvRouterConfig (default: Dynamo's)")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--per-request", default=None,
                    help="append one JSON line per run: [arrival ms, input length, routed worker, router-view overlap "
                         "blocks there, best overlap blocks anywhere, reused input tokens] per request")
    args = ap.parse_args()
    os.environ.setdefault("DYN_LOG", "error")  # the Rust router logs every decision at info
    logging.disable(logging.INFO)
    import importlib.metadata as md

    runs = [one_run(args) for _ in range(args.runs)]
    json.dump({"peer": "dynamo", "ai_dynamo": md.version("ai-dynamo"), "ai_dynamo_runtime": md.version("ai-dynamo-runtime"),
               "router_mode": args.router_mode, "overlap_score_weight": args.overlap_score_weight, "runs": runs},
              sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
