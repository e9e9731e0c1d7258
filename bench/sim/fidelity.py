"""Fidelity: the simulator vs live mock workers behind the real router, same trace.

    .venv/bin/python bench/sim/fidelity.py --requests 150                      # 1P1D, speed-ups 2, 1, 0.5
    .venv/bin/python bench/sim/fidelity.py --requests 150 --layout chunked:2

Live side: ``pdserve worker`` processes (``--mock-speedup S``) and ``pdserve router``
on loopback; a client replays the trace's arrivals (divided by S) as streaming
completions with exact prompt token ids (random, so no prefix sharing, or from
Mooncake hash ids via ``pdserve.sim.prompts.token_ids``) and ``max_tokens`` = the
trace's output length (``ignore_eos``). TTFT counts from the client's actual send;
TTFT and inter-token gaps are multiplied by S to get model seconds.

Simulator side, same layout, profile, policy and link, in four variants:

* ``trace``: the trace's arrival times, no host time (what the simulator predicts
  from the trace alone);
* ``sent``: the live client's actual send times (x S), no host time;
* ``sent+host``: plus the host terms ``ingress_s``, ``pd_handoff_s`` and
  ``step_host_s`` measured apart from this trace by hop_probe.py (isolated requests,
  at the same speed-up; probed here unless ``--probe-json``), x S: host time is
  wall time, so it grows in model time with the speed-up (``sent+host+scrape``:
  also routing on views as stale as the live router's /metrics scrape, 0.5 s wall);
* ``sent+host+live_placement`` (diagnostic): also forced to the workers the live
  router chose (its ``x-pdserve-route`` header), separating placement from timing.

Reports TTFT p50/p90 and ITL p50 of each (target: within 10 %), the band that
``sent+host`` spans over replays with resampled client lateness (placement noise), and a per-request
join (placement agreement, per-request TTFT differences, requests already on the
chosen worker). Writes bench/sim/results/fidelity_<layout>.json and
fidelity_<layout>_requests.json; the worker loop-lag histograms go in as evidence
for event-loop stalls.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from rich.console import Console

import hop_probe  # type: ignore[import-not-found]
from livestack import LiveRequest, Stack, live_stack, loop_lag, replay, worker_args  # type: ignore[import-not-found]
from pdserve.router.policies import Decision, Policy, RouteRequest, WorkerView
from pdserve.sim.config import SimConfig, parse_layout
from pdserve.sim.metrics import percentile
from pdserve.sim.outcome import SimResult
from pdserve.sim.prompts import token_ids
from pdserve.sim.simulator import Simulation
from pdserve.sim.traces import default_block_size
from pdserve.sim.traces import Trace, load_trace

HERE = Path(__file__).resolve().parent
METRICS = ("ttft_p50_s", "ttft_p90_s", "itl_p50_s", "itl_p90_s")


class FixedPlacement(Policy):
    """Routes each request where the live router put it (diagnostic only)."""

    name = "live_placement"

    def __init__(self, placement: dict[str, str], *, block_size: int) -> None:
        super().__init__(block_size=block_size)
        self.placement = placement

    def _choose(self, req: RouteRequest, workers: Sequence[WorkerView], now: float) -> Decision:
        wid = self.placement[req.request_id]
        if wid not in {w.worker_id for w in workers}:
            raise KeyError(f"request {req.request_id}: live worker {wid} is not in the simulated pool")
        return Decision(worker_id=wid, overlap_blocks=0, score=0.0, reason="live placement", policy=self.name,
                        new_prefill_tokens=req.prompt_tokens)


def simulate(trace: Trace, cfg: SimConfig, placement: dict[str, dict[str, str]] | None = None) -> SimResult:
    cfg = cfg.model_copy(update={"block_size": cfg.block_size or default_block_size(trace)})
    sim = Simulation(trace, cfg)
    for pool, table in (placement or {}).items():
        fixed = FixedPlacement(table, block_size=cfg.block_size or 16)
        sim.scheduler.policies = sim.scheduler.policies.replacing(pool, fixed)
    return sim.run()


def sent_trace(trace: Trace, live: list[LiveRequest], speedup: float) -> Trace:
    """The trace with each request arriving when the live client actually sent it (model seconds)."""
    sent = {r.index: r.sent_s * speedup for r in live}
    base = min(sent.values())
    reqs = sorted((replace(r, arrival_s=sent[r.index] - base) for r in trace.requests),
                  key=lambda r: (r.arrival_s, r.index))
    return replace(trace, requests=tuple(reqs))


def jitter_band(trace: Trace, live: list[LiveRequest], speedup: float, cfg: SimConfig,
                runs: int) -> dict[str, dict[str, float]]:
    """How much the simulated metrics move when each request is sent as late as a random
    other one was in the live run: ``runs`` replays of the scheduled arrivals plus a
    lateness drawn (seeded) from the live client's own. Placement under least_loaded is
    sensitive to sub-millisecond timing, so a single run's TTFT p90 over a few hundred
    requests carries this much noise; a live value inside the band is as close as one
    replay can show."""
    late = [max(0.0, r.sent_s - r.scheduled_s) * speedup for r in live]
    vals: dict[str, list[float]] = {k: [] for k in METRICS}
    for seed in range(runs):
        rng = random.Random(seed)
        reqs = sorted((replace(r, arrival_s=r.arrival_s + rng.choice(late)) for r in trace.requests),
                      key=lambda r: (r.arrival_s, r.index))
        for k, v in sim_values(simulate(replace(trace, requests=tuple(reqs)), cfg)).items():
            if v is not None:
                vals[k].append(v)
    return {k: {"min": round(min(v), 6), "median": round(statistics.median(v), 6), "max": round(max(v), 6)}
            for k, v in vals.items() if v}


def sim_values(res: SimResult) -> dict[str, float | None]:
    s = res.summary
    return {"ttft_p50_s": s.ttft["p50"], "ttft_p90_s": s.ttft["p90"], "itl_p50_s": s.itl["p50"],
            "itl_p90_s": s.itl["p90"]}


def live_values(live: list[LiveRequest], speedup: float) -> dict[str, float | None]:
    ttft = [r.ttft_s * speedup for r in live if r.ttft_s == r.ttft_s]
    itl = [g * speedup for r in live for g in r.gaps]
    return {"ttft_p50_s": percentile(ttft, 50), "ttft_p90_s": percentile(ttft, 90),
            "itl_p50_s": percentile(itl, 50), "itl_p90_s": percentile(itl, 90)}


def compare(live: dict[str, float | None], sim: dict[str, float | None]) -> dict[str, dict[str, float | None]]:
    out = {}
    for k in METRICS:
        lv, sv = live[k], sim[k]
        out[k] = {"live": None if lv is None else round(lv, 6), "sim": None if sv is None else round(sv, 6),
                  "rel_diff": round((sv - lv) / lv, 4) if lv and sv is not None else None}
    return out


def _on_worker_at(t: float, spans: list[tuple[float, float, float]]) -> tuple[int, int]:
    """(requests in flight, of which still prefilling) among (start, first token, end) spans at time t."""
    busy = [s for s in spans if s[0] < t < s[2]]
    return len(busy), sum(1 for s in busy if t < s[1])


def join(live: list[LiveRequest], sims: dict[str, SimResult], stack: Stack, disagg: bool, speedup: float,
         trace: Trace) -> tuple[list[dict[str, object]], dict[str, object]]:
    """Per-request rows (model ms) and a summary: where the two disagree and why."""
    main, forced = sims["sent+host"], sims["sent+host+live_placement"]
    recs = {r.index: r for r in main.records}
    frecs = {r.index: r for r in forced.records}
    req = {r.index: r for r in trace.requests}
    key = "prefill" if disagg else "decode"

    def live_worker(r: LiveRequest) -> str:
        url = getattr(r, f"{key}_worker")
        return stack.sim_id(url, key, disagg) if url else "?"

    live_spans: dict[str, list[tuple[float, float, float]]] = {}
    for r in live:
        if r.token_s:
            live_spans.setdefault(live_worker(r), []).append((r.sent_s, r.first_token_s, r.token_s[-1]))
    sim_spans: dict[str, list[tuple[float, float, float]]] = {}
    for s in main.records:
        sim_spans.setdefault(s.prefill_instance if disagg else s.decode_instance, []).append(
            (s.arrival_s, s.first_token_s, s.finish_s))
    rows: list[dict[str, object]] = []
    for r in sorted(live, key=lambda x: x.index):
        s, f = recs[r.index], frecs[r.index]
        lw, sw = live_worker(r), (s.prefill_instance if disagg else s.decode_instance)
        l_ttft = r.ttft_s * speedup * 1000
        lb, lp = _on_worker_at(r.sent_s, [x for x in live_spans.get(lw, []) if x[0] != r.sent_s])
        sb, sp = _on_worker_at(s.arrival_s, [x for x in sim_spans.get(sw, []) if x[0] != s.arrival_s])
        rows.append({
            "index": r.index, "input_tokens": req[r.index].input_tokens, "output_tokens": req[r.index].output_tokens,
            "lateness_ms": round((r.sent_s - r.scheduled_s) * speedup * 1000, 2),
            "live_worker": lw, "sim_worker": sw,
            "live_ttft_ms": round(l_ttft, 2), "sim_ttft_ms": round(s.ttft * 1000, 2),
            "sim_live_placement_ttft_ms": round(f.ttft * 1000, 2),
            "diff_ms": round(s.ttft * 1000 - l_ttft, 2), "diff_live_placement_ms": round(f.ttft * 1000 - l_ttft, 2),
            "live_on_worker": lb, "live_prefilling_on_worker": lp, "sim_on_worker": sb, "sim_prefilling_on_worker": sp,
        })
    diffs = sorted(float(x["diff_ms"]) for x in rows)  # type: ignore[arg-type]
    fdiffs = sorted(float(x["diff_live_placement_ms"]) for x in rows)  # type: ignore[arg-type]
    late = sorted(float(x["lateness_ms"]) for x in rows)  # type: ignore[arg-type]
    same = [x for x in rows if x["live_worker"] == x["sim_worker"]]
    worst = sorted(rows, key=lambda x: float(x["diff_ms"]))[:8]  # type: ignore[arg-type]
    summary: dict[str, object] = {
        "placement_agreement": round(len(same) / len(rows), 3) if rows else None,
        "ttft_diff_ms": {"p10": percentile(diffs, 10), "p50": percentile(diffs, 50), "p90": percentile(diffs, 90)},
        "ttft_diff_live_placement_ms": {"p10": percentile(fdiffs, 10), "p50": percentile(fdiffs, 50),
                                        "p90": percentile(fdiffs, 90)},
        "client_lateness_model_ms": {"p50": percentile(late, 50), "p99": percentile(late, 99), "max": late[-1]},
        "sim_lowest_vs_live": [{k: x[k] for k in ("index", "input_tokens", "live_worker", "sim_worker", "live_ttft_ms",
                                                   "sim_ttft_ms", "sim_live_placement_ttft_ms", "live_on_worker",
                                                   "live_prefilling_on_worker", "sim_on_worker",
                                                   "sim_prefilling_on_worker")} for x in worst],
    }
    return rows, summary


@contextmanager
def cpu_hogs(n: int) -> Iterator[None]:
    """``n`` busy-loop processes (on this process's CPUs) for the duration of the block."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


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
    ap.add_argument("--probe-json", type=Path, default=None,
                    help="host terms from an earlier hop_probe.py run instead of probing now")
    ap.add_argument("--tag", default="", help="suffix for the result file names")
    ap.add_argument("--out-dir", type=Path, default=HERE / "results", help="folder for the result files")
    ap.add_argument("--scrape-interval-s", type=float, default=0.5,
                    help="the live router's /metrics scrape period (its default); the host-time variants "
                    "simulate routing on views this stale (x S in model time)")
    ap.add_argument("--band-runs", type=int, default=20,
                    help="simulations with resampled client lateness, for the noise band of the metrics")
    ap.add_argument("--pin-core", type=int, default=None,
                    help="run the live stack (this client, the router, the workers) on this one CPU core")
    ap.add_argument("--cpu-hogs", type=int, default=0,
                    help="busy-loop processes on --pin-core during each live replay: a loaded host, on purpose")
    args = ap.parse_args()
    con = Console()
    trace = load_trace(args.trace).head(args.requests).scaled(args.rate_scale)
    cfg = SimConfig(**parse_layout(args.layout), profile=args.profile, policy=args.policy,
                    decode_policy="least_loaded", kv_link_gbps=args.kv_link_gbps)
    disagg = cfg.topology == "disagg"
    probes: dict[str, dict[str, object]] = {}
    if args.probe_json:
        probes = json.loads(args.probe_json.read_text())["by_speedup"]
    base = simulate(trace, cfg)
    n_p = cfg.prefill_instances if disagg else 0
    n_d = cfg.decode_instances if disagg else cfg.instances
    wargs = worker_args(cfg.topology, cfg.token_budget, cfg.max_model_len, args.kv_link_gbps)
    rng = random.Random(1)
    prompts = [token_ids(r, trace.hash_block_tokens) if r.hash_ids
               else [rng.randrange(1000, 30000) for _ in range(r.input_tokens)] for r in trace.requests]
    if args.cpu_hogs and args.pin_core is None:
        ap.error("--cpu-hogs needs --pin-core (the hogs must not take the other engineers' cores)")
    if args.pin_core is not None:
        os.sched_setaffinity(0, {args.pin_core})  # the workers and router started below inherit it
    runs, per_request = [], {}
    for s in args.speedups:
        con.print(f"{cfg.label} x{s}: {n_p} prefill + {n_d} decode workers; "
                  f"{len(trace.requests)} requests over {trace.duration_s / s:.0f} s wall")
        schedule = [(r.index, r.arrival_s / s, p, r.output_tokens) for r, p in zip(trace.requests, prompts)]
        with live_stack(n_p, n_d, wargs, s, args.profile, args.policy) as stack:
            with cpu_hogs(args.cpu_hogs):
                t_live = time.perf_counter()
                live = asyncio.run(replay(stack.url, schedule))
                t_live = time.perf_counter() - t_live
                load = round(os.getloadavg()[0], 2)
            lag = loop_lag(stack.worker_urls)
        failed = [r for r in live if r.error or not r.token_s]
        ok = [r for r in live if not (r.error or not r.token_s)]
        strace = sent_trace(trace, live, s)
        if str(s) not in probes:
            if args.probe_json:
                raise SystemExit(f"{args.probe_json} has no probe at speed-up {s}; run hop_probe.py --speedups {s}")
            con.print(f"probing host time at x{s} (hop_probe.py) ...")
            probes[str(s)] = hop_probe.measure(load_trace(args.trace), 20, s, args.profile, args.kv_link_gbps,
                                               token_budget=cfg.token_budget, con=con)
        probe = probes[str(s)]
        ingress_w, handoff_w = float(probe["ingress_wall_s"]), float(probe["pd_handoff_wall_s"])  # type: ignore[arg-type]
        # Host work cannot make a step shorter than its modelled GPU time: a negative median (timer
        # jitter: a gap after a late wake-up is short) means no measurable per-step host time.
        step_w = max(0.0, float(probe["step_host_wall_s"]))  # type: ignore[arg-type]
        host = cfg.model_copy(update={"ingress_s": ingress_w * s, "pd_handoff_s": handoff_w * s if disagg else 0.0,
                                      "step_host_s": step_w * s})
        pool = "prefill" if disagg else "colocated"
        key = "prefill" if disagg else "decode"
        placement = {pool: {str(r.index): stack.sim_id(getattr(r, f"{key}_worker"), key, disagg) for r in ok}}
        if disagg:  # the decode choice too
            placement["decode"] = {str(r.index): stack.sim_id(r.decode_worker, "decode", True) for r in ok}
        sims = {"trace": base, "sent": simulate(strace, cfg), "sent+host": simulate(strace, host),
                "sent+host+scrape": simulate(strace, host.model_copy(
                    update={"view_refresh_s": args.scrape_interval_s * s}))}
        sims["sent+host+live_placement"] = simulate(strace, host, placement) if not failed else sims["sent+host"]
        lv = live_values(ok, s)
        band = jitter_band(trace, live, s, host, args.band_runs)
        rows, summary = join(ok, sims, stack, disagg, s, trace)
        run = {
            "speedup": s, "live_completed": len(ok), "live_failed": len(failed), "live_wall_s": round(t_live, 1),
            "load_average_1m": load, "pin_core": args.pin_core, "cpu_hogs": args.cpu_hogs,
            "host_terms_model_s": {"ingress_s": round(host.ingress_s, 6), "pd_handoff_s": round(host.pd_handoff_s, 6),
                                   "step_host_s": round(host.step_host_s, 6),
                                   "view_refresh_s": round(host.view_refresh_s, 6)},
            "variants": {name: compare(lv, sim_values(res)) for name, res in sims.items()},
            "sent+host_jitter_band": band,
            "per_request": summary, "worker_loop_lag": list(lag.values()),
        }
        per_request[str(s)] = rows
        con.print_json(json.dumps({k: run[k] for k in ("speedup", "load_average_1m", "live_failed",
                                                       "host_terms_model_s")}))
        for name, m in run["variants"].items():
            con.print(f"  {name:28s} " + "  ".join(
                f"{k[:-2]} {m[k]['live'] * 1e3:.1f}/{m[k]['sim'] * 1e3:.1f} ({m[k]['rel_diff']:+.1%})"
                for k in METRICS[:3] if m[k]["live"] and m[k]["sim"] is not None))
        con.print("  sent+host under resampled client jitter: " + "  ".join(
            f"{k[:-2]} {b['min'] * 1e3:.1f}..{b['max'] * 1e3:.1f}" for k, b in band.items()))
        con.print_json(json.dumps({k: v for k, v in summary.items() if k != "sim_lowest_vs_live"}))
        runs.append(run)
    report = {
        "commit": subprocess.run(["git", "-C", str(HERE), "rev-parse", "HEAD"], capture_output=True,
                                 text=True).stdout.strip(),
        "trace": args.trace.name, "requests": len(trace.requests), "rate_scale": args.rate_scale,
        "layout": cfg.label, "profile": args.profile, "policy": args.policy, "kv_link_gbps": args.kv_link_gbps,
        "host_probe": {str(r["speedup"]): probes[str(r["speedup"])] for r in runs},
        "runs": runs,
    }
    stem = f"fidelity_{cfg.label.replace(':', '-')}{args.tag}"
    out = args.out_dir / f"{stem}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    (args.out_dir / f"{stem}_requests.json").write_text(json.dumps(per_request) + "\n")
    con.print(f"wrote {out}")


if __name__ == "__main__":
    main()
