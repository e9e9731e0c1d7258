"""Host/HTTP time of the live stack per request, measured with ~zero modelled GPU time.

    .venv/bin/python bench/sim/hop_probe.py                  # 40 Azure-excerpt prompts, x1000 workers

Mock workers run at ``--speedup`` 1000, so a 1k-token prefill's modelled ~60 ms is
~60 us of wall time; whatever the client still waits for is host time: HTTP hops,
JSON, the router's decision, the worker's request handling and event loop, the P/D
side-channel pull. Requests go one at a time (no queueing), with the trace's prompt
and the trace's prompt lengths, ``max_tokens`` 2. Three set-ups:

* ``direct``: client -> one worker (no router);
* ``router``: client -> router -> one worker (colocated, chunked prefill as in fidelity);
* ``router_pd``: client -> router -> prefill worker, then -> decode worker, which pulls
  the KV from the prefill worker's side channel (1P1D).

The simulator's own TTFT for each probe request (its modelled GPU time, / speed-up)
is subtracted, so the numbers are host time only. They give the simulator's
host terms (``SimConfig.ingress_s`` = router median; ``pd_handoff_s`` = router_pd
median - router median), in wall seconds; fidelity.py multiplies them by its
speed-up to get model seconds. Idle-host values: under load each hop costs more.
Writes bench/sim/results/hop_probe.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import time
from pathlib import Path

from rich.console import Console

from livestack import live_stack, loop_lag, replay, worker_args  # type: ignore[import-not-found]
from pdserve.sim.config import SimConfig
from pdserve.sim.prompts import token_ids
from pdserve.sim.simulator import run_simulation
from pdserve.sim.traces import Trace, load_trace

HERE = Path(__file__).resolve().parent
SPACING_S = 0.1  # wall seconds between probe requests: each finishes in a few ms, so none overlap


def probe_trace(trace: Trace, n: int, speedup: float) -> Trace:
    """The first ``n`` requests, spaced out, answering 2 tokens (model-time arrivals)."""
    from dataclasses import replace
    reqs = tuple(replace(r, arrival_s=i * SPACING_S * speedup, output_tokens=2)
                 for i, r in enumerate(trace.requests[:n]))
    return replace(trace, requests=reqs)


def _stats(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {"n": len(xs), "median_ms": round(statistics.median(xs) * 1000, 3),
            "mean_ms": round(statistics.fmean(xs) * 1000, 3),
            "p90_ms": round(xs[int(0.9 * (len(xs) - 1))] * 1000, 3)}


def measure(trace: Trace, n: int, speedup: float, profile: str, kv_link_gbps: float,
            token_budget: int = 512, seed: int = 1, con: Console | None = None) -> dict[str, object]:
    con = con or Console()
    pt = probe_trace(trace, n, speedup)
    rng = random.Random(seed)
    prompts = [token_ids(r, trace.hash_block_tokens) if r.hash_ids
               else [rng.randrange(1000, 30000) for _ in range(r.input_tokens)] for r in pt.requests]
    schedule = [(r.index, r.arrival_s / speedup, p, r.output_tokens) for r, p in zip(pt.requests, prompts)]
    setups = {
        "direct": ("chunked", 0, 1, True),
        "router": ("chunked", 0, 1, False),
        "router_pd": ("disagg", 1, 1, False),
    }
    out: dict[str, object] = {"speedup": speedup, "requests": n, "profile": profile}
    host: dict[str, list[float]] = {}
    for name, (topo, n_p, n_d, direct) in setups.items():
        cfg = (SimConfig(topology="disagg", prefill_instances=1, decode_instances=1, profile=profile,
                         policy="least_loaded", kv_link_gbps=kv_link_gbps) if topo == "disagg" else
               SimConfig(topology="chunked", instances=1, profile=profile, policy="least_loaded",
                         token_budget=token_budget, kv_link_gbps=kv_link_gbps))
        sim_ttft = {r.index: r.ttft for r in run_simulation(pt, cfg).records}
        wargs = worker_args(cfg.topology, cfg.token_budget, cfg.max_model_len, kv_link_gbps)
        with live_stack(n_p, n_d, wargs, speedup, profile, "least_loaded", direct=direct) as stack:
            asyncio.run(replay(stack.url, schedule[:3]))  # warm connections and code paths, not counted
            live = asyncio.run(replay(stack.url, schedule))
            lag = loop_lag(stack.worker_urls)
        bad = [r for r in live if r.error or r.ttft_s != r.ttft_s]
        if bad:
            raise RuntimeError(f"probe {name}: {len(bad)} requests failed, first: {bad[0].error or 'no tokens'}")
        host[name] = [r.ttft_s - sim_ttft[r.index] / speedup for r in live]
        out[name] = {**_stats(host[name]), "modelled_gpu_ms_median": round(
            statistics.median(sim_ttft.values()) / speedup * 1000, 4), "worker_loop_lag": list(lag.values())}
        con.print(f"{name}: host time per request {out[name]}")
    ingress = statistics.median(host["router"])
    handoff = max(0.0, statistics.median(host["router_pd"]) - ingress)
    out["ingress_wall_s"] = round(ingress, 6)
    out["pd_handoff_wall_s"] = round(handoff, 6)
    out["router_hop_wall_s"] = round(ingress - statistics.median(host["direct"]), 6)
    out["load_average_1m"] = round(os.getloadavg()[0], 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, default=HERE / "data" / "azure_conv_excerpt.csv")
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--speedup", type=float, default=1000.0)
    ap.add_argument("--profile", default="llama-3.1-8b-h100")
    ap.add_argument("--kv-link-gbps", type=float, default=100.0)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "hop_probe.json")
    args = ap.parse_args()
    con = Console()
    t = time.perf_counter()
    res = measure(load_trace(args.trace), args.requests, args.speedup, args.profile, args.kv_link_gbps, con=con)
    res["trace"] = args.trace.name
    res["wall_s"] = round(time.perf_counter() - t, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2) + "\n")
    con.print_json(json.dumps({k: v for k, v in res.items() if not isinstance(v, dict)}))
    con.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
