"""Host time of the live mock stack, measured apart from the trace being compared.

    .venv/bin/python bench/sim/hop_probe.py                  # 20 Azure-excerpt prompts at speed-ups 2, 1, 0.5

Requests go one at a time (never two in the system, so no queueing), with the
trace's prompt lengths and ``--output-tokens`` 32 each, through three set-ups:

* ``direct``: client -> one worker (no router);
* ``router``: client -> router -> one worker (colocated, chunked prefill as in fidelity);
* ``router_pd``: client -> router -> prefill worker, then -> decode worker, which pulls
  the KV from the prefill worker's side channel (1P1D).

The simulator replays the same isolated requests, so its times are the modelled GPU
time exactly (the same engine code and profile run inside the mock); what the
client sees on top of that (/ speed-up) is host time:

* per engine step (``step_host_wall_s``): each inter-token gap minus the simulated
  one. In the mock, a step's end is an ``asyncio.sleep`` that epoll rounds up to the
  next millisecond, plus token delivery, and the next step starts after it;
* per request before the first token (``ingress_wall_s``, router set-up): TTFT minus
  the simulated TTFT with the per-step term included (HTTP hops, JSON, the router's
  decision, the worker's request handling);
* per P/D hand-off (``pd_handoff_wall_s``): router_pd's minus router's.

These are the simulator's ``step_host_s``, ``ingress_s`` and ``pd_handoff_s`` in
wall seconds; fidelity.py multiplies them by its speed-up (host time is wall time,
so at speed-up S it is S times as much model time). Probed at each speed-up the
fidelity run uses: the per-step part depends on the step's wall length (timer
rounding). Idle-host values: under load each costs more. Writes bench/sim/results/hop_probe.json.
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

from livestack import LiveRequest, live_stack, loop_lag, replay, worker_args  # type: ignore[import-not-found]
from pdserve.sim.config import SimConfig
from pdserve.sim.prompts import token_ids
from pdserve.sim.simulator import run_simulation
from pdserve.sim.traces import Trace, load_trace

HERE = Path(__file__).resolve().parent
GAP_MODEL_S = 0.8  # model seconds between probe requests: one takes ~0.4 s (prefill, 2 x front-end, 31 decode steps)


def probe_trace(trace: Trace, n: int, output_tokens: int) -> Trace:
    """The first ``n`` requests, one at a time, each answering ``output_tokens`` (model-time arrivals)."""
    from dataclasses import replace
    reqs = tuple(replace(r, arrival_s=i * GAP_MODEL_S, output_tokens=output_tokens)
                 for i, r in enumerate(trace.requests[:n]))
    return replace(trace, requests=reqs)


def _stats(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {"n": len(xs), "median_ms": round(statistics.median(xs) * 1000, 3),
            "mean_ms": round(statistics.fmean(xs) * 1000, 3),
            "p10_ms": round(xs[int(0.1 * (len(xs) - 1))] * 1000, 3),
            "p90_ms": round(xs[int(0.9 * (len(xs) - 1))] * 1000, 3)}


def measure(trace: Trace, n: int, speedup: float, profile: str, kv_link_gbps: float, token_budget: int = 512,
            output_tokens: int = 32, seed: int = 1, con: Console | None = None) -> dict[str, object]:
    con = con or Console()
    pt = probe_trace(trace, n, output_tokens)
    rng = random.Random(seed)
    prompts = [token_ids(r, trace.hash_block_tokens) if r.hash_ids
               else [rng.randrange(1000, 30000) for _ in range(r.input_tokens)] for r in pt.requests]
    schedule = [(r.index, r.arrival_s / speedup, p, r.output_tokens) for r, p in zip(pt.requests, prompts)]
    cfgs = {
        "direct": SimConfig(topology="chunked", instances=1, profile=profile, policy="least_loaded",
                            token_budget=token_budget, kv_link_gbps=kv_link_gbps),
        "router_pd": SimConfig(topology="disagg", prefill_instances=1, decode_instances=1, profile=profile,
                               policy="least_loaded", kv_link_gbps=kv_link_gbps),
    }
    cfgs["router"] = cfgs["direct"]
    out: dict[str, object] = {"speedup": speedup, "requests": n, "output_tokens": output_tokens, "profile": profile}
    live: dict[str, list[LiveRequest]] = {}
    for name in ("direct", "router", "router_pd"):
        cfg = cfgs[name]
        n_p, n_d = (1, 1) if cfg.topology == "disagg" else (0, 1)
        wargs = worker_args(cfg.topology, cfg.token_budget, cfg.max_model_len, kv_link_gbps)
        with live_stack(n_p, n_d, wargs, speedup, profile, "least_loaded", direct=name == "direct") as stack:
            # Warm connections and code paths (not counted) with other prompts: the same ones would hit the prefix cache.
            asyncio.run(replay(stack.url, [(i, at, [t + 1 for t in p], n) for i, at, p, n in schedule[:2]]))
            live[name] = asyncio.run(replay(stack.url, schedule))
            lag = loop_lag(stack.worker_urls)
        bad = [r for r in live[name] if r.error or len(r.token_s) != output_tokens]
        if bad:
            raise RuntimeError(f"probe {name}: {len(bad)} requests failed, first: {bad[0].error or 'tokens missing'}")
        out[name] = {"worker_loop_lag": list(lag.values())}
    # 1. Host time per engine step, from the inter-token gaps.
    step_host: dict[str, list[float]] = {}
    for name, reqs in live.items():
        sim = {r.index: r for r in run_simulation(pt, cfgs[name]).records}
        step_host[name] = [g - sim[r.index].tpot / speedup for r in reqs for g in r.gaps]
    step_wall = statistics.median(step_host["router"] + step_host["router_pd"])
    # 2. Host time before the first token, with the per-step host time simulated.
    ttft_host: dict[str, list[float]] = {}
    for name, reqs in live.items():
        cfg = cfgs[name].model_copy(update={"step_host_s": step_wall * speedup})
        sim = {r.index: r for r in run_simulation(pt, cfg).records}
        ttft_host[name] = [r.ttft_s - sim[r.index].ttft / speedup for r in reqs]
    for name in live:
        out[name] = {"step_host": _stats(step_host[name]), "ttft_host": _stats(ttft_host[name]),
                     **out[name]}  # type: ignore[dict-item]
        con.print(f"{name}: host time per step {out[name]['step_host']}, before the first token "  # type: ignore[index]
                  f"{out[name]['ttft_host']}")  # type: ignore[index]
    ingress = statistics.median(ttft_host["router"])
    out["step_host_wall_s"] = round(step_wall, 6)
    out["ingress_wall_s"] = round(ingress, 6)
    out["pd_handoff_wall_s"] = round(max(0.0, statistics.median(ttft_host["router_pd"]) - ingress), 6)
    out["router_hop_wall_s"] = round(ingress - statistics.median(ttft_host["direct"]), 6)
    out["load_average_1m"] = round(os.getloadavg()[0], 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, default=HERE / "data" / "azure_conv_excerpt.csv")
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--speedups", type=float, nargs="+", default=[2.0, 1.0, 0.5],
                    help="mock speed-ups to probe at (host time per step depends on the step's wall length)")
    ap.add_argument("--output-tokens", type=int, default=32)
    ap.add_argument("--profile", default="llama-3.1-8b-h100")
    ap.add_argument("--kv-link-gbps", type=float, default=100.0)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "hop_probe.json")
    args = ap.parse_args()
    con = Console()
    trace = load_trace(args.trace)
    res: dict[str, object] = {"trace": args.trace.name, "by_speedup": {}}
    for s in args.speedups:
        t = time.perf_counter()
        one = measure(trace, args.requests, s, args.profile, args.kv_link_gbps, output_tokens=args.output_tokens,
                      con=con)
        one["wall_s"] = round(time.perf_counter() - t, 1)
        res["by_speedup"][str(s)] = one  # type: ignore[index]
        con.print_json(json.dumps({k: v for k, v in one.items() if not isinstance(v, dict)}))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2) + "\n")
    con.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
