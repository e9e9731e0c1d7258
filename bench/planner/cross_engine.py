"""The planner judged on another engine model: committed runs replayed in Dynamo 1.6.1's offline replay (its mocker),
pdserve's planner closed loop beside Dynamo's own SLA planner, and the run's schedules (best found, static, the
planner's decisions in pdserve's simulator) open loop (``dynamo_engine.py`` says how each is driven).

Runs in the peers' environment (bench/planner/README.md: ``.cache/peers-venv``, pdserve and Dynamo installed side by
side), one committed ``evaluate.py`` result file at a time: its own command (``meta.command``) rebuilds the window,
setup and feasibility exactly (``evaluate.load_run``); the mocker is calibrated to pdserve's engine numbers as for
Dynamo's planner in that file (``references.dynamo_inputs``, ``dynamo_peer.calibrate``); every replay is scored like
the file's (``evaluate.score_replay``: attainment after the file's warm-up, GPU-hours from its scored window on).
The mocker's prefill speed is matched at the window's mean prompt length (``--calibrate-isl``): its prefill time is
not proportional to pdserve's, so a match at 4,096 tokens leaves it a third or more slower at Azure conversation's
prompts. Since session 29 it is matched flat out (``--calibrate-prefill``, ``dynamo_peer.calibrate``): matched one
request alone, its batched prefill ran about one and a half times pdserve's engine flat out at those prompts, an
engine faster than the one every planner was told of (``calibration`` in each row reports the match alone and flat
out at other lengths, and the decode step at other batch sizes). Dynamo's planner is replayed here again on the same
calibration.

    .cache/peers-venv/bin/python bench/planner/cross_engine.py --traces /path/to/traces \\
        --files bench/planner/results/8b_1gpu/azure_conv_x4.json ... --out bench/planner/results/cross_engine.json

Policies: ``planner`` (pdserve's, closed loop), ``dynamo`` (Dynamo's SLA planner, as in the file), and open loop
``best``, ``static`` and ``planner_schedule`` (the planner's decisions as run in pdserve's simulator).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]
os.environ.setdefault("DYN_LOG", "warn")  # Dynamo's planner logs every tick at info

import dynamo_peer  # noqa: E402
import evaluate  # noqa: E402
import report  # noqa: E402
from dynamo_engine import EngineView, PlannerDriver, RouterView, ScheduleDriver  # noqa: E402
from recorded import recorded_argv  # noqa: E402
from references import ScheduleAutoscaler, dynamo_inputs  # noqa: E402
from resultmeta import Run, write_result  # noqa: E402
from settings_sweep import parse_set  # noqa: E402
from variants import Flags, Knobs  # noqa: E402

SCHEMA = "pdserve.planner-cross-engine/1"
POLICIES = ("planner", "dynamo", "best", "static", "planner_schedule")


def replay(cal: dict, trace_path: Path, ratios: dict, driver, initial: tuple[int, int],
           router_mode: str = "round_robin") -> dict:
    """One replay in Dynamo's engine with ``driver`` as its scaling policy, in ``dynamo_peer.run``'s shape."""
    from dynamo.replay import api

    # 1.6.1's public run_trace_replay takes a planner_config for its own planner only; its Rust loop (below) takes
    # any scaling policy with initial_tick_ms() and on_tick(), as its own planner adapter is passed.
    wall = time.perf_counter()
    execution = api._normalize_execution_model("mooncake", None)
    native = api._run_mocker_trace_replay(
        [str(trace_path)], extra_engine_args=None,
        prefill_engine_args=dynamo_peer.engine_args(cal, "prefill", ratios["speedup_ratio"], 1.0),
        decode_engine_args=dynamo_peer.engine_args(cal, "decode", 1.0, ratios["decode_speedup_ratio"]),
        router_config=None, ais_perf_config=None, num_workers=1, num_prefill_workers=initial[0],
        num_decode_workers=initial[1], replay_concurrency=None, agentic_lanes=None, replay_mode="offline",
        router_mode=router_mode, arrival_speedup_ratio=1.0, trace_block_size=cal["hash_block_tokens"],
        trace_format="mooncake", trace_shared_prefix_ratio=0.0, trace_num_prefix_groups=0, report_jsonl_path=None,
        max_sim_time_ms=None, model_name=None, execution_model=execution,
        weka_nested_timestamp_basis=None, sla_ttft_ms=cal["ttft_ms"], sla_itl_ms=cal["itl_ms"],
        capture_per_request=True, capture_planner_details=False, kv_event_lag_ms=None, scaling_policy=driver)
    rep = api._materialize_offline_report(native, planner=None, execution_model=execution)
    return {"wall_s": round(time.perf_counter() - wall, 1), "gpu_hours": rep.summary.get("gpu_hours"),
            "requests": [{"arrival_ms": r["arrival_time_ms"], "ttft_ms": r.get("ttft_ms"),
                          "e2e_ms": r.get("e2e_latency_ms"), "output_length": r.get("output_length"),
                          "status": r.get("terminal_status")} for r in rep.per_request],
            "ticks": driver.ticks}


def schedule_of(name: str, res: dict, s, interval_s: float) -> tuple[list[tuple[float, int, int]], tuple[int, int]]:
    """A committed policy's per-tick sizes (times from the first arrival) and the sizes it started at."""
    key = "planner" if name == "planner_schedule" else name
    r = res[key]
    steps = [(float(t), int(p), int(d)) for t, p, d in r["series"]["replicas"]]
    if name == "static":
        return steps, tuple(r["size"])
    if name == "best" and not str(r["search"].get("chosen", "")).startswith("static"):
        needs = [tuple(x) for x in r["search"]["per_interval"]]
        return steps, ScheduleAutoscaler(needs, 0.0, interval_s, s.startup_s).want(0.0)
    if steps and steps[0][0] <= 0:
        return steps, (steps[0][1], steps[0][2])
    return steps, (1, 1)


@dataclasses.dataclass(frozen=True)
class Job:
    """One committed result file to replay in Dynamo's engine (a process pool's unit of work)."""
    path: Path
    traces: Path | None
    policies: list[str]
    limit: int | None
    calibrate_at: str  # "mean" (the window's mean prompt) or a prompt length
    prefill_match: str  # dynamo_peer.PREFILL_MATCH
    settings: dict[str, dict]  # name -> PolicyConfig fields for the planner@name rows
    router_mode: str = "round_robin"  # the replay's router for every policy (dynamo_peer.ROUTER_MODES)


def one_file(job: Job) -> dict:
    path, traces, policies, limit = job.path, job.traces, job.policies, job.limit
    calibrate_at, prefill_match, settings = job.calibrate_at, job.prefill_match, job.settings
    doc = json.loads(path.read_text())
    argv = recorded_argv(doc["meta"]["command"], traces) + (["--limit", str(limit)] if limit else [])
    args = evaluate.build_parser().parse_args([*argv, "--out", "/dev/null"])
    trace, trace_id, s, feas, _n, hist_end = evaluate.load_run(args)
    res = doc["results"]
    t0 = trace.requests[0].arrival_s
    last = trace.requests[-1].arrival_s
    out: dict = {"file": str(path), "trace_id": trace_id, "limit": limit,
                 "same_trace": not limit and doc["trace"]["sha256"] == trace.sha256,
                 "warmup_s": args.warmup, "scored_from_s": hist_end, "policies": {}}
    with tempfile.TemporaryDirectory(prefix="pdserve-cross-") as tmp:
        work = Path(tmp)
        tr, cal_path = dynamo_inputs(trace, s, max_replicas=args.max_replicas, out_dir=work)
        cal = json.loads(cal_path.read_text())
        isl = (round(sum(r.input_tokens for r in trace.requests) / len(trace.requests)) if calibrate_at == "mean"
               else int(calibrate_at))
        ratios = dynamo_peer.calibrate(cal, work, isl, prefill_match)
        ratios |= dynamo_peer.check(cal, work, ratios)
        out["calibration"] = ratios | {"prefill_isl": isl}
        arrivals = [(r.arrival_s, r.input_tokens) for r in trace.requests]
        kv_tokens = cal["num_gpu_blocks"] * cal["block_size"]
        for name in [*policies, *(f"planner@{k}" for k in settings)]:
            key = "planner" if name == "planner_schedule" else name  # its row in the committed file
            if name == "dynamo":
                d = dynamo_peer.run(cal, tr, work, ratios, router_mode=job.router_mode)
            elif name.startswith("planner") and name != "planner_schedule":
                from pdserve.planner.core.policy import PlannerPolicy
                from pdserve.planner.core.sim_hook import PlannerAutoscaler

                cfg, prof = evaluate.planner_config(args, s, Knobs(), Flags.of(args, s))
                change = settings.get(name.partition("@")[2], {})
                cfg = dataclasses.replace(cfg, **change)
                driver = PlannerDriver(t0, s.interval_s, last, autoscaler=PlannerAutoscaler(PlannerPolicy(cfg, prof)),
                                       router=RouterView(arrivals), engines=EngineView(kv_tokens))
                d = replay(cal, tr, ratios, driver, (1, 1), job.router_mode)
            else:
                if key not in res or "series" not in res[key]:
                    continue
                steps, initial = schedule_of(name, res, s, s.interval_s)
                d = replay(cal, tr, ratios, ScheduleDriver(t0, s.interval_s, last, steps=steps), initial,
                           job.router_mode)
            scored = evaluate.score_replay(d, trace, s, args.warmup, feas, hist_end)
            sim = res.get(key, {})
            out["policies"][name] = {
                "dynamo_engine": {k: scored[k] for k in ("attainment_after_warmup", "attainment_feasible_after_warmup",
                                                          "gpu_hours", "max_prefill", "max_decode", "sim_wall_s")
                                  if k in scored} | {"series": scored["series"]["replicas"]},
                "pdserve_sim": {k: sim.get(k) for k in ("attainment_after_warmup", "gpu_hours", "max_prefill",
                                                        "max_decode")} if sim else None}
            e = out["policies"][name]["dynamo_engine"]
            print(f"{path.name} {name}: Dynamo's engine {100 * (e['attainment_after_warmup'] or 0):.2f} % at "
                  f"{e['gpu_hours']:.3f} GPU-h; pdserve's simulator "
                  + (f"{100 * (sim.get('attainment_after_warmup') or 0):.2f} % at {sim.get('gpu_hours', 0):.3f}"
                     if sim else "-"), flush=True)
    best = out["policies"].get("best", {}).get("dynamo_engine", {}).get("gpu_hours")
    for p in out["policies"].values():
        e = p["dynamo_engine"]
        e["gpu_hours_vs_best_schedule_here"] = round(e["gpu_hours"] / best, 4) if best else None
        e["meets_target"] = (e["gpu_hours_vs_best_schedule_here"] is not None and e["attainment_after_warmup"]
                             is not None and report.heldout_target_met(e["attainment_after_warmup"],
                                                                       e["gpu_hours_vs_best_schedule_here"]))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=Path, nargs="+", required=True, help="committed evaluate.py result files")
    ap.add_argument("--traces", type=Path, help="trace root, where a file's recorded trace path is not on this machine")
    ap.add_argument("--policies", nargs="+", default=list(POLICIES), choices=POLICIES)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--set", dest="settings", type=parse_set, action="append", default=[], metavar="NAME=FIELD:VALUE",
                    help="also the planner with these PolicyConfig fields changed, as 'planner@NAME' "
                         "(settings_sweep.py's syntax)")
    ap.add_argument("--calibrate-isl", default="mean",
                    help="the prompt length the mocker's prefill speed is matched at: 'mean' (the window's mean prompt, "
                         "default: the mocker's prefill time is not proportional to pdserve's, 1.5x it at 1,024 tokens "
                         "when matched at 4,096) or a number (4096: as every committed Dynamo result)")
    ap.add_argument("--calibrate-prefill", choices=dynamo_peer.PREFILL_MATCH, default="flat-out",
                    help="match the mocker's prefill flat out (its throughput with the batch full, default since "
                         "session 29) or alone (one request's latency, the committed runs before)")
    ap.add_argument("--limit", type=int, help="only the first N requests of each window (quick runs: not the file's run)")
    ap.add_argument("--router-mode", choices=dynamo_peer.ROUTER_MODES, default="round_robin",
                    help="the replay's router for every policy: round robin (its default, as every committed file ran) "
                         "or Dynamo's KV router (what Dynamo's load-based scaling runs on)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    run = Run(argv if argv is None else [sys.argv[0], *argv])
    with ProcessPoolExecutor(max(args.jobs, 1)) as ex:
        rows = list(ex.map(one_file, [Job(f, args.traces, args.policies, args.limit, args.calibrate_isl,
                                          args.calibrate_prefill, dict(args.settings), args.router_mode)
                                      for f in args.files]))
    write_result(args.out, {"schema": SCHEMA, "engine": "Dynamo 1.6.1 offline replay (mocker), calibrated to pdserve's "
                            "engine numbers (dynamo_peer.calibrate)", "router_mode": args.router_mode,
                            "policies": args.policies,
                            "settings": dict(args.settings), "rows": rows}, run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
