#!/usr/bin/env python3
"""Evaluate the forecasting planner in the simulator against three baselines.

Replays a trace (default: the Azure 2023 conversation trace) on a disaggregated
deployment in ``pdserve.sim`` with a replica start-up delay, under four autoscalers:

- ``static``: peak provisioning, the largest sizes the hindsight oracle ever uses, fixed;
- ``reactive``: KEDA/HPA-style thresholds, desired = ceil(current x metric / target) with
  metric = (running + waiting) per ready prefill replica and KV usage for decode, a 10 %
  tolerance, immediate scale-up and the same scale-down stabilisation as the planner;
- ``oracle``: hindsight, sizes each pool with the planner's own capacity model from the
  trace's true future per-interval load, requesting replicas one start-up delay ahead;
- ``planner``: ``pdserve.planner.PlannerPolicy`` through the simulator hook, forecasting
  with statsmodels (the production code path).

Reports SLO attainment (TTFT and TPOT both met) and GPU-hours for each, as JSON, markdown
and a PNG of load and GPUs over time. Run ``python bench/planner/evaluate.py --help``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pdserve.planner.policy import PlannerPolicy, PolicyConfig
from pdserve.planner.profile import CapacityProfile
from pdserve.planner.profile_model import derive_profile
from pdserve.planner.sim_hook import PlannerAutoscaler
from pdserve.sim.autoscale import PoolSizes, WindowMetrics
from pdserve.sim.config import SimConfig
from pdserve.sim.metrics import Slo
from pdserve.sim.simulator import run_simulation
from pdserve.sim.traces import Trace, load_trace

HERE = Path(__file__).resolve().parent
DEFAULT_TRACE = Path("/work/shared/data/traces/azure_2023/AzureLLMInferenceTrace_conv.csv")


# ----------------------------------------------------------------------------- baselines
@dataclass
class Sizing:
    """The planner's own sizing rule, for the oracle: load -> replicas per pool."""

    profile: CapacityProfile
    cfg: PolicyConfig

    def need(self, rate: float, isl: float, osl: float) -> tuple[int, int]:
        c = self.cfg
        if rate <= 0:
            return c.prefill_min, c.decode_min
        cap_p = self.profile.prefill_capacity(isl, c.ttft_slo_ms) * c.target_utilization
        cap_d = self.profile.decode_capacity(isl + osl / 2, c.itl_slo_ms) * c.target_utilization
        p = math.ceil(rate * isl / cap_p - 1e-9)
        d = math.ceil(rate * osl / cap_d - 1e-9)
        return min(max(p, c.prefill_min), c.prefill_max), min(max(d, c.decode_min), c.decode_max)


def interval_loads(trace: Trace, interval_s: float) -> list[tuple[float, float, float]]:
    """(rate, mean ISL, mean OSL) per interval from the first arrival."""
    t0 = trace.requests[0].arrival_s
    n = int((trace.requests[-1].arrival_s - t0) // interval_s) + 1
    cnt, isl, osl = np.zeros(n), np.zeros(n), np.zeros(n)
    for r in trace.requests:
        k = int((r.arrival_s - t0) // interval_s)
        cnt[k] += 1
        isl[k] += r.input_tokens
        osl[k] += r.output_tokens
    with np.errstate(invalid="ignore", divide="ignore"):
        return [(c / interval_s, i / c if c else 0.0, o / c if c else 0.0) for c, i, o in zip(cnt, isl, osl)]


@dataclass
class OracleAutoscaler:
    sizing: Sizing
    loads: list[tuple[float, float, float]]
    t0: float
    interval_s: float
    startup_s: float

    def on_tick(self, now: float, window: WindowMetrics, current: PoolSizes) -> PoolSizes:
        # Replicas requested now serve from now + startup; those up now must cover until then.
        lo = int((now - self.t0) // self.interval_s)
        hi = int((now + self.startup_s + self.interval_s - self.t0) // self.interval_s)
        needs = [self.sizing.need(*self.loads[k]) for k in range(max(lo, 0), min(hi + 1, len(self.loads)))]
        if not needs:
            return PoolSizes(self.sizing.cfg.prefill_min, self.sizing.cfg.decode_min)
        return PoolSizes(max(n[0] for n in needs), max(n[1] for n in needs))


@dataclass
class ReactiveAutoscaler:
    interval_s: float
    cfg: PolicyConfig
    prefill_target: float = 4.0  # running + waiting requests per ready prefill replica
    decode_kv_target: float = 0.7  # mean KV-cache usage of the decode pool
    tolerance: float = 0.1
    recs: list[tuple[float, int, int]] = field(default_factory=list)

    def _hpa(self, current: int, metric: float, target: float) -> int:
        ratio = metric / target
        return current if abs(ratio - 1) <= self.tolerance else math.ceil(current * ratio)

    def on_tick(self, now: float, window: WindowMetrics, current: PoolSizes) -> PoolSizes:
        c, pf, dc = self.cfg, window.prefill, window.decode
        p_metric = (pf.running + pf.waiting) / max(pf.ready, 1)
        p = self._hpa(max(current.prefill, 1), p_metric, self.prefill_target)
        d = self._hpa(max(current.decode, 1), dc.kv_usage if dc.ready else 1.0, self.decode_kv_target)
        p, d = min(max(p, c.prefill_min), c.prefill_max), min(max(d, c.decode_min), c.decode_max)
        self.recs = [r for r in self.recs if r[0] >= now - c.scale_down_stabilization_s] + [(now, p, d)]
        if p < current.prefill:
            p = min(current.prefill, max(r[1] for r in self.recs))
        if d < current.decode:
            d = min(current.decode, max(r[2] for r in self.recs))
        return PoolSizes(p, d)


@dataclass
class Recorder:
    """Wraps an autoscaler to record (time, prefill, decode) after each tick."""

    inner: object
    series: list[tuple[float, int, int]] = field(default_factory=list)

    @property
    def interval_s(self) -> float:
        return self.inner.interval_s

    def on_tick(self, now, window, current):
        out = self.inner.on_tick(now, window, current)
        self.series.append((now, out.prefill, out.decode))
        return out


# ----------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="Azure CSV or Mooncake JSONL trace")
    ap.add_argument("--model-profile", default="llama-3.1-70b-tp4-h100", help="engine model (pdserve.worker.perf)")
    ap.add_argument("--rate-scale", type=float, default=1.0, help="replay the trace this many times faster")
    ap.add_argument("--limit", type=int, help="only the first N requests (quick runs)")
    ap.add_argument("--interval", type=float, default=30.0, help="planner interval, s")
    ap.add_argument("--startup", type=float, default=60.0, help="replica start-up delay, s")
    ap.add_argument("--ttft-ms", type=float, default=2000.0)
    ap.add_argument("--itl-ms", type=float, default=50.0, help="TPOT objective, ms")
    ap.add_argument("--predictor", default="holt-winters")
    ap.add_argument("--stabilization", type=float, default=180.0, help="scale-down stabilisation window, s")
    ap.add_argument("--target-utilization", type=float, default=0.85)
    ap.add_argument("--max-replicas", type=int, default=8, help="per pool")
    ap.add_argument("--warmup", type=float, default=300.0, help="also report attainment for arrivals after this, s")
    ap.add_argument("--policies", nargs="+", default=["static", "reactive", "oracle", "planner"])
    ap.add_argument("--out", type=Path, default=HERE / "results", help="output folder")
    args = ap.parse_args(argv)

    from rich.console import Console
    from rich.progress import Progress

    console = Console()
    trace = load_trace(args.trace).scaled(args.rate_scale).head(args.limit)
    profile = derive_profile(args.model_profile)
    tp_p, tp_d = profile.prefill.tensor_parallel_size, profile.decode.tensor_parallel_size
    cfg = PolicyConfig(ttft_slo_ms=args.ttft_ms, itl_slo_ms=args.itl_ms, attainment=0.99, interval_s=args.interval,
                       predictor=args.predictor, prefill_min=1, prefill_max=args.max_replicas, decode_min=1,
                       decode_max=args.max_replicas, prefill_tp=tp_p, decode_tp=tp_d,
                       scale_down_stabilization_s=args.stabilization, target_utilization=args.target_utilization,
                       startup_s=args.startup)
    sizing = Sizing(profile, cfg)
    loads = interval_loads(trace, args.interval)
    peak = (max(sizing.need(*ld)[0] for ld in loads), max(sizing.need(*ld)[1] for ld in loads))
    t0 = trace.requests[0].arrival_s
    slo = Slo(ttft_s=args.ttft_ms / 1000, tpot_s=args.itl_ms / 1000, target=0.99)

    def scaler(name: str):
        if name == "static":
            return None
        if name == "reactive":
            return ReactiveAutoscaler(args.interval, cfg)
        if name == "oracle":
            return OracleAutoscaler(sizing, loads, t0, args.interval, args.startup)
        if name == "planner":
            return PlannerAutoscaler(PlannerPolicy(cfg, profile))
        raise SystemExit(f"unknown policy {name!r}")

    results, series = {}, {}
    with Progress(console=console) as prog:
        for name in args.policies:
            task = prog.add_task(name, total=len(trace.requests))
            inner = scaler(name)
            rec = Recorder(inner) if inner is not None else None
            start_sizes = peak if name == "static" else (1, 1)
            sim_cfg = SimConfig(topology="disagg", prefill_instances=start_sizes[0], decode_instances=start_sizes[1],
                                profile=args.model_profile, startup_delay_s=args.startup, slo=slo)
            wall = time.perf_counter()
            res = run_simulation(trace, sim_cfg, autoscaler=rec,
                                 progress=lambda done, total, t=task: prog.update(t, completed=done, total=total))
            s = res.summary
            # Attainment without the cold start: every autoscaler begins at 1P1D (static at
            # its peak sizes) and cannot react before its first tick + start-up delay.
            warm = [r for r in res.records if r.arrival_s >= t0 + args.warmup]
            held = sum(d.held for d in inner.decisions) if name == "planner" else None
            results[name] = {
                "attainment": s.attainment, "attainment_ttft": s.attainment_ttft, "attainment_tpot": s.attainment_tpot,
                "attainment_after_warmup": sum(r.attains(slo) for r in warm) / len(warm) if warm else None,
                "gpu_hours": res.gpu_seconds / 3600, "finished": s.finished, "requests": s.requests,
                "ttft_p99_s": s.ttft.get("p99"), "tpot_p99_s": s.tpot.get("p99"), "held_decisions": held,
                "sim_wall_s": time.perf_counter() - wall,
            }
            series[name] = rec.series if rec else [(t0, *peak), (res.end_time_s, *peak)]
    report = {
        "trace": str(args.trace), "requests": len(trace.requests), "rate_scale": args.rate_scale,
        "model_profile": args.model_profile, "tp": {"prefill": tp_p, "decode": tp_d},
        "slo": {"ttft_ms": args.ttft_ms, "tpot_ms": args.itl_ms}, "interval_s": args.interval,
        "startup_delay_s": args.startup, "predictor": args.predictor, "stabilization_s": args.stabilization,
        "target_utilization": args.target_utilization, "warmup_s": args.warmup, "static_peak_sizes": {"prefill": peak[0], "decode": peak[1]},
        "results": results,
    }
    if "oracle" in results:
        for r in results.values():
            r["gpu_hours_vs_oracle"] = r["gpu_hours"] / results["oracle"]["gpu_hours"]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "evaluation.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "evaluation.md").write_text(markdown(report))
    plot(args.out / "evaluation.png", loads, args.interval, series, t0, tp_p, tp_d)
    console.print(markdown(report))
    return 0


def markdown(rep: dict) -> str:
    lines = [
        f"# Planner evaluation: {Path(rep['trace']).name}",
        "",
        f"{rep['requests']} requests, rate x{rep['rate_scale']:g}, {rep['model_profile']} "
        f"(TP {rep['tp']['prefill']} prefill / {rep['tp']['decode']} decode), SLO TTFT {rep['slo']['ttft_ms']:g} ms "
        f"and TPOT {rep['slo']['tpot_ms']:g} ms, interval {rep['interval_s']:g} s, start-up delay "
        f"{rep['startup_delay_s']:g} s, predictor {rep['predictor']}, scale-down stabilisation "
        f"{rep['stabilization_s']:g} s. Static = {rep['static_peak_sizes']['prefill']}P"
        f"{rep['static_peak_sizes']['decode']}D.",
        "",
        "| policy | attainment (both) | after warm-up | TTFT ok | TPOT ok | GPU-hours | vs oracle | p99 TTFT s | p99 TPOT s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, r in rep["results"].items():
        f = lambda v, n=3: "-" if v is None else f"{v:.{n}f}"  # noqa: E731
        warm = "-" if r.get("attainment_after_warmup") is None else f"{100 * r['attainment_after_warmup']:.2f} %"
        lines.append(f"| {name} | {100 * r['attainment']:.2f} % | {warm} | {100 * r['attainment_ttft']:.2f} % | "
                     f"{100 * r['attainment_tpot']:.2f} % | {r['gpu_hours']:.2f} | {f(r.get('gpu_hours_vs_oracle'), 2)} | "
                     f"{f(r['ttft_p99_s'])} | {f(r['tpot_p99_s'])} |")
    return "\n".join(lines) + "\n"


def plot(path: Path, loads, interval_s: float, series: dict, t0: float, tp_p: int, tp_d: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 6.5), sharex=True)
    t = [(k + 0.5) * interval_s / 60 for k in range(len(loads))]
    ax1.plot(t, [ld[0] for ld in loads], color="black")
    ax1.set_ylabel("arrivals, req/s")
    ax1.set_title("Load and GPUs in use (prefill x TP + decode x TP)")
    for name, pts in series.items():
        xs = [(p[0] - t0) / 60 for p in pts]
        ax2.step(xs, [p[1] * tp_p + p[2] * tp_d for p in pts], where="post", label=name)
    ax2.set_xlabel("minutes")
    ax2.set_ylabel("GPUs requested")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
