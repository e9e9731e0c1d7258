"""How far apart in time a trace's prefix reuses are, beside how long a pool's KV cache can hold them.

For each request of a Mooncake-format window: the longest prefix (in ``hash_ids`` blocks) any
earlier request of the window had, and the seconds since that prefix was last used. Reported:
the fraction of all prompt tokens that an unlimited cache would serve from reuses at most
``g`` seconds apart, for each ``g`` (at the largest g it is routing_quality.py's bound), and per
layout the seconds of prompt traffic its routed pool's caches hold (``--workers`` engines x
``--kv-blocks`` blocks x block tokens / the window's prompt tokens per second): no router
keeps a prefix longer than its worker's cache holds, so hits from reuses further apart than
that are out of reach for any routing policy. Pure arithmetic on the trace, no simulation.

    .venv/bin/python bench/router/reuse_gaps.py --trace conversation_trace.jsonl --start-minute 0 \\
        --minutes 10 --out bench/router/results/routing_reuse_gaps.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pdserve.sim.traces import load_trace

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from resultmeta import Run, write_result  # noqa: E402

HASH_BLOCK = 512  # Mooncake's hash_ids granularity (tokens per id)
GAPS_S = (5, 15, 30, 45, 60, 90, 120, 300, 600)


def reuse_profile(rows: list[tuple[float, int, list[int]]], gaps_s: tuple[float, ...]) -> dict[str, float]:
    """Fraction of prompt tokens hit by an unlimited cache from reuses at most g seconds apart, per g."""
    last_use: dict[int, float] = {}
    hits: list[tuple[float, int]] = []
    total = 0
    for t, n_tokens, hash_ids in rows:
        key, chain = 0x5EED, []
        for hid in hash_ids:
            key = hash((key, hid))
            chain.append(key)
        k = 0
        while k < len(chain) and chain[k] in last_use:
            k += 1
        if k:
            hits.append((t - last_use[chain[k - 1]], min(k * HASH_BLOCK, n_tokens - 1)))
        total += n_tokens
        for c in chain:
            last_use[c] = t
    return {f"{g:g}": round(sum(n for gap, n in hits if gap <= g) / total, 4) if total else 0.0 for g in gaps_s}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, required=True, help="Mooncake-format JSONL trace")
    ap.add_argument("--start-minute", type=float, nargs="+", default=[0.0], help="window starts (one row each)")
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--kv-blocks", type=int, default=848, help="KV blocks per engine (routing_quality.py's 848)")
    ap.add_argument("--layouts", nargs="+", default=["chunked:8=8", "4P4D=4"],
                    help="NAME=ROUTED_WORKERS: the engines whose caches serve prompts (4P4D: the 4 prefill engines)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    layouts = {}
    for spec in args.layouts:
        name, _, n = spec.partition("=")
        if not n.isdigit() or int(n) < 1:
            ap.error(f"--layouts: expected NAME=WORKERS, got {spec!r}")
        layouts[name] = int(n)
    run = Run()
    full = load_trace(args.trace)
    windows = []
    for start in args.start_minute:
        lo, hi = start * 60, (start + args.minutes) * 60
        rows = [(r.arrival_s, r.input_tokens, list(r.hash_ids)) for r in full.requests if lo <= r.arrival_s < hi]
        tokens_per_s = sum(r[1] for r in rows) / (args.minutes * 60)
        held = {name: round(n * args.kv_blocks * HASH_BLOCK / tokens_per_s, 1) if tokens_per_s else None
                for name, n in layouts.items()}
        w = {"window": f"minutes {start:g}-{start + args.minutes:g}", "requests": len(rows),
             "prompt_tokens_per_s": round(tokens_per_s, 1), "cache_holds_s": held,
             "hit_fraction_by_reuse_gap_s": reuse_profile(rows, GAPS_S)}
        windows.append(w)
        print(f"{w['window']}: {len(rows)} requests, caches hold {held} s of prompts; "
              f"unlimited-cache hit fraction by reuse gap (s): {w['hit_fraction_by_reuse_gap_s']}")
    if args.out:
        write_result(args.out, {"bench": "routing_reuse_gaps", "trace": args.trace.name, "trace_sha256": full.sha256,
                                "minutes": args.minutes, "kv_blocks_per_worker": args.kv_blocks,
                                "block_tokens": HASH_BLOCK, "layouts": layouts, "windows": windows}, run)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
