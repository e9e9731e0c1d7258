"""Fidelity: the simulator vs live mock workers behind the real router, same trace.

    .venv/bin/python bench/sim/fidelity.py                      # 1P1D, Azure excerpt, defaults
    .venv/bin/python bench/sim/fidelity.py --layout colocated:2 --requests 150

Live side: ``pdserve worker`` processes (``--mock-speedup S``) and ``pdserve router``
on loopback; a client replays the trace's arrivals (divided by S) as streaming
completions with exact prompt token ids (random, so no prefix sharing, or from
Mooncake hash ids via ``pdserve.sim.prompts.token_ids``) and
``max_tokens`` = the trace's output length (``ignore_eos``). Client-side TTFT and
inter-token gaps are multiplied by S to get model seconds. Sim side: the same
trace, layout, profile, policy and link in ``pdserve.sim``. Reports TTFT p50/p90
and ITL p50 of both and their relative differences (target: within 10 %).
Writes bench/sim/results/fidelity_<layout>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import aiohttp
import httpx
from rich.console import Console

from pdserve.sim.config import SimConfig, parse_layout
from pdserve.sim.metrics import percentile
from pdserve.sim.prompts import token_ids
from pdserve.sim.simulator import run_simulation
from pdserve.sim.traces import Trace, load_trace
from pdserve.worker.testing import start_worker

HERE = Path(__file__).resolve().parent
NIXL = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_router(prefill: list[str], decode: list[str], policy: str) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    cmd = [sys.executable, "-m", "pdserve.cli", "router", "--host", "127.0.0.1", "--port", str(port),
           "--policy", policy, "--decode-policy", "least_loaded", "--no-debug-header", "--log-level", "WARNING"]
    if prefill:
        cmd += ["--prefill", *prefill]
    cmd += ["--decode", *decode]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"router exited: {proc.stderr.read().decode() if proc.stderr else ''}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError("router did not become healthy")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


async def replay(url: str, trace: Trace, speedup: float, seed: int) -> list[tuple[float, list[float]]]:
    """Returns per request (TTFT, token gaps) in wall seconds."""
    rng = random.Random(seed)
    # Mooncake hash ids become shared token blocks (as in the simulator); others get random, unshared prompts.
    prompts = [token_ids(r, trace.hash_block_tokens) if r.hash_ids
               else [rng.randrange(1000, 30000) for _ in range(r.input_tokens)] for r in trace.requests]
    out: list[tuple[float, list[float]]] = [(float("nan"), [])] * len(trace.requests)
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=600)) as session:
        t0 = time.perf_counter() + 0.5

        async def one(i: int) -> None:
            r = trace.requests[i]
            await asyncio.sleep(max(0.0, t0 + r.arrival_s / speedup - time.perf_counter()))
            body = {"model": "mock", "prompt": prompts[i], "max_tokens": r.output_tokens, "min_tokens": r.output_tokens,
                    "ignore_eos": True, "stream": True}
            start = time.perf_counter()
            times: list[float] = []
            async with session.post(f"{url}/v1/completions", json=body) as resp:
                resp.raise_for_status()
                async for raw in resp.content:
                    line = raw.strip()
                    if line.startswith(b"data: ") and line != b"data: [DONE]":
                        chunk = json.loads(line[6:])
                        if chunk.get("choices") and chunk["choices"][0].get("text") is not None:
                            times.append(time.perf_counter())
            if times:
                out[i] = (times[0] - start, [b - a for a, b in zip(times, times[1:])])

        await asyncio.gather(*(one(i) for i in range(len(trace.requests))))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, default=HERE / "data" / "azure_conv_excerpt.csv")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--rate-scale", type=float, default=1.0)
    ap.add_argument("--layout", default="1p1d")
    ap.add_argument("--profile", default="llama-3.1-8b-h100")
    ap.add_argument("--policy", default="least_loaded")
    ap.add_argument("--speedups", type=float, nargs="+", default=[2.0, 1.0, 0.5],
                    help="mock worker speed-ups to run (wall = model time / S); host overhead shrinks with S")
    ap.add_argument("--kv-link-gbps", type=float, default=100.0)
    args = ap.parse_args()
    con = Console()
    trace = load_trace(args.trace).head(args.requests).scaled(args.rate_scale)
    cfg = SimConfig(**parse_layout(args.layout), profile=args.profile, policy=args.policy,
                    decode_policy="least_loaded", kv_link_gbps=args.kv_link_gbps)
    t_sim = time.perf_counter()
    sim = run_simulation(trace, cfg)
    t_sim = time.perf_counter() - t_sim
    n_p = cfg.prefill_instances if cfg.topology == "disagg" else 0
    n_d = cfg.decode_instances if cfg.topology == "disagg" else cfg.instances
    wargs = ["--kv-transfer-config", NIXL, "--mock-kv-link-gbps", str(args.kv_link_gbps), "--mock-side-channel-port", "0"]
    if cfg.topology == "colocated":
        wargs += ["--no-enable-chunked-prefill", "--max-num-batched-tokens", str(cfg.max_model_len)]
    elif cfg.topology == "chunked":
        wargs += ["--max-num-batched-tokens", str(cfg.token_budget)]
    n_p = cfg.prefill_instances if cfg.topology == "disagg" else 0
    n_d = cfg.decode_instances if cfg.topology == "disagg" else cfg.instances
    wargs = ["--kv-transfer-config", NIXL, "--mock-kv-link-gbps", str(args.kv_link_gbps), "--mock-side-channel-port", "0"]
    if cfg.topology == "colocated":
        wargs += ["--no-enable-chunked-prefill", "--max-num-batched-tokens", str(cfg.max_model_len)]
    elif cfg.topology == "chunked":
        wargs += ["--max-num-batched-tokens", str(cfg.token_budget)]
    sim_vals = {"ttft_p50_s": sim.summary.ttft["p50"], "ttft_p90_s": sim.summary.ttft["p90"],
                "itl_p50_s": sim.summary.itl["p50"], "itl_p90_s": sim.summary.itl["p90"]}
    runs = []
    for s in args.speedups:
        con.print(f"starting {n_p} prefill + {n_d} decode workers (x{s}); "
                  f"replaying {len(trace.requests)} requests over {trace.duration_s / s:.0f} s wall")
        with ExitStack() as stack:
            workers = [stack.enter_context(start_worker("mock", args=wargs, speedup=s, profile=args.profile))
                       for _ in range(n_p + n_d)]
            router, url = start_router([w.url for w in workers[:n_p]], [w.url for w in workers[n_p:]], args.policy)
            stack.callback(stop, router)
            t_live = time.perf_counter()
            live = asyncio.run(replay(url, trace, s, seed=1))
            t_live = time.perf_counter() - t_live
        live_ttft = [t * s for t, _ in live if t == t]
        live_itl = [g * s for _, gaps in live for g in gaps]
        live_vals = {"ttft_p50_s": percentile(live_ttft, 50), "ttft_p90_s": percentile(live_ttft, 90),
                     "itl_p50_s": percentile(live_itl, 50), "itl_p90_s": percentile(live_itl, 90)}
        run = {
            "speedup": s, "live_completed": len(live_ttft), "live_wall_s": round(t_live, 1),
            "load_average_1m": round(os.getloadavg()[0], 2),
            "metrics": {k: {"live": round(live_vals[k], 6) if live_vals[k] is not None else None, "sim": sim_vals[k],
                            "rel_diff": round((sim_vals[k] - live_vals[k]) / live_vals[k], 4)
                            if live_vals[k] and sim_vals[k] is not None else None}
                        for k in sim_vals},
        }
        con.print_json(json.dumps(run))
        runs.append(run)
    report = {
        "trace": args.trace.name, "requests": len(trace.requests), "rate_scale": args.rate_scale,
        "layout": cfg.label, "profile": args.profile, "policy": args.policy,
        "kv_link_gbps": args.kv_link_gbps, "sim_wall_s": round(t_sim, 2), "sim": sim_vals, "runs": runs,
    }
    out = HERE / "results" / f"fidelity_{cfg.label.replace(':', '-')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    con.print(f"wrote {out}")


if __name__ == "__main__":
    main()
