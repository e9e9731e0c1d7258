"""Where pdserve's kv_aware and Dynamo's kv_router get different prefix hits, request by request.

Both systems replay the same window (``routing_quality.py``'s setup: same workers, 512-token
blocks, 848 KV blocks per worker). For every request each side records, at the instant its
router placed it: the worker it chose, the blocks that worker really held of the prompt
(pdserve: the simulated engine's cache, read without touching it; Dynamo: its router's
overlap on the chosen worker, ``selected_overlap_blocks``, from an index fed by KV events)
and the most any worker held (``best_available_overlap_blocks``). Requests are paired by
arrival (ms) and prompt length; the few pairs that are ambiguous are left out and counted.

Per pair of runs (pdserve tie phase k beside Dynamo run k), the prompt tokens one side had
cached on its chosen worker and the other did not are put in one of two classes:

* ``routed_away``: the other side held them on some worker and its router saw them there,
  but chose another one (load, tie-break); for pdserve ``routed_away_unseen`` when its view
  (KV-event index and speculative entries) did not show them yet: blocks of a prefill still
  in flight, or events not yet arrived. Dynamo's numbers are its router's own view, so its
  side has no such class;
* ``not_cached_anywhere``: no worker of the other side held them any more (an earlier
  placement or eviction differed).

and each side's hit ratio is given at dispatch (what the chosen worker held when the
request was routed) and at admission (what the engine reused when it scheduled the
prompt; the reported hit ratio): the difference is prefix evicted while the request
waited in the worker's queue. Every number is a share of the window's prompt tokens,
median [min..max] over the pairs.

    .venv/bin/python bench/router/routing_gap.py --trace $T --start-minute 20 --minutes 10 \\
        --dynamo-python .cache/peers-venv/bin/python --runs 5 --out bench/router/results/routing_gap_min20.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from pdserve.router.core.spec import RoutingSpec
from pdserve.router.policies import Decision, KvAwarePolicy, RouteRequest, pool_weights
from pdserve.sim.config import SimConfig
from pdserve.sim.instance import PD_BATCHED_TOKENS
from pdserve.sim.simulator import Simulation
from pdserve.sim.traces import Trace

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
from resultmeta import Run, spread, write_result  # noqa: E402
from routing_quality import minute_window, write_mooncake  # noqa: E402

BLOCK = 512


class RecordingKvAware(KvAwarePolicy):
    """kv_aware, unchanged, that also notes per placement what every worker's engine really held."""

    def __init__(self, sim: Simulation, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.sim = sim
        # request id -> (worker, held there, most held anywhere, what the router's view showed on that worker)
        self.placed: dict[str, tuple[str, int, int, int]] = {}

    def on_routed(self, decision: Decision, req: RouteRequest, now: float) -> None:
        self._note(decision, req, now)  # before this request's own speculative entries exist
        super().on_routed(decision, req, now)

    def _note(self, decision: Decision, req: RouteRequest, now: float) -> None:
        keys = list(req.block_hashes)
        insts = self.sim.instances[self.sim.entry_pool]
        held = {i.instance_id: i.cached_prefix_blocks(keys, req.prompt_tokens) for i in insts}
        top = max(held, key=held.__getitem__)
        # the router's view (KV-event index + speculative entries) of the worker that held the most
        seen = self.overlaps(req, [i.instance_id for i in insts], now).get(top, 0)
        self.placed.setdefault(req.request_id, (decision.worker_id, held[decision.worker_id], held[top], seen))


def pdserve_runs(trace: Trace, args: argparse.Namespace) -> list[dict]:
    """kv_aware at tie phases 0..runs-1: per request (arrival ms, prompt, worker, held, best held, seen of the best
    holder) and the engine's reported hit ratio."""
    out = []
    for phase in range(args.runs):
        cfg = pd_config(args)
        sim = Simulation(trace, cfg)
        pol = RecordingKvAware(sim, index=sim.scheduler.index, weights=pool_weights(cfg.routing.weights, "prefill"),
                               block_size=BLOCK, tie_offset=phase)
        sim.scheduler.policies = sim.scheduler.policies.replacing("prefill", pol)
        res = sim.run()
        rows = []
        for rec in res.records:
            w, held, best, seen = pol.placed.get(str(rec.index), ("", 0, 0, 0))
            rows.append((round(1000 * rec.arrival_s), rec.input_tokens, w, held, best, seen))
        out.append({"hit_ratio": res.summary.prefix_hit_ratio or 0.0, "requests": rows})
    return out


def dynamo_per_request(trace: Trace, args: argparse.Namespace) -> tuple[list[dict], list[str]]:
    """Dynamo's 4P4D kv_router replay, ``--runs`` times, with per-request records (dynamo_replay.py --per-request):
    each run's summary and its per-request JSON line. Also used by engine_agreement.py."""
    budget = str(max(PD_BATCHED_TOKENS, args.token_budget))
    with tempfile.TemporaryDirectory(prefix="pdserve-gap-") as tmp:
        window, per = Path(tmp) / "window.jsonl", Path(tmp) / "per_request.jsonl"
        write_mooncake(trace, window)
        cmd = [args.dynamo_python, str(HERE / "dynamo_replay.py"), "--trace", str(window), "--block-size", str(BLOCK),
               "--num-gpu-blocks", str(args.num_gpu_blocks), "--prefill-workers", str(args.instances), "--workers",
               str(args.decode_instances), "--token-budget", budget, "--prefill-budget", budget,
               "--router-mode", "kv_router", "--runs", str(args.runs), "--per-request", str(per)]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
        if r.returncode != 0:
            raise SystemExit(f"dynamo replay failed:\n{r.stderr[-3000:]}")
        return json.loads(r.stdout.strip().splitlines()[-1])["runs"], per.read_text().splitlines()


def dynamo_runs(trace: Trace, args: argparse.Namespace) -> list[dict]:
    """Dynamo's kv_router replay, ``--runs`` times, with per-request records (dynamo_replay.py --per-request)."""
    summary, lines = dynamo_per_request(trace, args)
    return [{"hit_ratio": s["prefix_hit_ratio"],
             # Dynamo's held/best are its router's view: what it saw is what it had, by construction
             "requests": [(round(a), n, str(w), view, best, best) for a, n, w, view, best, _reused in json.loads(line)]}
            for s, line in zip(summary, lines)]


def compare(pd: dict, dy: dict, prompt_tokens: int) -> dict[str, float]:
    """One pair of runs: each side's hit ratio at dispatch and admission, and the tokens one side held on its chosen
    worker beyond the other's, by class. Shares of the window's prompt tokens."""
    by_key: dict[tuple[int, int], list[tuple]] = defaultdict(list)
    for row in dy["requests"]:
        by_key[(row[0], row[1])].append(row)
    out: dict[str, float] = defaultdict(float)
    ambiguous = 0
    for a, n, _w, held, best, seen in pd["requests"]:
        match = by_key.get((a, n), [])
        if len(match) != 1:
            ambiguous += 1
            continue
        _, _, _, d_held, d_best, _ = match[0]
        cap = (n - 1) // BLOCK  # neither side reuses the prompt's last token
        mine, theirs = min(held, cap) * BLOCK, min(d_held, cap) * BLOCK
        out["pdserve_dispatch"] += mine
        out["dynamo_dispatch"] += theirs
        if theirs > mine:
            if min(best, cap) * BLOCK < theirs:
                why = "not_cached_anywhere"
            else:  # held elsewhere: a choice against load or a tie, or a view that did not show it yet
                why = "routed_away" if min(seen, cap) * BLOCK >= theirs else "routed_away_unseen"
            out["dynamo_ahead_" + why] += theirs - mine
        elif mine > theirs:
            out["pdserve_ahead_" + ("routed_away" if min(d_best, cap) * BLOCK >= mine else "not_cached_anywhere")] += mine - theirs
    doc = {k: v / prompt_tokens for k, v in out.items()}
    doc["pdserve_admission"], doc["dynamo_admission"] = pd["hit_ratio"], dy["hit_ratio"]
    doc["pdserve_lost_while_queued"] = doc.get("pdserve_dispatch", 0.0) - pd["hit_ratio"]
    doc["dynamo_lost_while_queued"] = doc.get("dynamo_dispatch", 0.0) - dy["hit_ratio"]
    doc["ambiguous_requests"] = ambiguous
    return doc


CLASSES = ["pdserve_admission", "dynamo_admission", "pdserve_dispatch", "dynamo_dispatch", "pdserve_lost_while_queued",
           "dynamo_lost_while_queued", "dynamo_ahead_routed_away", "dynamo_ahead_routed_away_unseen",
           "dynamo_ahead_not_cached_anywhere",
           "pdserve_ahead_routed_away", "pdserve_ahead_not_cached_anywhere", "ambiguous_requests"]


def summarize(pairs: Sequence[dict[str, float]]) -> dict[str, dict]:
    return {k: spread([round(p.get(k, 0.0), 5) for p in pairs]) for k in CLASSES}


def add_pd_window_args(ap: argparse.ArgumentParser) -> None:
    """The flags ``pd_window`` and ``pd_config`` read (and Dynamo's Python), shared with engine_agreement.py."""
    ap.add_argument("--trace", type=Path, required=True, help="Mooncake-format JSONL trace")
    ap.add_argument("--start-minute", type=float, default=0.0)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--instances", type=int, default=4, help="prefill engines (the routed pool)")
    ap.add_argument("--decode-instances", type=int, default=4)
    ap.add_argument("--token-budget", type=int, default=2048)
    ap.add_argument("--dynamo-python", required=True, help="a Python with ai-dynamo 1.6.1 (see README)")


def pd_config(args: argparse.Namespace) -> SimConfig:
    """The disaggregated layout both scripts replay (``--instances`` prefill, ``--decode-instances``
    decode, ``--token-budget``), 512-token blocks as in the trace, kv_aware on the prefill pool.
    Also used by engine_agreement.py."""
    return SimConfig(topology="disagg", instances=args.instances, block_size=BLOCK, prefill_instances=args.instances,
                     decode_instances=args.decode_instances, token_budget=args.token_budget,
                     routing=RoutingSpec(policy="kv_aware", block_size=BLOCK))


def pd_window(ap: argparse.ArgumentParser, args: argparse.Namespace) -> Trace:
    """The ``--start-minute``/``--minutes`` window of ``--trace`` (refused when empty), and in
    ``args.num_gpu_blocks`` the KV blocks a prefill engine of this layout gets, which Dynamo's replay
    is given too. Also used by engine_agreement.py."""
    trace = minute_window(args.trace, args.start_minute, args.minutes)
    if not trace.requests:
        ap.error(f"no requests in minutes {args.start_minute:g}-{args.start_minute + args.minutes:g} of {args.trace}")
    probe = Simulation(trace, pd_config(args))
    args.num_gpu_blocks = probe.instances["prefill"][0].engine.pool.num_blocks
    return trace


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pd_window_args(ap)
    ap.add_argument("--runs", type=int, default=5, help="pdserve tie phases 0..N-1, and N Dynamo runs")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be >= 1")
    trace = pd_window(ap, args)
    pd, dy = pdserve_runs(trace, args), dynamo_runs(trace, args)
    prompt = sum(r.input_tokens for r in trace.requests)
    pairs = [compare(p, d, prompt) for p, d in zip(pd, dy)]
    doc = {"bench": "routing_gap", "trace": args.trace.name, "trace_sha256": trace.sha256,
           "window": f"minutes {args.start_minute:g}-{args.start_minute + args.minutes:g}", "requests": len(trace.requests),
           "layout": f"{args.instances}P{args.decode_instances}D", "block_size": BLOCK,
           "kv_blocks_per_worker": args.num_gpu_blocks, "pairs": len(pairs), "shares": summarize(pairs),
           "what": "shares of the window's prompt tokens; dispatch = what the chosen worker held when routed, "
                   "admission = the reported hit ratio; <side>_ahead_<class> = tokens that side's chosen worker "
                   "held beyond the other side's, by why the other side missed them"}
    print(json.dumps(doc["shares"], indent=1))
    if args.out:
        write_result(args.out, doc, Run(runs=len(pairs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
