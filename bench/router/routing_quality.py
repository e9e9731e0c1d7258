"""Routing quality on a real trace: prefix hit ratio, TTFT and load balance per policy.

Replays a Mooncake-format trace (hash_ids = 512-token prefix blocks) in pdserve's
discrete-event simulator (``pdserve.sim``), which drives the router's own policy
objects and the mock worker's engine model on a virtual clock, once per policy.

Two references:
* ``oracle``: a router with global knowledge that reads every worker's real prefix
  cache at decision time and sends each request to the longest cached prefix
  (load ignored; ties to the least loaded). ``vs_oracle`` = hit ratio / its hit ratio.
* ``unlimited``: one cache of unlimited size shared by all workers; an upper bound
  no finite-KV deployment reaches (reported for context).

    .venv/bin/python bench/router/routing_quality.py \\
        --trace /work/shared/data/traces/mooncake/conversation_trace.jsonl --minutes 10
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from pdserve.router.policies import POLICIES, CostWeights, Decision, Policy, RouteRequest, WorkerView, make_policy, pool_weights
from pdserve.sim.config import SimConfig
from pdserve.sim.simulator import Simulation, default_block_size
from pdserve.sim.traces import Trace, from_rows, load_trace

HASH_BLOCK = 512


class GlobalOracle(Policy):
    """Reads the simulated engines' real caches: the longest prefix wins."""

    name = "oracle"

    def __init__(self, sim: Simulation, pool: str) -> None:
        super().__init__(block_size=sim.cfg.block_size)
        self.sim, self.pool = sim, pool

    def _choose(self, req: RouteRequest, workers: list[WorkerView], now: float) -> Decision:  # type: ignore[override]
        insts = {i.instance_id: i for i in self.sim.instances[self.pool]}
        keys = list(req.block_hashes)
        overlap = {w.worker_id: insts[w.worker_id].cached_prefix_blocks(keys, req.prompt_tokens) for w in workers}
        best = max(workers, key=lambda w: (overlap[w.worker_id], -self.active_requests(w)))
        ov = overlap[best.worker_id]
        return Decision(best.worker_id, ov, 0.0, "longest real cached prefix", self.name, self.new_tokens(req, ov))


def unlimited_hit_ratio(trace: Trace, block_size: int) -> float:
    """Hit ratio with one unlimited cache shared by all (in tokens, whole blocks, and
    never the prompt's last token, as vLLM recomputes it)."""
    seen: set[int] = set()
    hits = total = 0
    for r in trace.requests:
        key, k = 0x5EED, 0
        chain = []
        for hid in r.hash_ids:
            key = hash((key, hid))
            chain.append(key)
        for key in chain:
            if key not in seen:
                break
            k += 1
        cached = min(k * HASH_BLOCK, r.input_tokens - 1)
        hits += cached // block_size * block_size
        total += r.input_tokens
        seen.update(chain)
    return hits / total if total else 0.0


def plot(docs: list[dict], path: Path) -> None:
    """Hit ratio vs the oracle and TTFT p90, per policy, one group per result file."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policies = [p for p in docs[0]["results"] if p != "oracle"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4))
    width = 0.8 / len(docs)
    for k, doc in enumerate(docs):
        label = f"{doc['topology']} {doc.get('start_minute', 0):g}-{doc.get('start_minute', 0) + doc['minutes']:g} min"
        xs = [i + k * width for i in range(len(policies))]
        axes[0].bar(xs, [doc["results"][p]["vs_oracle"] for p in policies], width, label=label)
        axes[1].bar(xs, [doc["results"][p]["ttft_p90_s"] for p in policies], width, label=label)
    for ax, title in zip(axes, ("prefix hit ratio / oracle's", "TTFT p90 (s)")):
        ax.set_xticks([i + width * (len(docs) - 1) / 2 for i in range(len(policies))], policies, rotation=20)
        ax.set_title(title)
        ax.legend(fontsize=8)
    axes[0].axhline(0.9, color="grey", linestyle="--", linewidth=1)
    fig.suptitle("routing quality on the Mooncake conversation trace (pdserve.sim)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, help="Mooncake-format JSONL trace (required unless --replot)")
    ap.add_argument("--minutes", type=float, default=10.0, help="replay N minutes of the trace")
    ap.add_argument("--start-minute", type=float, default=0.0, help="...starting this far into it")
    ap.add_argument("--instances", type=int, default=8)
    ap.add_argument("--topology", default="chunked", choices=["chunked", "colocated", "disagg"],
                    help="disagg: --instances prefill engines (the routed pool) + --decode-instances decode engines")
    ap.add_argument("--decode-instances", type=int, default=4)
    ap.add_argument("--token-budget", type=int, default=2048)
    ap.add_argument("--rate-scale", type=float, default=1.0, help="arrival rate multiplier")
    ap.add_argument("--policies", nargs="+", default=sorted(POLICIES))
    ap.add_argument("--block-size", type=int, default=None,
                    help="KV block size (default: the simulator's choice for the trace, 512 for Mooncake)")
    ap.add_argument("--out", type=Path, default=None, help="write JSON results here")
    ap.add_argument("--plot", type=Path, default=None, help="bar charts (PNG) of this run or of --replot files")
    ap.add_argument("--replot", type=Path, nargs="+", default=None, help="only draw --plot from result JSONs")
    args = ap.parse_args()
    if args.replot:
        plot([json.loads(p.read_text()) for p in args.replot], args.plot or Path("routing_quality.png"))
        return 0
    console = Console()
    if args.trace is None:
        ap.error("--trace is required")
    full = load_trace(args.trace)
    lo, hi = args.start_minute * 60, (args.start_minute + args.minutes) * 60
    picked = [r for r in full.requests if lo <= r.arrival_s < hi]
    trace = from_rows([(r.arrival_s, r.input_tokens, r.output_tokens, r.hash_ids) for r in picked],
                      format=full.format, source=full.source, sha256=full.sha256)
    reqs = trace.requests
    block = args.block_size or default_block_size(trace)
    unlimited = unlimited_hit_ratio(trace, block)
    console.print(f"{len(reqs)} requests from {args.trace.name} (minutes {args.start_minute:g}-"
                  f"{args.start_minute + args.minutes:g}); "
                  f"unlimited-cache hit ratio {unlimited:.3f}")
    rows = {}
    names = ["oracle", *args.policies]
    with Progress(console=console) as progress:
        task = progress.add_task("policies", total=len(names))
        for name in names:
            cfg = SimConfig(topology=args.topology, instances=args.instances, block_size=block,
                            prefill_instances=args.instances, decode_instances=args.decode_instances,
                            policy="round_robin" if name == "oracle" else name, token_budget=args.token_budget)
            t0 = time.perf_counter()
            sim = Simulation(trace.scaled(args.rate_scale), cfg)
            if name == "oracle":
                sim.policies[sim.entry_pool] = GlobalOracle(sim, sim.entry_pool)
            elif name in ("kv_aware", "prefix_approx") and args.topology == "disagg":
                # As the router builds its prefill-pool policy (RouterState._make).
                sim.policies["prefill"] = make_policy(name, block_size=block,
                                                      weights=pool_weights(CostWeights(), "prefill"))
            res = sim.run()
            s = res.summary
            per = {i["id"]: i for i in res.instances if i["pool"] == sim.entry_pool}
            routed: dict[str, int] = {k: 0 for k in per}
            for rec in res.records:
                where = rec.prefill_instance or rec.decode_instance
                if where in routed:
                    routed[where] += 1
            work = [i["computed_prompt_tokens"] + i["generated_tokens"] for i in per.values()]
            req_counts = [routed[k] for k in per]
            rows[name] = {
                "prefix_hit_ratio": round(s.prefix_hit_ratio or 0.0, 4),
                "vs_oracle": None,
                "ttft_p50_s": s.ttft["p50"], "ttft_p90_s": s.ttft["p90"], "ttft_p99_s": s.ttft["p99"],
                "tpot_p50_s": s.tpot["p50"],
                "max_mean_requests": round(max(req_counts) / (sum(req_counts) / len(req_counts)), 3),
                "max_mean_work": round(max(work) / (sum(work) / len(work)), 3),
                "finished": s.finished, "requests": s.requests, "preemptions": res.preemptions,
                "sim_wall_s": round(time.perf_counter() - t0, 1),
            }
            progress.advance(task)
    oracle = rows["oracle"]["prefix_hit_ratio"]
    for r in rows.values():
        r["vs_oracle"] = round(r["prefix_hit_ratio"] / oracle, 3) if oracle else None
    baselines = [n for n in rows if n not in ("oracle", "kv_aware", "prefix_approx")]
    best_base = min(baselines, key=lambda n: rows[n]["ttft_p90_s"]) if baselines else None
    layout = f"{args.instances}P{args.decode_instances}D" if args.topology == "disagg" else f"{args.topology}:{args.instances}"
    table = Table(title=f"{layout}, {len(reqs)} Mooncake requests, "
                        f"oracle hit {oracle:.3f}, unlimited cache {unlimited:.3f}")
    for col in ("policy", "hit ratio", "vs oracle", "TTFT p50 s", "TTFT p90 s", "max/mean reqs", "max/mean work"):
        table.add_column(col)
    for name, r in rows.items():
        table.add_row(name, f"{r['prefix_hit_ratio']:.3f}", f"{r['vs_oracle']:.2f}", f"{r['ttft_p50_s']:.3f}",
                      f"{r['ttft_p90_s']:.3f}", f"{r['max_mean_requests']:.2f}", f"{r['max_mean_work']:.2f}")
    console.print(table)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "bench": "routing_quality", "trace": str(args.trace), "start_minute": args.start_minute,
            "minutes": args.minutes, "requests": len(reqs),
            "topology": args.topology, "instances": args.instances, "token_budget": args.token_budget,
            "block_size": block,
            "rate_scale": args.rate_scale, "oracle_hit_ratio": oracle,
            "unlimited_cache_hit_ratio": round(unlimited, 4),
            "oracle": "global knowledge of every worker's real cache; longest cached prefix wins, load ignored",
            "best_baseline_by_ttft_p90": best_base, "results": rows,
        }, indent=2) + "\n")
        if args.plot:
            plot([json.loads(args.out.read_text())], args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
