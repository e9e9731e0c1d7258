"""Do pdserve's and Dynamo's prefill engines cache the same under the same placements? (4P4D)

Dynamo 1.6.1's offline replay routes a window with its kv_router; this script then replays
the same window in pdserve's simulator with a policy that puts every request on the prefill
worker Dynamo chose (``Pinned``). With placements equal, what is left between the two hit
ratios is the engines' cache model: which blocks a worker still holds when a prompt
arrives. Request by request it reports how many prompt tokens each side reused and how many
requests differ. Session 7 found the gap this way (bench/router/README.md, routing section).

    .venv/bin/python bench/router/engine_agreement.py --trace T --start-minute 0 \\
        --dynamo-python .cache/peers-venv/bin/python --runs 5 --out bench/router/results/routing_engine_agreement_min0.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from pdserve.router.policies import Decision, Policy, RouteRequest, WorkerView
from pdserve.sim.simulator import Simulation
from pdserve.sim.traces import Trace
from pdserve.worker.engine import EngineRequest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
from resultmeta import Run, spread, write_result  # noqa: E402
from routing_gap import BLOCK, add_pd_window_args, dynamo_per_request, pd_config, pd_window  # noqa: E402


class Pinned(Policy):
    """Places request i on prefill worker ``placement[i]`` (an index into the prefill pool)."""

    name = "pinned"

    def __init__(self, sim: Simulation, placement: dict[str, int]) -> None:
        super().__init__(block_size=BLOCK)
        self.sim, self.placement = sim, placement

    def _choose(self, req: RouteRequest, workers: list[WorkerView], now: float) -> Decision:  # type: ignore[override]
        wid = self.sim.instances["prefill"][self.placement[req.request_id]].instance_id
        return Decision(wid, 0, 0.0, "Dynamo's placement", self.name, self.new_tokens(req, 0))


def dynamo_placements(trace: Trace, args: argparse.Namespace) -> list[tuple[float, list[int], list[int]]]:
    """Per Dynamo run: its hit ratio, and per trace request (in trace order) its prefill worker and reused tokens."""
    summary, lines = dynamo_per_request(trace, args)
    out = []
    for s, line in zip(summary, lines):
        # Dynamo lists requests in no fixed order: match them to the trace by (arrival ms, prompt length), in order
        pool: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
        for a, n, w, _view, _best, reused in json.loads(line):
            pool[(round(a), n)].append((int(w), int(reused)))
        picked = [pool[(round(1000 * r.arrival_s), r.input_tokens)].pop(0) for r in trace.requests]
        out.append((float(s["prefix_hit_ratio"]), [w for w, _ in picked], [u for _, u in picked]))
    return out


def pinned_replay(trace: Trace, args: argparse.Namespace, placement: list[int]) -> tuple[float, list[int]]:
    """pdserve's hit ratio with Dynamo's placements, and each request's reused prompt tokens at admission."""
    sim = Simulation(trace, pd_config(args))
    sim.scheduler.policies = sim.scheduler.policies.replacing(
        "prefill", Pinned(sim, {str(i): w for i, w in enumerate(placement)}))
    # keep each prefill request: its num_cached_prompt_tokens is the engine's prefix hit at admission
    kept: list[EngineRequest] = []
    for inst in sim.instances["prefill"]:
        add = inst.engine.add_request

        def keep(req: EngineRequest, now: float, add: Callable[[EngineRequest, float], None] = add) -> None:
            kept.append(req)
            add(req, now)

        inst.engine.add_request = keep  # type: ignore[method-assign]
    res = sim.run()
    assert all(r.prefill_instance == sim.instances["prefill"][placement[r.index]].instance_id for r in res.records)
    reused = [0] * len(trace.requests)
    for req in kept:
        reused[int(req.request_id)] = req.num_cached_prompt_tokens
    return res.summary.prefix_hit_ratio or 0.0, reused


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pd_window_args(ap)
    ap.add_argument("--runs", type=int, default=3, help="Dynamo runs (its ties are random), each replayed pinned")
    ap.add_argument("--note", default="", help="recorded in the result, e.g. which simulator source was imported")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be >= 1")
    trace = pd_window(ap, args)
    prompt = sum(r.input_tokens for r in trace.requests)
    runs = []
    for dyn_hit, placement, dyn_reused in dynamo_placements(trace, args):
        pd_hit, pd_reused = pinned_replay(trace, args, placement)
        diff = [d - p for d, p in zip(dyn_reused, pd_reused)]
        runs.append({"dynamo_hit_ratio": round(dyn_hit, 4), "pdserve_pinned_hit_ratio": round(pd_hit, 4),
                     "requests_differing": sum(1 for x in diff if x),
                     "dynamo_more_share": round(sum(x for x in diff if x > 0) / prompt, 4),
                     "pdserve_more_share": round(-sum(x for x in diff if x < 0) / prompt, 4)})
    doc = {"bench": "routing_engine_agreement", "trace": args.trace.name, "trace_sha256": trace.sha256,
           "window": f"minutes {args.start_minute:g}-{args.start_minute + args.minutes:g}", "requests": len(trace.requests),
           "layout": f"{args.instances}P{args.decode_instances}D", "block_size": BLOCK,
           "kv_blocks_per_worker": args.num_gpu_blocks, "note": args.note, "runs": runs,
           "dynamo_hit_ratio": spread([r["dynamo_hit_ratio"] for r in runs]),
           "pdserve_pinned_hit_ratio": spread([r["pdserve_pinned_hit_ratio"] for r in runs]),
           "what": "pdserve's simulator replays each Dynamo kv_router run with every request on the prefill worker "
                   "Dynamo chose; *_more_share = prompt tokens one side reused beyond the other, over all prompt tokens"}
    print(json.dumps(runs, indent=1))
    if args.out:
        write_result(args.out, doc, Run(runs=len(runs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
