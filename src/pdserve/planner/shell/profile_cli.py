"""``pdserve profile``: measure (``--endpoint``) or derive (``--sim``) a capacity profile."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="pdserve profile", description=(
        "Write a capacity profile JSON for the planner: prefill throughput vs ISL and decode "
        "throughput vs concurrency and context, with latencies. --endpoint sweeps a live "
        "OpenAI-compatible server (mock or real vLLM) with increasing load; --sim derives it "
        "from the engine's performance model."))
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--endpoint", help="base URL of a worker (http://host:port)")
    src.add_argument("--sim", action="store_true", help="derive from the engine model")
    p.add_argument("--model-profile", default="llama-3.1-8b-h100", help="engine model for --sim")
    p.add_argument("--prefill-tp", type=int, help="--sim: prefill tensor-parallel size (default: the profile's)")
    p.add_argument("--decode-tp", type=int, help="--sim: decode tensor-parallel size (default: the profile's)")
    p.add_argument("--max-num-batched-tokens", type=int, default=8192)
    p.add_argument("--mock-speedup", type=float, default=1.0,
                   help="--sim: express the profile in the wall time of a mock worker run with this speed-up")
    p.add_argument("--frontend", action=argparse.BooleanOptionalAction, default=True,
                   help="--sim: the TTFTs hold the engine's front end (API server, tokenisation, hand-off), as a "
                        "sweep against an endpoint measures them and as the planner's latency correction reads the "
                        "prefill pods' TTFT (default); --no-frontend: the engine's steps and queue only")
    p.add_argument("--model", help="--endpoint: model name (default: first of /v1/models)")
    p.add_argument("--isl", type=int, nargs="+", default=[128, 512, 2048], help="--endpoint: prompt lengths")
    p.add_argument("--context", type=int, nargs="+", default=[128, 512, 2048], help="--endpoint: decode contexts")
    p.add_argument("--max-concurrency", type=int, default=64)
    p.add_argument("--level-seconds", type=float, default=6.0, help="--endpoint: duration of each load level")
    p.add_argument("--decode-tokens", type=int, default=32)
    p.add_argument("--max-latency", type=float, default=10.0, help="--endpoint: stop a sweep past this latency (s)")
    p.add_argument("--out", type=Path, required=True, help="profile JSON to write")
    args = p.parse_args(argv)
    try:
        if args.sim:
            from pdserve.planner.core.profile_model import derive_profile

            # A derived profile stands in for a measured one, which holds the front end.
            prof = derive_profile(args.model_profile, prefill_tp=args.prefill_tp, decode_tp=args.decode_tp,
                                  max_num_batched_tokens=args.max_num_batched_tokens, include_frontend=args.frontend)
            if args.mock_speedup != 1.0:
                prof = prof.time_scaled(args.mock_speedup)
        else:
            prof = asyncio.run(_sweep(args))
    except (ValueError, OSError) as exc:
        print(f"pdserve profile: error: {exc}", file=sys.stderr)
        return 2
    prof.dump(args.out)
    lo, hi = prof.isl_range()
    print(f"wrote {args.out}: {len(prof.prefill.points)} prefill points (ISL {lo:.0f}..{hi:.0f}), "
          f"{len(prof.decode.points)} decode points")
    return 0


async def _sweep(args):
    import httpx
    from rich.console import Console

    from pdserve.planner.shell.profile_sweep import SweepConfig, Sweeper

    console = Console(stderr=True)
    cfg = SweepConfig(endpoint=args.endpoint, model=args.model, isls=args.isl, contexts=args.context,
                      max_concurrency=args.max_concurrency, level_duration_s=args.level_seconds,
                      decode_tokens=args.decode_tokens, max_latency_s=args.max_latency)
    sweeper = Sweeper(cfg, progress=lambda s: console.log(s))
    try:
        with console.status(f"sweeping {args.endpoint}"):
            return await sweeper.run()
    except httpx.HTTPError as exc:
        raise ValueError(f"{args.endpoint}: {type(exc).__name__}: {exc}") from exc
    finally:
        await sweeper.aclose()
