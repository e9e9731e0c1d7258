"""``pdserve advise``: which layout serves this trace best per GPU, and does P/D pay?"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml
from pydantic import ValidationError
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from pdserve.sim.advise import Advice, advise, describe
from pdserve.sim.capacity_seed import capacity_seed
from pdserve.sim.cli import add_engine_args, add_trace_args, engine_fields
from pdserve.sim.config import SimConfig, SimConfigError
from pdserve.sim.instance import resolve_profile
from pdserve.sim.traces import TraceError, load_trace


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="pdserve advise",
        description="Rank colocated, chunked and every xPyD split (and TP choice) for a trace by goodput per "
        "GPU under the SLOs; recommend one and say whether disaggregation pays.",
    )
    add_trace_args(ap)
    ap.add_argument("--gpus", type=int, required=True, help="GPU budget")
    ap.add_argument("--tp-choices", type=int, nargs="+", default=None,
                    help="tensor-parallel sizes to consider (default: powers of two that fit)")
    ap.add_argument("--mixed-tp", action="store_true", help="also try different TP for prefill and decode")
    ap.add_argument("--window", type=float, default=60.0,
                    help="refinement probes replay the first S seconds at each rate; coarse ones S/3 (default 60)")
    ap.add_argument("--max-requests", type=int, default=1500,
                    help="cap on requests per refinement probe; coarse probes use a quarter (default 1500)")
    add_engine_args(ap)
    ap.add_argument("--name", default="my-model", help="metadata.name for the emitted DisaggregatedService")
    ap.add_argument("--manifest", type=Path, default=None, help="write a DisaggregatedService YAML snippet here")
    ap.add_argument("--capacity-profile", type=Path, default=None,
                    help="write a planner capacity-profile seed (JSON) for the recommended TP here")
    ap.add_argument("--json", type=Path, default=None, help="write the ranking as JSON here")
    ap.add_argument("--quiet", action="store_true")
    return ap


def manifest(advice: Advice, name: str) -> dict[str, object]:
    """A DisaggregatedService for the recommendation (colocated: prefill.replicas 0)."""
    cfg = advice.best.compared.config
    model = resolve_profile(cfg.profile, cfg.tp).model.name
    prefill: dict[str, object]
    decode: dict[str, object]
    if cfg.topology == "disagg":
        prefill = {"replicas": cfg.prefill_instances, "tensorParallelSize": cfg.prefill_tp}
        decode = {"replicas": cfg.decode_instances, "tensorParallelSize": cfg.decode_tp}
    else:
        # No prefill pool: the router sends whole requests to the decode workers.
        prefill = {"replicas": 0, "tensorParallelSize": cfg.tp}
        decode = {"replicas": cfg.instances, "tensorParallelSize": cfg.tp}
        if cfg.topology == "chunked":
            decode["extraArgs"] = ["--enable-chunked-prefill", f"--max-num-batched-tokens={cfg.token_budget}"]
    return {
        "apiVersion": "pdserve.io/v1alpha1",
        "kind": "DisaggregatedService",
        "metadata": {"name": name},
        "spec": {
            "model": {"name": model},
            "prefill": prefill,
            "decode": decode,
            "slo": {"ttftMs": cfg.slo.ttft_s * 1000, "itlMs": cfg.slo.tpot_s * 1000, "attainment": cfg.slo.target},
        },
    }


def _table(advice: Advice) -> Table:
    t = Table(title="configurations by goodput per GPU (refined = searched on the long window; "
                    "~ = coarse estimate on a short window, which overstates goodput)")
    for col in ("#", "configuration", "GPUs", "goodput req/s", "req/s/GPU", "TTFT p90 s", "TPOT p90 ms", "KV MB/req", "search"):
        t.add_column(col, justify="right" if col not in ("configuration", "search") else "left")
    for i, r in enumerate(advice.ranked, 1):
        c = r.compared
        est = "" if r.refined else "~"
        t.add_row(
            str(i), r.label, str(c.gpus), f"{est}{c.goodput.goodput_rps:.3f}", f"{est}{c.per_gpu:.3f}",
            "" if r.ttft_p90 is None else f"{r.ttft_p90:.3f}",
            "" if r.tpot_p90 is None else f"{1000 * r.tpot_p90:.1f}",
            f"{r.kv_mb_per_request:.0f}" if r.refined and r.disagg else "",
            "refined" if r.refined else "coarse estimate",
        )
    return t


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    # soft_wrap: an error names a path or a value whole, on one line (rich folds long words at
    # 80 columns when stderr is not a terminal, which cut a trace's path in two).
    err = Console(stderr=True, soft_wrap=True)
    out = Console() if Console().is_terminal else Console(width=150)
    try:
        trace = load_trace(args.trace, synthetic_rate=args.synthetic_rate, arrival_process=args.arrival,
                           arrival_cv=args.arrival_cv, seed=args.seed)
        trace = trace.head(args.limit).scaled(args.rate_scale, args.time_scale)
        base = SimConfig(topology="chunked", instances=1, seed=args.seed, **engine_fields(args))
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=err,
                      disable=args.quiet, transient=True) as prog:
            task = prog.add_task("advising", total=None)
            advice = advise(trace, base, args.gpus, tps=args.tp_choices, mixed_tp=args.mixed_tp,
                            coarse_window_s=args.window / 3, fine_window_s=args.window,
                            coarse_max_requests=max(100, args.max_requests // 4), fine_max_requests=args.max_requests,
                            on_step=lambda s: prog.update(task, description=s))
            seed = None
            if args.capacity_profile is not None:
                prog.update(task, description="measuring the capacity-profile seed")
                seed = capacity_seed(trace, advice.best.compared.config, requests_per_point=100)
    except (TraceError, SimConfigError) as e:
        err.print(f"[red]pdserve advise: {e}[/red]")
        return 2
    except ValidationError as e:
        err.print(f"[red]pdserve advise: invalid configuration: {e}[/red]")
        return 2
    out.print(_table(advice))
    best = advice.best
    out.print(f"[bold]Recommendation:[/bold] {best.label} on {best.compared.gpus} GPUs: "
              f"{best.compared.goodput.goodput_rps:.3f} req/s at >= {100 * base.slo.target:.0f}% attainment "
              f"({best.compared.per_gpu:.3f} req/s/GPU).")
    out.print(advice.verdict)
    if args.manifest is not None:
        args.manifest.write_text(yaml.safe_dump(manifest(advice, args.name), sort_keys=False))
        out.print(f"wrote {args.manifest}")
    if seed is not None:
        seed.dump(args.capacity_profile)
        out.print(f"wrote {args.capacity_profile}")
    if args.json is not None:
        args.json.write_text(json.dumps({
            "recommendation": describe(best.compared.config),
            "verdict": advice.verdict,
            "facts": advice.facts,
            "ranking": [
                {"configuration": r.label, "layout": r.compared.config.label, "gpus": r.compared.gpus,
                 "goodput_rps": round(r.compared.goodput.goodput_rps, 6),
                 "goodput_per_gpu": round(r.compared.per_gpu, 6), "refined": r.refined,
                 "estimate": "refined" if r.refined else "coarse (short window; overstates goodput)",
                 "ttft_p90_s": r.ttft_p90, "tpot_p90_s": r.tpot_p90}
                for r in advice.ranked
            ],
        }, indent=2, sort_keys=True) + "\n")
        out.print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
