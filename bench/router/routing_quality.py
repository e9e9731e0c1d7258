"""Routing quality on a real trace: prefix hit ratio, TTFT and load balance per policy, beside Dynamo.

Replays a Mooncake-format trace (hash_ids = 512-token prefix blocks) in pdserve's
discrete-event simulator (``pdserve.sim``), which drives the router's own policy
objects and the mock worker's engine model on a virtual clock, once per policy.

Baselines inside the simulator, besides the router's own policies: SGLang-router's and
vllm-router's ``cache_aware`` at those routers' released defaults
(``sglang_router_cache_aware``, ``vllm_router_cache_aware``, see BASELINES), and
``greedy_global``: a router that reads every engine's real cache and sends each request
to the longest cached prefix (load ignored). The greedy one is a policy, not a bound.

The reference is a **bound** no finite deployment beats: one cache of unlimited size
shared by all workers (``bound.hit_ratio``), and per request the TTFT of its prefill
alone on an idle engine with that cache (``bound.ttft_*``: front-end latency + one
step of the uncached tokens, no queueing, no chunking, no KV transfer).

The peer, with ``--dynamo-python`` (a Python with ``ai-dynamo`` 1.6.1 installed):
NVIDIA Dynamo's offline replay (``bench/router/dynamo_replay.py``) on the same window
written as Mooncake JSONL, the same number of workers, block size and KV blocks per
worker, and the same token budget; round_robin once and kv_router ``--dynamo-runs``
times (its random tie-breaks have no seed). Each system's TTFT gain is against its own
round_robin, since the two engine models differ.

    .venv/bin/python bench/router/routing_quality.py \\
        --trace /work/shared/data/traces/mooncake/conversation_trace.jsonl --minutes 10 \\
        --dynamo-python .cache/peers-venv/bin/python --out bench/router/results/routing_quality.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from pdserve.router.core.spec import PolicyName, RoutingSpec
from pdserve.router.policies import (CacheAwarePolicy, Decision, KvAwarePolicy, Policy, PrefixApproxPolicy,
                                     RouteRequest, WorkerView, pool_weights)
from pdserve.sim.config import SimConfig
from pdserve.sim.instance import PD_BATCHED_TOKENS, pool_spec
from pdserve.sim.simulator import Simulation
from pdserve.sim.traces import default_block_size
from pdserve.sim.traces import Trace, from_rows, load_trace

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from resultmeta import Run, spread, write_result  # noqa: E402
from dynamo_rule import DynamoRulePolicy  # noqa: E402

HASH_BLOCK = 512
# Released defaults of the two Rust routers' cache_aware policy (router_args.py of
# sglang-router 0.3.2 and vllm-router 0.1.17): cache_threshold, balance_abs_threshold,
# balance_rel_threshold, max_tree_size in characters per worker. The trees there are
# over characters; here over block hashes, at ~4 characters per token.
BASELINES = {
    "sglang_router_cache_aware": (0.3, 64, 1.5, 2**26),
    "vllm_router_cache_aware": (0.3, 64, 1.5, 2**25),
}
CHARS_PER_TOKEN = 4


class GlobalOracle(Policy):
    """Reads the simulated engines' real caches: the longest prefix wins."""

    name = "greedy_global"

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


def bound(trace: Trace, block_size: int, cfg: SimConfig) -> tuple[float, dict[str, float]]:
    """The unlimited shared cache's hit ratio (in tokens, whole blocks, never the prompt's
    last token, as vLLM recomputes it) and TTFT percentiles of each prompt's uncached part
    prefilled alone on an idle engine: no finite deployment beats either."""
    spec = pool_spec(cfg, "prefill" if cfg.topology == "disagg" else "colocated")
    perf, front = spec.perf, spec.engine_config.frontend_latency_s
    seen: set[int] = set()
    hits = total = 0
    ttfts = []
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
        cached = min(k * HASH_BLOCK, r.input_tokens - 1) // block_size * block_size
        hits += cached
        total += r.input_tokens
        seen.update(chain)
        ttfts.append(front + perf.step_time([(r.input_tokens - cached, cached)]))
    ttfts.sort()
    pct = {f"ttft_p{q}_s": round(ttfts[min(len(ttfts) - 1, int(q / 100 * len(ttfts)))], 6) for q in (50, 90, 99)}
    return (hits / total if total else 0.0), pct


POLICIES = [p.value for p in PolicyName]


# kv_aware on a P/D layout with the decode-reuse rule on (RoutingSpec.decode_reuse_threshold_tokens =
# --decode-reuse-threshold-tokens): a prompt whose prefix a decode engine holds is prefilled there.
DECODE_REUSE = "kv_aware_decode_reuse"
# pdserve policies whose tie-breaks rotate from a phase (``tie_offset``) that --seeds varies.
SEEDED = {"kv_aware": KvAwarePolicy, "prefix_approx": PrefixApproxPolicy, DECODE_REUSE: KvAwarePolicy}
# Dynamo's worker-selection rule in pdserve's simulator (bench/router/dynamo_rule.py): random ties, seeded.
RULE = DynamoRulePolicy.name


def install_reference(name: str, sim: Simulation, block: int, seed: int = 0) -> None:
    """Put a peer baseline or greedy_global (a policy, not a bound) on the simulation's routed pool, or, for a
    seed > 0, a pdserve cost policy whose tie rotation starts at that phase. pdserve's own policies at seed 0
    need nothing here: SimConfig.routing builds them as the router does."""
    if seed and name in SEEDED:
        pool = "prefill" if sim.entry_pool == "prefill" else "decode"
        w = pool_weights(sim.cfg.routing.weights, pool)
        policy: Policy = (KvAwarePolicy(index=sim.scheduler.index, weights=w, block_size=block, tie_offset=seed)
                          if SEEDED[name] is KvAwarePolicy else PrefixApproxPolicy(weights=w, block_size=block, tie_offset=seed))
    elif name == DynamoRulePolicy.name:
        policy = DynamoRulePolicy(sim.scheduler.index, block_size=block, pool=sim.entry_pool, seed=seed)
    elif name == "greedy_global":
        policy = GlobalOracle(sim, sim.entry_pool)
    elif name in BASELINES:
        thr, abs_thr, rel_thr, chars = BASELINES[name]
        policy = CacheAwarePolicy(block_size=block, cache_threshold=thr, balance_abs_threshold=abs_thr,
                                  balance_rel_threshold=rel_thr, max_blocks=max(1, chars // CHARS_PER_TOKEN // block))
    else:
        return
    sim.scheduler.policies = sim.scheduler.policies.replacing(sim.entry_pool, policy)  # type: ignore[arg-type]


def write_mooncake(trace: Trace, path: Path) -> None:
    """The window as Mooncake JSONL (ms timestamps from 0), the format Dynamo's replay reads."""
    with path.open("w") as fh:
        for r in trace.requests:
            fh.write(json.dumps({"timestamp": round(1000 * r.arrival_s), "input_length": r.input_tokens,
                                 "output_length": r.output_tokens, "hash_ids": list(r.hash_ids)}) + "\n")


def run_dynamo(python: str, trace: Trace, args: argparse.Namespace, num_blocks: int, block: int) -> dict:
    """Dynamo's replay of the same window: round_robin once, kv_router --dynamo-runs times (+ weights)."""
    with tempfile.TemporaryDirectory(prefix="pdserve-dynamo-") as tmp:
        window = Path(tmp) / "window.jsonl"
        write_mooncake(trace, window)
        base = [python, str(HERE / "dynamo_replay.py"), "--trace", str(window), "--block-size", str(block),
                "--num-gpu-blocks", str(num_blocks)]
        if args.topology == "disagg":
            # pdserve's P/D pools batch up to max(PD_BATCHED_TOKENS, token_budget) tokens (sim/instance.py).
            budget = str(max(PD_BATCHED_TOKENS, args.token_budget))
            base += ["--prefill-workers", str(args.instances), "--workers", str(args.decode_instances),
                     "--token-budget", budget, "--prefill-budget", budget]
        else:
            base += ["--workers", str(args.instances), "--token-budget", str(args.token_budget)]
        variants = [("round_robin", ["--router-mode", "round_robin"]),
                    ("kv_router", ["--router-mode", "kv_router", "--runs", str(args.dynamo_runs)])]
        variants += [(f"kv_router_overlap{w:g}", ["--router-mode", "kv_router", "--runs", str(args.dynamo_runs),
                                                 "--overlap-score-weight", str(w)]) for w in args.dynamo_overlap_weights]
        out = {}
        for name, extra in variants:
            r = subprocess.run(base + extra, capture_output=True, text=True, timeout=1800, check=False)
            if r.returncode != 0:
                raise SystemExit(f"dynamo replay {name} failed:\n{r.stderr[-3000:]}")
            doc = json.loads(r.stdout.strip().splitlines()[-1])
            runs = doc.pop("runs")
            hit = [x["prefix_hit_ratio"] for x in runs]
            pick = sorted(runs, key=lambda x: x["prefix_hit_ratio"])[len(runs) // 2]  # the median run
            out[name] = {**doc, "prefix_hit_ratio": spread(hit), "ttft_p50_s": spread([x["ttft_p50_s"] for x in runs]),
                         "ttft_p90_s": spread([x["ttft_p90_s"] for x in runs]),
                         "max_mean_requests": spread([x["max_mean_requests"] for x in runs]),
                         "cpu_s": spread([x["cpu_s"] for x in runs]), "wall_s": spread([x["wall_s"] for x in runs]),
                         "median_run": pick}
        return out


def plot(docs: list[dict], path: Path) -> None:
    """Hit ratio (pdserve policies, Dynamo's, the bound) and TTFT gain over round_robin, per window."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(14, 4.5))
    # every row any window has (the decode-reuse row exists on P/D windows only), first seen first
    names = list(dict.fromkeys([*(k for d in docs for k in d["results"]),
                                *(f"dynamo {k}" for d in docs for k in d.get("dynamo", {}))]))
    width = 0.8 / len(docs)
    for k, doc in enumerate(docs):
        label = f"{doc['layout']} {Path(doc['trace']).stem} {doc['window']}"
        rows = {**doc["results"], **{f"dynamo {n}": v for n, v in doc.get("dynamo", {}).items()}}
        xs = [i + k * width for i in range(len(names))]
        axes[0].bar(xs, [_median(rows[n]["prefix_hit_ratio"]) if n in rows else 0 for n in names], width, label=label)
        axes[1].bar(xs, [rows[n].get("ttft_p90_gain_vs_round_robin") or 0 if n in rows else 0 for n in names], width,
                    label=label)
        axes[0].axhline(doc["bound"]["hit_ratio"], color=f"C{k}", linestyle="--", linewidth=1)
    for ax, title in zip(axes, ("prefix hit ratio (dashed: unlimited shared cache bound)",
                                "TTFT p90 gain over the same system's round_robin")):
        ax.set_xticks([i + width * (len(docs) - 1) / 2 for i in range(len(names))], names, rotation=30, ha="right",
                      fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
    fig.suptitle("routing quality on Mooncake-format traces: pdserve.sim policies beside Dynamo 1.6.1 replay")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _median(x: float | dict) -> float:
    return x["median"] if isinstance(x, dict) else x


def simulate(name: str, trace: Trace, args: argparse.Namespace, block: int, seed: int = 0) -> tuple[dict, Simulation]:
    """One pdserve policy on the window: hit ratio, TTFT, load balance (requests and work per routed worker)."""
    reuse = args.decode_reuse_threshold_tokens if name == DECODE_REUSE else 0
    # RULE reads the KV-event index, which the simulator feeds only for a prefix-reading spec
    policy = "kv_aware" if name in (DECODE_REUSE, RULE) else name if name in POLICIES else "round_robin"
    cfg = SimConfig(topology=args.topology, instances=args.instances, block_size=block,
                    prefill_instances=args.instances, decode_instances=args.decode_instances,
                    routing=RoutingSpec(policy=policy, block_size=block, decode_reuse_threshold_tokens=reuse),
                    token_budget=args.token_budget, exact_views=args.exact_views)
    t0 = time.perf_counter()
    sim = Simulation(trace.scaled(args.rate_scale), cfg)
    install_reference(name, sim, block, seed)
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
    return {
        "prefix_hit_ratio": round(s.prefix_hit_ratio or 0.0, 4),
        "ttft_p50_s": s.ttft["p50"], "ttft_p90_s": s.ttft["p90"], "ttft_p99_s": s.ttft["p99"],
        "tpot_p50_s": s.tpot["p50"],
        "requests_per_worker": req_counts,
        "max_mean_requests": round(max(req_counts) / (sum(req_counts) / len(req_counts)), 3),
        "max_mean_work": round(max(work) / (sum(work) / len(work)), 3),
        "finished": s.finished, "requests": s.requests, "preemptions": res.preemptions,
        "prefilled_on_decode": sum(1 for rec in res.records if sim.disagg and not rec.prefill_instance),
        "itl_p99_s": s.itl["p99"],
        "sim_wall_s": round(time.perf_counter() - t0, 1),
    }, sim


def simulate_seeds(name: str, trace: Trace, args: argparse.Namespace, block: int) -> tuple[dict, Simulation]:
    """``simulate`` at tie phases 0..--seeds-1 for the SEEDED policies (once for the others): median and
    spread, like Dynamo's runs; ``seed0`` keeps the live router's own phase (0)."""
    seeds = range(args.seeds if name in SEEDED or name == RULE else 1)
    runs = []
    for seed in seeds:
        row, sim = simulate(name, trace, args, block, seed)
        runs.append(row)
    if len(runs) == 1:
        return runs[0], sim
    pick = sorted(runs, key=lambda x: x["prefix_hit_ratio"])[len(runs) // 2]  # the median run
    keys = ("prefix_hit_ratio", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "itl_p99_s", "max_mean_requests",
            "max_mean_work")
    return {**pick, **{k: spread([r[k] for r in runs]) for k in keys},
            "sim_wall_s": round(sum(r["sim_wall_s"] for r in runs), 1), "tie_offsets": len(runs),
            "seed0": {k: runs[0][k] for k in keys}}, sim


def gains(rows: dict[str, dict]) -> None:
    """TTFT gain of each row over that system's round_robin (1 - p/p_rr), from medians."""
    rr = rows.get("round_robin")
    if not rr:
        return
    for r in rows.values():
        for q in ("p50", "p90"):
            mine, base = _median(r[f"ttft_{q}_s"]), _median(rr[f"ttft_{q}_s"])
            r[f"ttft_{q}_gain_vs_round_robin"] = round(1 - mine / base, 3) if base else None


def minute_window(path: Path, start_minute: float, minutes: float) -> Trace:
    """The requests of ``path`` arriving in [start, start + minutes) minutes, as a trace of their own
    (same format, source and file hash). Also used by routing_gap.py and engine_agreement.py."""
    full = load_trace(path)
    lo, hi = start_minute * 60, (start_minute + minutes) * 60
    picked = [r for r in full.requests if lo <= r.arrival_s < hi]
    return from_rows([(r.arrival_s, r.input_tokens, r.output_tokens, r.hash_ids) for r in picked],
                     format=full.format, source=full.source, sha256=full.sha256)


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
    ap.add_argument("--exact-views", action="store_true",
                    help="the idealised router (engine state at the instant of each decision) instead of the "
                         "simulator's default, what the live router sees (0.5 s scrapes, KV event lag)")
    ap.add_argument("--decode-reuse-threshold-tokens", type=int, default=0,
                    help=f"disagg: also run kv_aware with this RoutingSpec.decode_reuse_threshold_tokens (row "
                         f"{DECODE_REUSE}): a prompt whose prefix a decode engine holds, with fewer uncached tokens "
                         f"there than this, is prefilled by that engine")
    ap.add_argument("--rate-scale", type=float, default=1.0, help="arrival rate multiplier")
    ap.add_argument("--policies", nargs="+", default=[*sorted(POLICIES), *BASELINES, RULE, "greedy_global"])
    ap.add_argument("--block-size", type=int, default=None,
                    help="KV block size (default: the simulator's choice for the trace, 512 for Mooncake)")
    ap.add_argument("--dynamo-python", default=None,
                    help="a Python with ai-dynamo 1.6.1: run Dynamo's replay on the same window beside pdserve")
    ap.add_argument("--dynamo-runs", type=int, default=5, help="kv_router repetitions (random tie-breaks)")
    ap.add_argument("--seeds", type=int, default=1,
                    help="run kv_aware and prefix_approx at tie-rotation phases 0..N-1 (median [min..max]): their "
                         "replays depend on it chaotically, as Dynamo's do on its random tie-breaks")
    ap.add_argument("--dynamo-overlap-weights", type=float, nargs="*", default=[],
                    help="also run kv_router with these overlap_score_weight values")
    ap.add_argument("--out", type=Path, default=None, help="write JSON results here")
    ap.add_argument("--plot", type=Path, default=None, help="bar charts (PNG) of this run or of --replot files")
    ap.add_argument("--replot", type=Path, nargs="+", default=None, help="only draw --plot from result JSONs")
    args = ap.parse_args()
    if args.replot:
        plot([json.loads(p.read_text()) for p in args.replot], args.plot or Path("routing_quality.png"))
        return 0
    unknown = set(args.policies) - set(POLICIES) - set(BASELINES) - {"greedy_global", DECODE_REUSE, RULE}
    if unknown:
        ap.error(f"unknown policies {sorted(unknown)}")
    if args.trace is None:
        ap.error("--trace is required")
    if args.seeds < 1:
        ap.error("--seeds must be >= 1")
    if args.decode_reuse_threshold_tokens < 0:
        ap.error("--decode-reuse-threshold-tokens must be >= 0")
    if args.decode_reuse_threshold_tokens and args.topology != "disagg":
        ap.error("--decode-reuse-threshold-tokens needs --topology disagg (a decode pool beside a prefill pool)")
    if args.decode_reuse_threshold_tokens and DECODE_REUSE not in args.policies:
        args.policies.append(DECODE_REUSE)
    run = Run(runs=max(args.seeds, args.dynamo_runs if args.dynamo_python else 1))
    console = Console()
    trace = minute_window(args.trace, args.start_minute, args.minutes)
    reqs = trace.requests
    block = args.block_size or default_block_size(trace)
    layout = f"{args.instances}P{args.decode_instances}D" if args.topology == "disagg" else f"{args.topology}:{args.instances}"
    window = f"minutes {args.start_minute:g}-{args.start_minute + args.minutes:g}"
    rows: dict[str, dict] = {}
    sim = None
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("policies", total=len(args.policies))
        for name in args.policies:
            rows[name], sim = simulate_seeds(name, trace, args, block)
            progress.advance(task)
    assert sim is not None
    num_blocks = sim.instances[sim.entry_pool][0].engine.pool.num_blocks
    bound_hit, bound_ttft = bound(trace, block, sim.cfg)
    for r in rows.values():
        r["vs_bound"] = round(_median(r["prefix_hit_ratio"]) / bound_hit, 3) if bound_hit else None
    gains(rows)
    dynamo = {}
    if args.dynamo_python:
        console.print(f"Dynamo replay: same window, {layout}, {num_blocks} x {block}-token KV blocks per worker")
        dynamo = run_dynamo(args.dynamo_python, trace, args, num_blocks, block)
        gains(dynamo)
    table = Table(title=f"{layout}, {len(reqs)} requests of {args.trace.name} ({window}); bound: unlimited shared "
                        f"cache hit {bound_hit:.3f}, idle-engine TTFT p90 {bound_ttft['ttft_p90_s']:.3f} s")
    for col in ("system", "policy", "hit ratio", "TTFT p50 s", "TTFT p90 s", "p90 gain vs RR", "max/mean reqs"):
        table.add_column(col)
    for sysname, group in (("pdserve", rows), ("dynamo", dynamo)):
        for name, r in group.items():
            hit = r["prefix_hit_ratio"]
            hit_txt = f"{hit['median']:.3f} [{hit['min']:.3f}..{hit['max']:.3f}]" if isinstance(hit, dict) else f"{hit:.3f}"
            table.add_row(sysname, name, hit_txt, f"{_median(r['ttft_p50_s']):.3f}", f"{_median(r['ttft_p90_s']):.3f}",
                          f"{r.get('ttft_p90_gain_vs_round_robin') or 0:+.2f}", f"{_median(r['max_mean_requests']):.2f}")
    console.print(table)
    if args.out:
        doc = {
            "bench": "routing_quality", "trace": args.trace.name, "trace_sha256": trace.sha256,
            "start_minute": args.start_minute, "minutes": args.minutes, "window": window, "requests": len(reqs),
            "topology": args.topology, "layout": layout, "instances": args.instances,
            "decode_instances": args.decode_instances if args.topology == "disagg" else 0,
            "token_budget": args.token_budget, "block_size": block, "kv_blocks_per_worker": num_blocks,
            "rate_scale": args.rate_scale, "exact_views": args.exact_views, "pdserve_seeds": args.seeds,
            "decode_reuse_threshold_tokens": args.decode_reuse_threshold_tokens,
            "bound": {"hit_ratio": round(bound_hit, 4), **bound_ttft,
                      "what": "one unlimited cache shared by all workers; TTFT of each prompt's uncached part "
                              "prefilled alone on an idle engine (front-end latency + one step)"},
            "results": rows, "dynamo": dynamo,
        }
        write_result(args.out, doc, run)
        if args.plot:
            plot([json.loads(args.out.read_text())], args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
