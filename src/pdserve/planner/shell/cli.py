"""``pdserve planner run`` and ``pdserve planner backtest``."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from pdserve.planner.core.policy import PolicyConfig
from pdserve.planner.core.profile import CapacityProfile
from pdserve.planner.core.predictors import PREDICTORS


def _float_or_none(text: str) -> float | None:
    return None if text.strip().lower() == "none" else float(text)


def _int_or_none(text: str) -> int | None:
    return None if text.strip().lower() == "none" else int(text)


def _optional(g: argparse._ArgumentGroup, flag: str, field: str, metavar: str, help: str, none: str,
              parse: Callable[[str], float | None] = _float_or_none) -> None:
    """``--flag`` for an optional ``PolicyConfig`` field: a number (``parse``: a float unless told), or 'none' (``none``
    says what that means); its default the policy's."""
    g.add_argument(flag, type=parse, metavar=metavar, default=getattr(PolicyConfig, field),
                   help=f"{help} ('none': {none}; default %(default)s)")


def _switch(g: argparse._ArgumentGroup, field: str, help: str) -> None:
    """``--field-name`` / ``--no-field-name`` for a boolean ``PolicyConfig`` field, its default the policy's."""
    g.add_argument("--" + field.replace("_", "-"), action=argparse.BooleanOptionalAction,
                   default=getattr(PolicyConfig, field), help=f"{help} (default %(default)s)")


def _run_parser(sub) -> None:
    p = sub.add_parser("run", help="run the planner loop locally",
                       description="Run the forecasting planner without a cluster. With process-pool it runs local "
                                   "`pdserve worker` processes and writes the router's discovery file; static only "
                                   "records decisions. On Kubernetes the planner runs inside `pdserve operator` "
                                   "(one kopf daemon per DisaggregatedService, on the replica holding the Lease).")
    p.add_argument("--service", help="a label for metrics and the PromQL selector")
    p.add_argument("--namespace", help="a label for metrics and the PromQL selector (default: default)")
    p.add_argument("--actuator", choices=["process-pool", "static", "kubernetes"], default="process-pool",
                   help="kubernetes is refused: that planner is hosted by `pdserve operator`")
    p.add_argument("--prometheus", "--prometheus-url", dest="prometheus", help="Prometheus base URL")
    p.add_argument("--selector", help="PromQL label matchers for the workers (default: namespace + pdserve_service)")
    p.add_argument("--scrape", action="append", default=[], metavar="[ROLE=]URL",
                   help="scrape /metrics directly (repeatable); ROLE is prefill, decode or router; "
                        "with the process pool these add to its own workers")
    p.add_argument("--dry-run", action="store_true", help="decide and report, never change replicas")
    p.add_argument("--no-warm-start", action="store_true",
                   help="start cold: without replaying the planner's history from --prometheus first")
    p.add_argument("--metrics-port", type=int, default=0, help="serve pdserve_planner_* metrics here (0: off)")
    p.add_argument("--log-level", default="info")
    p.add_argument("--max-ticks", type=int, help="stop after this many decisions (local actuators)")
    p.add_argument("--decisions-out", type=Path, help="append each decision as a JSON line")
    g = p.add_argument_group("policy (on Kubernetes the operator reads these from each resource)")
    g.add_argument("--profile", type=Path, help="capacity profile JSON (from `pdserve profile`)")
    g.add_argument("--model-profile", default="llama-3.1-8b-h100", help="derive the profile from this engine model")
    g.add_argument("--mock-speedup", type=float,
                   help="the derived profile in the wall time of mock workers at this speed-up "
                        "(default: the --mock-speedup among --worker-arg, else 1)")
    g.add_argument("--interval", type=float, help="seconds between decisions")
    g.add_argument("--predictor", choices=[*PREDICTORS, "moving_average", "holt_winters"], default="holt-winters")
    g.add_argument("--seasonal-periods", type=int, help="season length in intervals (seasonal Holt-Winters / SARIMA)")
    g.add_argument("--ttft-ms", type=float, default=2000.0)
    g.add_argument("--itl-ms", type=float, default=50.0)
    g.add_argument("--attainment", type=float, default=PolicyConfig.attainment,
                   help="fraction of requests that must meet both objectives (its complement is the error budget "
                        "--burst-miss-budget spends; default %(default)s)")
    g.add_argument("--prefill-min", type=int, default=1)
    g.add_argument("--prefill-max", type=int, default=8)
    g.add_argument("--decode-min", type=int, default=1)
    g.add_argument("--decode-max", type=int, default=8)
    g.add_argument("--prefill-tp", type=int, help="default: the capacity profile's")
    g.add_argument("--decode-tp", type=int, help="default: the capacity profile's")
    g.add_argument("--gpu-budget", type=int)
    g.add_argument("--stabilization-s", type=float, default=PolicyConfig.scale_down_stabilization_s)
    g.add_argument("--startup-s", type=float, default=PolicyConfig.startup_s, help="replica start-up time the forecast looks past")
    g.add_argument("--scale-to-zero", action="store_true")
    g.add_argument("--target-utilization", type=float, default=PolicyConfig.target_utilization)
    _optional(g, "--burst-budget", "burst_budget_s", "S",
              "burst reserve from the router's burst gauge at this budget: 0, 0.5, 1, 2 or 4 s",
              "the scrape-resolution irate() peak")
    _optional(g, "--burst-fit-budget", "burst_fit_budget_s", "S",
              "with --burst-budget: a second, larger budget; the reserve is then the burst's fitted arrival rate",
              "the gauge at --burst-budget alone")
    _optional(g, "--burst-absorb-fraction", "burst_absorb_fraction", "F",
              "no reserve for a fitted burst that the steady plan drains within this fraction of the TTFT SLO",
              "every fitted burst gets one")
    _optional(g, "--burst-level-ratio", "burst_level_ratio", "X",
              "no reserve for a fitted burst within this factor of the prompt-token rate the router's rate window "
              "shows at the same time: the load moved there, the forecast follows it",
              "every fitted burst is one")
    _optional(g, "--burst-miss-budget", "burst_miss_budget", "F",
              "no reserve for the bursts the steady plan does not absorb while, recurring as seen over the peak "
              "window, they would miss fewer prompt tokens than this share of the error budget (1 - --attainment) "
              "of the tokens that window saw",
              "every such burst gets one")
    _optional(g, "--lone-burst-s", "lone_burst_s", "S",
              "no reserve for the bursts the steady plan does not absorb once all those of the peak window came "
              "within one span this long and none in as long since: one episode that did not recur",
              "kept for the peak window")
    _optional(g, "--prefill-utilization", "prefill_utilization", "F",
              "plan each prefill replica at this fraction of its SLO-bound capacity instead of --target-utilization",
              "the same")
    _switch(g, "hold_prefill_on_rise", "release no prefill replica while the router's prompt-token rate reads above "
                                       "the previous tick's")
    _switch(g, "hold_decode_on_rise", "release no decode replica while the router's prompt-token rate reads above "
                                      "the previous tick's")
    g.add_argument("--prefill-utilization-min-replicas", type=int, metavar="N",
                   default=PolicyConfig.prefill_utilization_min_replicas,
                   help="use --prefill-utilization only where the prefill pool it sizes has at least N replicas "
                        "(fewer: --target-utilization; default %(default)s)")
    _switch(g, "burst_on_level", "plan a remembered burst on today's level: its rate less how far the prompt-token "
                                 "rate fell since it was seen")
    _switch(g, "prefill_pool_queueing", "size the prefill pool as a pool behind the router (its members wait less "
                                        "than a lone replica at the same load), not as replicas each alone")
    _switch(g, "prefill_headroom_on_rise", "plan prefill at --target-utilization, not --prefill-utilization, while "
                                           "the router's prompt-token rate reads above the previous tick's")
    _switch(g, "correction_decode_curve", "read the decode latency ratio as a line in the per-replica decode load "
                                          "and size decode where the profile's ITL times it meets the ITL SLO")
    _switch(g, "correction_engage_pool", "engage the prefill latency ratio on the prefill engines' own TTFT tail, "
                                         "not the client's (which also holds the KV link's and decode's waits)")
    _switch(g, "decode_queue_compute", "size decode for the work its queue holds (each queued request's output, worked "
                                       "off within the drain time) as well as for the KV its links carry")
    g.add_argument("--decode-correction-max", type=float, metavar="F",
                   default=PolicyConfig().decode_correction_limits[1],
                   help="the highest decode latency ratio (observed over profile ITL) the planner applies; the prefill "
                        f"ratio keeps {PolicyConfig.correction_bounds[1]:g} (default %(default)s)")
    _optional(g, "--prefill-ratio-floor", "prefill_ratio_floor", "F",
              "apply a prefill latency ratio under 1 (the pool faster than its profile) down to F",
              "never under 1")
    _switch(g, "drain_starting", "project the prefill queue with the replicas still starting moving tokens only from "
                                 "when they are ready (the pool's last rise plus the start-up)")
    _optional(g, "--ramp-projection-s", "ramp_projection_s", "S",
              "on a prompt-token rate that rose at each of the last --ramp-ticks ticks, plan for it continued S "
              "seconds at its mean rise", "plan for the rate now")
    g.add_argument("--ramp-ticks", type=int, metavar="N", default=PolicyConfig.ramp_ticks,
                   help="ticks the prompt-token rate must rise at for --ramp-projection-s (default %(default)s)")
    _optional(g, "--decode-link-release", "decode_link_release", "F",
              "give up a decode replica only once the KV stream is below F of what the links left would carry",
              "--target-utilization")
    _optional(g, "--correction-backlog-s", "correction_backlog_s", "S",
              "leave the prefill latency ratio unread for S seconds after the prefill pool last held a backlog "
              "(its TTFT is then the queue's wait, not the engine's speed)", "read in every window")
    g.add_argument("--scale-down-stabilization-max-replicas", type=int, metavar="N",
                   default=PolicyConfig.scale_down_stabilization_max_replicas,
                   help="stabilise only the releases that leave a pool at N replicas or fewer (default: every "
                        "release)")
    _optional(g, "--scale-down-clear-fraction", "scale_down_clear_fraction", "F",
              "release a pool to K replicas without stabilisation where its largest sizing term is at most K x F",
              "every release stabilised")
    _optional(g, "--scale-down-clear-quantile", "scale_down_clear_quantile", "Q",
              "learn the clear fraction as 1 / the Q-quantile rise of the arrival rate within a start-up plus an "
              "interval over the rate history", "the fixed fraction alone")
    _switch(g, "scale_down_clear_after_burst", "let a cleared release skip the stabilisation even while a burst "
            "reserve asked for replicas in its window")
    _switch(g, "stabilize_drain", "let the scale-down stabilisation hold what the drain terms alone asked for")
    _switch(g, "release_only_cleared", "release a pool only as far as the load clears the margin (fixed or learnt), "
            "however long the stabilisation window has wanted less")
    _optional(g, "--release-only-cleared-max-replicas", "release_only_cleared_max_replicas", "N",
              "with --release-only-cleared: hold only the releases that leave a pool at N replicas or fewer to the "
              "margin", "every release", parse=_int_or_none)
    w = p.add_argument_group("process pool")
    w.add_argument("--discovery-file", type=Path, help="router discovery file to write")
    w.add_argument("--worker-model", default="mock-model")
    w.add_argument("--worker-arg", action="append", default=[], help="extra `pdserve worker` flag (repeatable)")
    w.add_argument("--initial-prefill", type=int, default=1)
    w.add_argument("--initial-decode", type=int, default=1)
    w.add_argument("--log-dir", type=Path)


def _backtest_parser(sub) -> None:
    p = sub.add_parser("backtest", help="score the predictors on a trace",
                       description="One-step-ahead forecasts of a trace's per-interval request rate; MAPE and RMSE per predictor.")
    p.add_argument("--trace", required=True, type=Path, help="Azure CSV or Mooncake JSONL trace")
    p.add_argument("--interval", type=float, default=60.0, help="seconds per interval")
    p.add_argument("--predictors", nargs="+", default=list(PREDICTORS), choices=PREDICTORS)
    p.add_argument("--seasonal-periods", type=int, help="season length in intervals (seasonal Holt-Winters / SARIMA)")
    p.add_argument("--out", type=Path, help="write results as JSON")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pdserve planner", description="The forecasting SLA planner.")
    sub = parser.add_subparsers(dest="cmd", required=True)
    _run_parser(sub)
    _backtest_parser(sub)
    return parser


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.cmd == "run" and args.actuator == "kubernetes":
        print("pdserve planner: error: on Kubernetes the planner runs inside `pdserve operator` (one kopf daemon "
              "per DisaggregatedService with spec.autoscaling.enabled, on the replica holding the operator's Lease); "
              "run the operator (or the Helm chart) instead", file=sys.stderr)
        return 2
    try:
        if args.cmd == "backtest":
            return _backtest(args)
        return asyncio.run(_run(args, parser))
    except (ValueError, FileNotFoundError) as exc:
        print(f"pdserve planner: error: {exc}", file=sys.stderr)
        return 2


def _backtest(args) -> int:
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from pdserve.planner.shell.backtest import backtest, interval_rates
    from pdserve.sim.traces import load_trace

    trace = load_trace(args.trace)
    rates = interval_rates([r.arrival_s for r in trace.requests], args.interval)
    with Progress(transient=True) as prog:
        tasks = {n: prog.add_task(n, total=max(0, len(rates) - 5)) for n in args.predictors}
        results = backtest(rates, args.predictors, seasonal_periods=args.seasonal_periods,
                           progress=lambda n, i, tot: prog.update(tasks[n], completed=i))
    table = Table(title=f"{args.trace.name}: {len(rates)} intervals of {args.interval:g} s")
    for col in ("predictor", "MAPE %", "RMSE req/s", "exploded", "fit s"):
        table.add_column(col)
    for r in results:
        table.add_row(r.predictor, f"{r.mape_pct:.1f}", f"{r.rmse:.3f}", str(r.exploded), f"{r.seconds:.1f}")
    Console().print(table)
    if args.out:
        args.out.write_text(json.dumps({"trace": str(args.trace), "interval_s": args.interval,
                                        "intervals": len(rates), "results": [r.to_dict() for r in results]}, indent=2) + "\n")
    return 0


def _worker_speedup(worker_args: list[str]) -> float:
    """``--mock-speedup X`` / ``--mock-speedup=X`` among the worker flags, else 1."""
    for i, a in enumerate(worker_args):
        if a.startswith("--mock-speedup="):
            return float(a.split("=", 1)[1])
        if a == "--mock-speedup" and i + 1 < len(worker_args):
            return float(worker_args[i + 1])
    return 1.0


async def _run(args, parser) -> int:
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(message)s")
    log = logging.getLogger("pdserve.planner")
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopped.set)
    return await _run_local(args, stopped, log)


def policy_config(args: argparse.Namespace, profile: CapacityProfile) -> PolicyConfig:
    """The policy the ``run`` flags name, each flag to its field (pure; ValueError names a bad combination).
    The TP sizes default to the capacity profile's."""
    cfg = PolicyConfig(
        ttft_slo_ms=args.ttft_ms, itl_slo_ms=args.itl_ms, attainment=args.attainment,
        interval_s=args.interval or PolicyConfig.interval_s,
        predictor=args.predictor, seasonal_periods=args.seasonal_periods,
        prefill_min=args.prefill_min, prefill_max=args.prefill_max,
        decode_min=args.decode_min, decode_max=args.decode_max,
        prefill_tp=args.prefill_tp or profile.prefill.tensor_parallel_size,
        decode_tp=args.decode_tp or profile.decode.tensor_parallel_size,
        gpu_budget=args.gpu_budget, scale_down_stabilization_s=args.stabilization_s, startup_s=args.startup_s,
        scale_to_zero=args.scale_to_zero, target_utilization=args.target_utilization,
        burst_budget_s=args.burst_budget, burst_fit_budget_s=args.burst_fit_budget,
        burst_absorb_fraction=args.burst_absorb_fraction, burst_level_ratio=args.burst_level_ratio,
        burst_miss_budget=args.burst_miss_budget, lone_burst_s=args.lone_burst_s,
        prefill_utilization=args.prefill_utilization, hold_prefill_on_rise=args.hold_prefill_on_rise,
        hold_decode_on_rise=args.hold_decode_on_rise,
        prefill_utilization_min_replicas=args.prefill_utilization_min_replicas,
        prefill_headroom_on_rise=args.prefill_headroom_on_rise, prefill_pool_queueing=args.prefill_pool_queueing,
        burst_on_level=args.burst_on_level,
        prefill_ratio_floor=args.prefill_ratio_floor,
        correction_backlog_s=args.correction_backlog_s, decode_link_release=args.decode_link_release,
        drain_starting=args.drain_starting,
        ramp_projection_s=args.ramp_projection_s, ramp_ticks=args.ramp_ticks,
        scale_down_stabilization_max_replicas=args.scale_down_stabilization_max_replicas,
        scale_down_clear_fraction=args.scale_down_clear_fraction,
        scale_down_clear_quantile=args.scale_down_clear_quantile,
        stabilize_drain=args.stabilize_drain,
        scale_down_clear_after_burst=args.scale_down_clear_after_burst,
        release_only_cleared=args.release_only_cleared,
        release_only_cleared_max_replicas=args.release_only_cleared_max_replicas,
        correction_decode_curve=args.correction_decode_curve, correction_engage_pool=args.correction_engage_pool,
        decode_queue_compute=args.decode_queue_compute,
        correction_bounds_decode=(None if args.decode_correction_max == PolicyConfig.correction_bounds[1]
                                  else (PolicyConfig.correction_bounds[0], args.decode_correction_max)),
    )
    if (bad := cfg.invalid()) is not None:
        raise ValueError(bad)
    return cfg


async def _run_local(args, stopped, log) -> int:
    from pdserve.planner.shell.actuator_process_pool import ProcessPool
    from pdserve.planner.core.actuator_static import RecordingActuator
    from pdserve.planner.shell.loop import Actuator, MetricSource, run_loop
    from pdserve.planner.shell.metrics import PlannerMetrics
    from pdserve.planner.core.policy import PlannerPolicy
    from pdserve.planner.core.profile_model import derive_profile
    from pdserve.planner.shell.source_prometheus import PrometheusSource, PromQL
    from pdserve.planner.shell.source_scrape import ScrapeSource, parse_target
    from pdserve.planner.core.spec_config import rate_window

    if args.profile:
        profile = CapacityProfile.load(args.profile)
    else:
        # Front end included where the correction reads the prefill pods' TTFT, which holds it (PolicyConfig).
        profile = derive_profile(args.model_profile, prefill_tp=args.prefill_tp, decode_tp=args.decode_tp,
                                 include_frontend=PolicyConfig.correction_pool_ttft)
        speedup = args.mock_speedup or _worker_speedup(args.worker_arg)
        if speedup != 1.0:
            profile = profile.time_scaled(speedup)
    cfg = policy_config(args, profile)
    service, ns = args.service or "local", args.namespace or "default"
    pool = None
    actuator: Actuator
    if args.actuator == "process-pool":
        pool = ProcessPool(model=args.worker_model, worker_args=args.worker_arg,
                           discovery_file=args.discovery_file, log_dir=args.log_dir)
        pool.scale("prefill", args.initial_prefill)
        pool.scale("decode", args.initial_decode)
        actuator = pool
    else:
        actuator = RecordingActuator(args.initial_prefill, args.initial_decode)
    source: MetricSource
    if args.prometheus:
        selector = args.selector if args.selector is not None else f'namespace="{ns}",pdserve_service="{service}"'
        source = PrometheusSource(args.prometheus, PromQL(selector, window=rate_window(cfg.interval_s, 5.0),
                                                          burst_budget_s=cfg.burst_budget_s,
                                                          burst_fit_budget_s=cfg.burst_fit_budget_s))
    elif pool is not None:  # the pool's ready workers, plus e.g. the router (wake-up from zero)
        extra = [parse_target(s) for s in args.scrape]
        source = ScrapeSource(lambda: pool.targets() + extra, burst_budget_s=cfg.burst_budget_s,
                              burst_fit_budget_s=cfg.burst_fit_budget_s)
    elif args.scrape:
        source = ScrapeSource([parse_target(s) for s in args.scrape], burst_budget_s=cfg.burst_budget_s,
                              burst_fit_budget_s=cfg.burst_fit_budget_s)
    else:
        raise ValueError("give --prometheus URL or --scrape URL (or use --actuator process-pool)")
    metrics = PlannerMetrics()
    if args.metrics_port:
        from prometheus_client import start_http_server

        start_http_server(args.metrics_port, addr="127.0.0.1", registry=metrics.registry)
    out = open(args.decisions_out, "a") if args.decisions_out else None

    def record(obs, d) -> None:
        if out:
            out.write(json.dumps({"time": d.timestamp, **d.to_status()}) + "\n")
            out.flush()

    try:
        await run_loop(PlannerPolicy(cfg, profile), source, actuator, stopped=stopped, metrics=metrics,
                       service=service, namespace=ns, dry_run=args.dry_run, on_decision=record,
                       max_ticks=args.max_ticks, logger=log, warm=bool(args.prometheus) and not args.no_warm_start)
    finally:
        if pool is not None:
            pool.close()
        if out:
            out.close()
    return 0
