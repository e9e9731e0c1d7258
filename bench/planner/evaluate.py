#!/usr/bin/env python3
"""Evaluate the planner in the simulator against a lower bound, a hindsight best schedule
and baselines, on one trace and one model setup. Writes one JSON result and one plot.

Policies (``--policies``):

- ``planner``: ``pdserve.planner.PlannerPolicy`` at its shipped defaults through the simulator
  hook (Holt-Winters), seeing only what Prometheus would (``pdserve.sim.windows``); since session 9
  its burst reserve is the fitted burst arrival rate with the absorb gate (``planner_fit``'s rule);
  since session 15 planner_next2's parts are its defaults (cold start and link, the prefill pool's TTFT
  against a front-end profile, Holt-Winters level >= 0.5). The development variants below, bar
  planner_fit and planner_next2/4, change the planner *before* session 15 (``variants._pre15``), as
  their diagnosis files ran them;
- ``planner_constant``: the same with the last-value predictor (ablation);
- ``planner_irate``: the planner as shipped before session 9, its burst reserve the 15 s scrape
  ``irate()`` peak (``--burst-budget none``);
- ``planner_burst``: the planner reading its burst reserve from the router's burst gauge
  (``pdserve.common.burst``, 1 s resolution, ``--burst-budget``) instead of the 15 s irate peak;
- ``planner_fit``: the planner holding a burst's *arrival rate*, fitted from the router's burst
  gauge at two budgets (``--burst-budget`` 2 s and ``--burst-fit-budget`` 4 s;
  ``pdserve.planner.core.burst_fit``), with the planner's headroom, by default for every fitted
  burst (the session-7 rule: the shipped planner is the same with the absorb gate, so the two
  read apart what the gate saves; ``--burst-absorb-fraction`` sets the gate here too);
- ``planner_next``: the shipped planner with its latency correction measuring the fixed part of
  the TTFT (front ends, KV transfer, first decode step) in light-load windows and taking it off
  before the ratio (``PolicyConfig.correction_offset``; session 10, opt-in, not the default);
- ``planner_link``: the shipped planner with ``PolicyConfig.cold_start_link`` (issue 12, not the
  default): its drain term serves the arriving rate, the decode links carry the KV stream at the
  prefill pool's real speed, and decode gives up a link only with headroom (hysteresis);
- ``planner_link_path``: planner_link whose latency correction expects the TTFT's fixed path
  (``PolicyConfig.ttft_path_ms``: front ends, hand-off, first decode step, from the simulator's
  engine numbers, ``feasibility.Hardware.ttft_path_s``) and the KV transfer on top of the prefill;
- ``planner_next2``: planner_link whose latency correction reads the prefill engines' own TTFT mean
  (``PolicyConfig.correction_pool_ttft``; the simulator's window has it as the prefill pods' TTFT histogram
  would) against a profile whose TTFT holds the engine's front end (``derive_profile(include_frontend=True)``),
  and whose Holt-Winters level smoothing is at least ``NEXT2_MIN_LEVEL`` (``PolicyConfig.min_level_smoothing``);
  session 11's candidate, the shipped defaults since session 15 (so planner and planner_next2 run the same);
- ``planner_young`` / ``planner_next4``: the planner / planner_next2 with ``PolicyConfig.arriving_young = "seen"``
  (issue 12, session 13, opt-in): while the rate window is young, counted from the first arrival, the drain's
  arriving rate is the window's tokens over the traffic seen, not the router's burst gauge;
- ``reactive``: HPA-style thresholds (``baselines.ReactiveAutoscaler``) at the given
  targets; ``--reactive-sweep`` also runs the grid and records every point;
- ``static``: the smallest fixed (P, D) that meets 99 % over the whole window (search);
- ``best``: the hindsight best schedule found (``references.BestSchedule``), replayed
  end to end with the start-up delay, then repaired.

The lower bound (``references.lower_bound``) is always computed. Run with ``--help``;
long runs under ``flock /tmp/pdserve-bench.lock``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from baselines import ReactiveAutoscaler, smallest_static  # noqa: E402
from bursty import BurstySpec, bursty_trace, with_history  # noqa: E402
from feasibility import TraceFeasibility  # noqa: E402
from references import Setup, lower_bound  # noqa: E402
from replays import CAUSAL, REFERENCE, best_schedule, causal_reference, run_order, run_policy, trace_feasibility  # noqa: E402
from resultmeta import Run, write_result  # noqa: E402
from variants import BY_NAME, DYNAMO_VARIANTS, PLOTTED, Flags, Knobs, unknown_policy  # noqa: E402

from pdserve.planner.core.policy import PlannerPolicy, PolicyConfig  # noqa: E402
from pdserve.planner.core.profile import CapacityProfile  # noqa: E402
from pdserve.planner.core.profile_model import derive_profile  # noqa: E402
from pdserve.planner.core.sim_hook import PlannerAutoscaler  # noqa: E402
from pdserve.router.core.spec import RoutingSpec  # noqa: E402
from pdserve.router.shell.config import add_routing_args, routing_flags, routing_from_args  # noqa: E402
from pdserve.sim.metrics import Slo  # noqa: E402
from pdserve.sim.traces import Trace, from_rows, load_trace  # noqa: E402

SCHEMA = "pdserve.planner-eval/2"


def window_of(trace: Trace, start_s: float, dur_s: float | None) -> Trace:
    reqs = [r for r in trace.requests if r.arrival_s >= start_s and (dur_s is None or r.arrival_s < start_s + dur_s)]
    if not reqs:
        raise SystemExit(f"no requests in [{start_s}, {start_s}+{dur_s}) s")
    t = from_rows([(r.arrival_s, r.input_tokens, r.output_tokens, r.hash_ids) for r in reqs],
                  format=trace.format, source=trace.source, sha256=trace.sha256)
    return Trace(requests=t.requests, format=t.format, source=t.source, sha256=t.sha256,
                 hash_block_tokens=trace.hash_block_tokens)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--trace", type=Path, help="Azure CSV or Mooncake JSONL trace")
    src.add_argument("--bursty", type=int, metavar="SEED", help="synthetic bursty trace (bench/planner/bursty.py)")
    ap.add_argument("--trace-id", help="name in the result (default: from the source)")
    ap.add_argument("--tuned-on", action="store_true", help="record that this trace is in the tuning set")
    ap.add_argument("--rate-scale", type=float, default=1.0)
    ap.add_argument("--start", type=float, default=0.0, help="replay arrivals from this time (after scaling), s")
    ap.add_argument("--duration", type=float, default=600.0, help="replay this many seconds of arrivals (0: all)")
    ap.add_argument("--limit", type=int, help="only the first N requests of the window (quick runs)")
    ap.add_argument("--model-profile", default="llama-3.1-8b-h100")
    ap.add_argument("--max-replicas", type=int, default=16, help="per pool")
    ap.add_argument("--kv-link-gbps", type=float, default=100.0)
    ap.add_argument("--interval", type=float, default=PolicyConfig.interval_s)
    ap.add_argument("--startup", type=float, default=60.0)
    ap.add_argument("--ttft-ms", type=float, default=2000.0)
    ap.add_argument("--itl-ms", type=float, default=50.0, help="TPOT objective, ms")
    ap.add_argument("--warmup", type=float, help="attainment also reported for arrivals after this, s (default 120; "
                    "with --history 0: the warm-up is the history)")
    ap.add_argument("--history", type=float, default=0.0,
                    help="first replay this many seconds before the scored window, as a planner in service has "
                         "seen traffic before: bursty, the same generator's own seed stream (bursty.with_history); "
                         "a trace file, its own arrivals before --start. Every policy and reference replays it, "
                         "and attainment after warm-up, the references' targets and GPU-hours count the scored "
                         "window only")
    ap.add_argument("--target-utilization", type=float, default=PolicyConfig.target_utilization)
    ap.add_argument("--stabilization", type=float, default=PolicyConfig.scale_down_stabilization_s,
                    help="planner and reactive scale-down stabilisation, s (default: the shipped one)")
    ap.add_argument("--peak-window", type=float, default=PolicyConfig.peak_window_s,
                    help="planner: keep capacity for the short-window peak this long, s")
    ap.add_argument("--burst-budget", type=float, default=0.0,
                    help="planner_burst: which series of the router's burst gauge is its peak (budget, s)")
    ap.add_argument("--burst-fit-budget", type=float, default=4.0,
                    help="planner_fit: the second budget of the gauge (with --burst-budget, or 2 s where that is 0)")
    ap.add_argument("--burst-absorb-fraction", type=float, default=-1.0,
                    help="planner_fit: no reserve for a fitted burst that the steady plan's prefill pool drains "
                         "within this fraction of the TTFT SLO (PolicyConfig.burst_absorb_fraction; default: "
                         "negative, none: every fitted burst gets its reserve, the session-7 rule; the shipped "
                         "planner runs the gate)")
    ap.add_argument("--burst-sweep", nargs="*", type=float, metavar="BUDGET_S",
                    help="also run planner_burst at these budgets (tuning runs)")
    ap.add_argument("--planner-sweep", nargs="*", type=float, metavar="PEAK_WINDOW_S",
                    help="also run the planner at these peak windows (tuning runs)")
    ap.add_argument("--reactive-prefill-target", type=float, default=2.0)
    ap.add_argument("--reactive-kv-target", type=float, default=0.5)
    ap.add_argument("--reactive-sweep", action="store_true", help="also run the reactive grid")
    ap.add_argument("--repairs", type=int, default=8, help="best schedule: repair rounds (each one end-to-end replay)")
    ap.add_argument("--policies", nargs="*", default=["best", "static", "reactive", "planner", "planner_constant", "planner_fit"])
    ap.add_argument("--merge", action="store_true",
                    help="add these policies' results to the existing --out file (same trace and setup)")
    ap.add_argument("--dynamo-python", type=Path,
                    help="python of an environment with Dynamo 1.6.1 (README): also run its SLA planner (policy 'dynamo')")
    ap.add_argument("--out", type=Path, required=True, help="result JSON path (a PNG is written next to it)")
    # The router's flags (pdserve router / pdserve sim), applied in every replay of every policy;
    # the KV block size is the engines' (the simulator sets it).
    add_routing_args(ap, block_size=False, admission=False)
    ap.set_defaults(block_size=None)
    return ap


def load_run(args: argparse.Namespace) -> tuple[Trace, str, Setup, TraceFeasibility, int, float]:
    """The run's trace window, its id, the setup, the requests' feasibility, the history's requests and the time
    its scored window starts, from the flags (sets ``args.warmup``); also peer_sweep.py's, so that its replays
    see exactly this run."""
    n_hist = 0
    if args.trace is not None:
        full = load_trace(args.trace).scaled(args.rate_scale)
        trace_id = args.trace_id or f"{args.trace.stem}_x{args.rate_scale:g}"
        if args.history:
            # The trace's own arrivals before --start, replayed and not scored: a window in the middle of the
            # trace is met by a planner in service, with its pools sized and its metric windows full.
            if args.history > args.start:
                raise SystemExit(f"--history {args.history:g} s reaches before the trace's start "
                                 f"(--start {args.start:g} s)")
            lo = args.start - args.history
            a0 = next((r.arrival_s for r in full.requests if r.arrival_s >= lo), args.start)
            full = window_of(full, lo, None)  # its times count from its first arrival, a0
            n_hist = sum(r.arrival_s + a0 < args.start for r in full.requests)
            if not n_hist or n_hist == len(full.requests):
                raise SystemExit(f"--history {args.history:g} s before --start {args.start:g} s holds no request, "
                                 "or nothing follows it")
    elif args.history:
        full, n_hist = with_history(args.bursty, args.history, BurstySpec())
        full = full.scaled(args.rate_scale)
        trace_id = args.trace_id or f"bursty_seed{args.bursty}_h{args.history:g}"
    else:
        full = bursty_trace(args.bursty, BurstySpec()).scaled(args.rate_scale)
        trace_id = args.trace_id or f"bursty_seed{args.bursty}"
    if n_hist:
        # The window is the history plus --duration of the seed's trace (times from the first history arrival).
        hist_end = full.requests[n_hist].arrival_s
        trace = window_of(full, 0.0, hist_end + args.duration if args.duration else None).head(args.limit)
        args.warmup = hist_end + (args.warmup or 0.0)
    else:
        hist_end = 0.0
        trace = window_of(full, args.start, args.duration or None).head(args.limit)
        args.warmup = 120.0 if args.warmup is None else args.warmup
    profile = derive_profile(args.model_profile, kv_link_gbps=args.kv_link_gbps)
    slo = Slo(ttft_s=args.ttft_ms / 1000, tpot_s=args.itl_ms / 1000, target=0.99)
    s = Setup(args.model_profile, profile, profile.prefill.tensor_parallel_size, profile.decode.tensor_parallel_size,
              args.max_replicas, args.max_replicas, slo, args.interval, args.startup, args.kv_link_gbps,
              routing_from_args(args), gpu_seconds_from_s=hist_end)
    feas = replace(trace_feasibility(trace, s, args.warmup), scored_from_s=hist_end)
    return trace, trace_id, s, feas, n_hist, hist_end


def planner_config(args: argparse.Namespace, s: Setup, k: Knobs, f: Flags) -> tuple[PolicyConfig, CapacityProfile]:
    """The planner a variant with the knobs ``k`` replays at the run's flags (``settings_sweep.py`` builds the same)."""
    cfg = PolicyConfig(ttft_slo_ms=args.ttft_ms, itl_slo_ms=args.itl_ms, interval_s=args.interval,
                       predictor=k.predictor, prefill_max=args.max_replicas, decode_max=args.max_replicas,
                       prefill_tp=s.tp_p, decode_tp=s.tp_d, scale_down_stabilization_s=args.stabilization,
                       target_utilization=args.target_utilization, startup_s=args.startup,
                       peak_window_s=f.peak_window_s, burst_budget_s=k.burst_budget_s,
                       burst_fit_budget_s=k.burst_fit_budget_s, burst_absorb_fraction=k.burst_absorb_fraction,
                       correction_offset=k.correction_offset, cold_start_link=k.cold_start_link,
                       ttft_path_ms=k.ttft_path_ms, correction_pool_ttft=k.correction_pool_ttft,
                       min_level_smoothing=k.min_level_smoothing, arriving_young=k.arriving_young,
                       burst_level_ratio=k.burst_level_ratio, prefill_utilization=k.prefill_utilization,
                       hold_prefill_on_rise=k.hold_prefill_on_rise,
                       prefill_utilization_min_replicas=k.prefill_utilization_min_replicas,
                       burst_miss_budget=k.burst_miss_budget, lone_burst_s=k.lone_burst_s)
    prof = (derive_profile(args.model_profile, kv_link_gbps=args.kv_link_gbps, include_frontend=True)
            if k.profile_frontend else s.profile)
    return cfg, prof


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    run = Run(argv if argv is None else [sys.argv[0], *argv])
    trace, trace_id, s, feas, n_hist, hist_end = load_run(args)
    bound = lower_bound(trace, s)  # per interval over the whole replay: where the best schedule's search starts
    scored_bound = lower_bound(window_of(trace, hist_end, None), s) if n_hist else bound
    results: dict[str, dict] = {}
    previous: dict = {}
    if args.merge and args.out.exists():
        import json

        previous = json.loads(args.out.read_text())
        if previous["trace"]["sha256"] != trace.sha256 or previous["trace"]["requests"] != len(trace.requests):
            raise SystemExit(f"--merge: {args.out} holds another trace")
        # Files from before the routing flags were recorded ran the router's defaults.
        if previous["setup"].get("routing_flags", routing_flags(RoutingSpec())) != routing_flags(s.routing):
            raise SystemExit(f"--merge: {args.out} was run with other routing flags")
        results = previous["results"]
        if all(v == "feasible" for v in feas.verdicts):
            # Every request is feasible: attainment among the feasible ones *is* the attainment.
            for r in results.values():
                if "attainment_feasible" not in r:
                    r |= {"attainment_feasible": r["attainment"],
                          "attainment_feasible_after_warmup": r["attainment_after_warmup"]}
    log = lambda m: print(f"[{trace_id} {args.model_profile}] {m}", flush=True)  # noqa: E731

    def replay(k: Knobs, f: Flags) -> dict:
        """A planner with the knobs ``k`` at the flags ``f``, replayed end to end."""
        cfg, prof = planner_config(args, s, k, f)
        return run_policy(trace, s, PlannerAutoscaler(PlannerPolicy(cfg, prof)), (1, 1), args.warmup, feas=feas)[0]

    flags = Flags.of(args, s)

    # What the static search must meet 99 % of: the feasible requests of the scored window (history replayed, not scored).
    feasible = feas.scored_feasible()
    for name in sorted(args.policies, key=run_order):
        ref = REFERENCE.fullmatch(name)
        cap = int(ref.group(2)) if ref and ref.group(2) else args.max_replicas
        s_ref = replace(s, max_p=cap, max_d=cap)
        if ref and ref.group(1) == "best":
            static = results.get("static" if cap == args.max_replicas else f"static_cap{cap}")
            results[name] = best_schedule(trace, s_ref, bound, feas, args.warmup, args.repairs, log, static)
        elif ref:
            start = (max(1, round(max(p for p, _ in bound["per_interval"]))),
                     max(1, round(max(d for _, d in bound["per_interval"]))))
            size, sims = smallest_static(trace, s_ref, start, feasible=feasible)
            out, _ = run_policy(trace, s_ref, None, size, args.warmup, startup=0.0, feas=feas)
            results[name] = out | {"size": list(size), "search_sims": sims, "max_replicas": cap}
        elif name in CAUSAL:
            if "best" not in results:
                raise SystemExit(f"policy {name!r} needs 'best' (its per-interval sizes) in the same run or the --merge file")
            results[name] = causal_reference(trace, s, results["best"], feas, args.warmup, log, lag=CAUSAL[name])
        elif name == "reactive":
            grid = [(args.reactive_prefill_target, args.reactive_kv_target)]
            if args.reactive_sweep:
                grid += [(pt, kt) for pt in (1.0, 2.0, 4.0) for kt in (0.3, 0.5, 0.7) if (pt, kt) != grid[0]]
            sweep = []
            for pt, kt in grid:
                sc = ReactiveAutoscaler(args.interval, args.max_replicas, args.max_replicas, pt, kt, args.stabilization)
                out, _ = run_policy(trace, s, sc, (1, 1), args.warmup, feas=feas)
                sweep.append({"prefill_target": pt, "decode_kv_target": kt, "attainment": out["attainment"],
                              "attainment_after_warmup": out["attainment_after_warmup"], "gpu_hours": out["gpu_hours"]})
                if (pt, kt) == grid[0]:
                    results["reactive"] = out | {"params": {"prefill_target": pt, "decode_kv_target": kt}}
            if args.reactive_sweep:
                results["reactive"]["sweep"] = sweep
        elif name in BY_NAME:
            v = BY_NAME[name]
            knobs = v.knobs(flags)
            out = replay(knobs, flags)
            results[name] = out | {"params": v.params(flags, knobs)}
            if v.sweep and getattr(args, v.sweep.option):
                here = getattr(flags, v.sweep.over)
                sweep = []
                for x in getattr(args, v.sweep.option):
                    at = v.sweep.at(flags, x)
                    o = out if x == here else replay(v.knobs(at), at)
                    sweep.append({v.sweep.over: x, "attainment": o["attainment"],
                                  "attainment_after_warmup": o["attainment_after_warmup"], "gpu_hours": o["gpu_hours"]})
                results[name]["sweep"] = sweep
        elif name in DYNAMO_VARIANTS:
            if args.dynamo_python is None:
                raise SystemExit(f"policy {name!r} is Dynamo's planner: it needs --dynamo-python")
            v = DYNAMO_VARIANTS[name]
            results[name] = run_dynamo(args.dynamo_python, trace, s, args.max_replicas, args.warmup, args.out, feas,
                                       hist_end, v.planner, v.router_mode) | {"variant": v.what}
        else:
            raise SystemExit(unknown_policy(name))
        r = results[name]
        log(f"{name}: {r['attainment']:.4f} (after warm-up {r['attainment_after_warmup']}) at {r['gpu_hours']:.2f} GPU-h"
            f" in {r.get('sim_wall_s', '-')} s")

    # Dynamo's planner as it ships, in every run given its python. A --merge keeps the row the file has: it adds the
    # policies named, and Dynamo's replay is not always the same twice (results/dynamo_repeat/, Mooncake).
    if args.dynamo_python is not None and not (previous and "dynamo" in results):
        results["dynamo"] = run_dynamo(args.dynamo_python, trace, s, args.max_replicas, args.warmup, args.out, feas,
                                       hist_end)
        r = results["dynamo"]
        log(f"dynamo: {r['attainment']:.4f} (after warm-up {r['attainment_after_warmup']}) at {r['gpu_hours']:.2f} GPU-h")
    if results.get("best", {}).get("gpu_hours"):
        for r in results.values():
            r["gpu_hours_vs_best"] = r["gpu_hours"] / results["best"]["gpu_hours"]
    for r in results.values():
        r["gpu_hours_vs_lower_bound"] = r["gpu_hours"] / scored_bound["gpu_hours"]
    doc = {
        "schema": SCHEMA,
        "trace": {"id": trace_id, "source": trace.source, "sha256": trace.sha256, "rate_scale": args.rate_scale,
                  "window_s": [args.start, args.start + (args.duration or trace.duration_s)],
                  **({"history": {"seconds": args.history, "requests": n_hist, "scored_from_s": round(hist_end, 3),
                                  "what": ("the trace's own arrivals before the window replayed first"
                                           if args.trace is not None else
                                           "the same generator's own seed stream replayed first (bursty.with_history)")
                                          + "; attainment after warm-up, the references' 99 % targets, GPU-hours and "
                                          "the lower bound count only the window after it"}} if n_hist else {}),
                  "requests": len(trace.requests), "tuned_on": args.tuned_on,
                  "mean_rate": len(trace.requests) / max(trace.duration_s, 1e-9),
                  "prompt_tokens_per_s": sum(r.input_tokens for r in trace.requests) / max(trace.duration_s, 1e-9)},
        "setup": {"model_profile": args.model_profile, "tp": {"prefill": s.tp_p, "decode": s.tp_d},
                  "max_replicas": args.max_replicas, "kv_link_gbps": args.kv_link_gbps,
                  "slo": {"ttft_ms": args.ttft_ms, "tpot_ms": args.itl_ms, "target": 0.99},
                  "interval_s": args.interval, "startup_s": args.startup, "warmup_s": args.warmup,
                  "routing_flags": routing_flags(s.routing),
                  "planner": {"target_utilization": args.target_utilization, "stabilization_s": args.stabilization,
                              "peak_window_s": args.peak_window}},
        "lower_bound": {k: v for k, v in scored_bound.items() if k != "per_interval"},
        "feasibility": feas.summary() | {"method": "each request alone on idle warm replicas, best-case prefix hits "
                                                  "(bench/planner/feasibility.py)"},
        "results": results,
    }
    if previous:
        doc["trace"]["tuned_on"] = previous["trace"]["tuned_on"] or args.tuned_on
        doc["earlier_runs"] = previous.get("earlier_runs", []) + [previous["meta"]]
    write_result(args.out, doc, run)
    plot(args.out.with_suffix(".png"), trace, s, results, trace_id)
    print(summary_line(doc))
    return 0


def run_dynamo(python: Path, trace: Trace, s: Setup, max_replicas: int, warmup_s: float, out: Path,
               feas: TraceFeasibility, paid_from_s: float = 0.0, planner: dict | None = None,
               router_mode: str = "round_robin") -> dict:
    """Dynamo's SLA planner in its offline replay (``dynamo_peer.py``), scored like ours; ``planner``:
    keys merged into its planner_config (peer_sweep.py's capacity knobs)."""
    import json
    import subprocess
    import tempfile

    from references import dynamo_inputs

    with tempfile.TemporaryDirectory(prefix="pdserve-dynamo-") as tmp:
        tr, cal = dynamo_inputs(trace, s, max_replicas=max_replicas, out_dir=tmp)
        res_path = Path(tmp) / "dynamo.json"
        # absolute() (not resolve()): the run happens in tmp, and a venv python must keep its own path
        # The mocker's prefill matched to pdserve's at this trace's mean prompt: their prefill times are not
        # proportional (matched at 4,096 tokens, as before session 28, it prefills 1,024 tokens 1.5x slower).
        isl = round(sum(r.input_tokens for r in trace.requests) / len(trace.requests))
        proc = subprocess.run([str(python.absolute()), str(HERE / "dynamo_peer.py"), "--trace", str(tr), "--calibration",
                               str(cal), "--out", str(res_path), "--calibrate-isl", str(isl),
                               "--router-mode", router_mode,
                               *(["--planner-json", json.dumps(planner)] if planner else [])],
                              cwd=tmp, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"dynamo_peer.py failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        d = json.loads(res_path.read_text())
    return score_replay(d, trace, s, warmup_s, feas, paid_from_s) | {
        "calibration": d["calibration"], "planner_config": d["planner_config"],
        "dynamo_version": d["dynamo_version"], "bootstrap": d["planner_metadata"].get("bootstrap")}


def score_replay(d: dict, trace: Trace, s: Setup, warmup_s: float, feas: TraceFeasibility,
                 paid_from_s: float = 0.0) -> dict:
    """A replay in Dynamo's engine (``dynamo_peer.run``'s shape: per-request records, ticks with each pool's active
    and starting workers), scored like ours: a request attains when it completed within the TTFT and the TPOT SLO."""
    slo = s.slo
    n = int(trace.duration_s // s.interval_s) + 1
    ok, cnt = [0] * n, [0] * n
    good = good_warm = warm = 0
    hits = []
    for r in d["requests"]:
        arr = r["arrival_ms"] / 1000
        hit = False
        if r["status"] == "completed" and r["ttft_ms"] is not None:
            out_len = r["output_length"] or 1
            tpot = (r["e2e_ms"] - r["ttft_ms"]) / 1000 / (out_len - 1) if out_len > 1 else 0.0
            hit = r["ttft_ms"] / 1000 <= slo.ttft_s and tpot <= slo.tpot_s
        k = min(int(arr // s.interval_s), n - 1)
        cnt[k] += 1
        ok[k] += hit
        hits.append((arr, hit))
        good += hit
        if arr >= warmup_s:
            warm += 1
            good_warm += hit
    series = [(round(t["at_s"], 1), t["prefill"].get("active_count", 0) + t["prefill"].get("starting_count", 0),
               t["decode"].get("active_count", 0) + t["decode"].get("starting_count", 0))
              for t in d["ticks"] if abs(t["at_s"] / s.interval_s - round(t["at_s"] / s.interval_s)) < 1e-6]
    gpu_hours = d["gpu_hours"]
    paid: dict = {}
    if paid_from_s > 0:
        # After replayed history: its replicas (active + starting, at each tick) from the scored window on,
        # next to the same integral over the whole replay as a check against Dynamo's own total.
        ticks = [(t["at_s"], s.gpus(t["prefill"].get("active_count", 0) + t["prefill"].get("starting_count", 0),
                                    t["decode"].get("active_count", 0) + t["decode"].get("starting_count", 0)))
                 for t in d["ticks"]]
        ends = [t for t, _ in ticks[1:]] + [max(ticks[-1][0], trace.duration_s)] if ticks else []
        whole = sum(g * (e - t) for (t, g), e in zip(ticks, ends)) / 3600
        gpu_hours = sum(g * max(0.0, e - max(t, paid_from_s)) for (t, g), e in zip(ticks, ends)) / 3600
        paid = {"gpu_hours_whole_replay": d["gpu_hours"], "gpu_hours_whole_replay_from_ticks": whole}
    return {
        "attainment": good / len(d["requests"]), "attainment_after_warmup": good_warm / warm if warm else None,
        "gpu_hours": gpu_hours, **paid, "requests": len(d["requests"]),
        # Dynamo's records carry no request id: the k-th arrival of its replay is the trace's k-th.
        **feas.score([h for _, h in sorted(hits, key=lambda x: x[0])]),
        "finished": sum(r["status"] == "completed" for r in d["requests"]),
        "max_prefill": max((x[1] for x in series), default=1), "max_decode": max((x[2] for x in series), default=1),
        "sim_wall_s": d["wall_s"],
        "series": {"replicas": series, "interval_attainment": [round(o / c, 4) if c else None for o, c in zip(ok, cnt)]},
    }


def summary_line(doc: dict) -> str:
    parts = [f"{doc['trace']['id']} / {doc['setup']['model_profile']}: bound {doc['lower_bound']['gpu_hours']:.2f} GPU-h"]
    for n, r in doc["results"].items():
        parts.append(f"{n} {100 * r['attainment']:.2f} % ({100 * (r['attainment_after_warmup'] or 0):.2f} warm) "
                     f"{r['gpu_hours']:.2f} GPU-h")
    return "; ".join(parts)


def plot(path: Path, trace: Trace, s: Setup, results: dict, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = trace.requests[0].arrival_s
    n = int(trace.duration_s // s.interval_s) + 1
    tok = [0.0] * n
    for r in trace.requests:
        tok[int((r.arrival_s - t0) // s.interval_s)] += r.input_tokens / s.interval_s
    fig, axes = plt.subplots(4, 1, figsize=(10, 10), sharex=True)
    mid = [(k + 0.5) * s.interval_s / 60 for k in range(n)]
    axes[0].plot(mid, [x / 1000 for x in tok], color="black")
    axes[0].set_ylabel("prompt ktok/s")
    axes[0].set_title(f"{title}: load, replicas, attainment per {s.interval_s:g} s interval")
    for name, r in results.items():
        if name not in PLOTTED:
            continue
        pts = r["series"]["replicas"]
        xs = [p[0] / 60 for p in pts]
        axes[1].step(xs, [p[1] for p in pts], where="post", label=name)
        axes[2].step(xs, [p[2] for p in pts], where="post", label=name)
        att = r["series"]["interval_attainment"]
        axes[3].plot(mid[:len(att)], [100 * a if a is not None else None for a in att], marker=".", label=name)
    axes[1].set_ylabel("prefill replicas")
    axes[2].set_ylabel("decode replicas")
    axes[3].set_ylabel("attainment %")
    axes[3].set_ylim(0, 102)
    axes[3].set_xlabel("minutes")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
