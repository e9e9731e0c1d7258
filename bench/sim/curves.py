"""Attainment vs per-GPU rate for colocated / chunked / disaggregated (DistServe's figure).

    # DistServe-style: OPT-13B on A100, long prompts, short answers (synthetic, 5 seeds):
    # the README's DistServe row is generated from this command's artefact
    flock /tmp/pdserve-bench.lock .venv/bin/python bench/sim/curves.py --name distserve-opt13b --seeds 1 2 3 4 5
    # a real trace (e.g. the committed Azure excerpt) on Llama-3.1-8B / H100
    .venv/bin/python bench/sim/curves.py --name azure-llama8b --trace bench/sim/data/azure_conv_excerpt.csv \
        --profile llama-3.1-8b-h100 --configs colocated:2 chunked:2 1p1d --ttft-slo-ms 250 --itl-slo-ms 25

For each configuration: a goodput search, then a grid of rates around the knee.
With a synthetic workload and several ``--seeds`` each seed draws its own trace and the
goodput per GPU (and each configuration's ratio to the first one) is reported as median
and spread over the seeds; the curves plotted are the first seed's.
Writes bench/sim/results/curves_NAME.json (with command, commit, date and load) and .png.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from pdserve.sim.config import SimConfig, parse_layout
from pdserve.sim.goodput import GoodputResult, Probe
from pdserve.sim.metrics import Slo
from pdserve.sim.plots import attainment_curves
from pdserve.sim.simulator import run_simulation
from pdserve.sim.sweep import goodput_of, probe_window
from pdserve.sim.traces import Trace, load_trace, synthetic_trace

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from resultmeta import Run, spread, write_result  # noqa: E402
GRID = (0.3, 0.6, 0.8, 0.9, 1.1, 1.25, 1.5)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", default="distserve-opt13b")
    ap.add_argument("--trace", type=Path, default=None, help="trace file (default: synthetic 1024-2048 in / 16-48 out)")
    ap.add_argument("--profile", default="opt-13b-a100")
    ap.add_argument("--configs", nargs="+", default=["colocated:1", "chunked:1", "2p1d"])
    ap.add_argument("--ttft-slo-ms", type=float, default=1000.0)
    ap.add_argument("--itl-slo-ms", type=float, default=40.0)
    ap.add_argument("--target", type=float, default=0.9)
    ap.add_argument("--kv-link-gbps", type=float, default=100.0)
    ap.add_argument("--window", type=float, default=60.0, help="seconds of arrivals per probe at its rate")
    ap.add_argument("--max-requests", type=int, default=1000)
    ap.add_argument("--requests", type=int, default=4000, help="synthetic trace length (default 4000)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[5],
                    help="synthetic-trace seeds; numbers are median and spread over them (default: 5)")
    ap.add_argument("--grid", type=float, nargs="*", default=list(GRID),
                    help="extra rates around the knee, as multiples of it, for the plot")
    ap.add_argument("--out", type=Path, default=HERE / "results", help="folder for curves_NAME.{json,png}")
    args = ap.parse_args()
    run = Run(runs=len(args.seeds))
    con = Console()
    slo = Slo(ttft_s=args.ttft_slo_ms / 1000, tpot_s=args.itl_slo_ms / 1000, target=args.target)
    per_seed: list[dict[str, object]] = []
    plotted: dict[str, tuple[GoodputResult, int]] = {}
    trace_info: list[dict[str, object]] = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=con, transient=True) as prog:
        task = prog.add_task("configurations", total=len(args.configs) * len(args.seeds))
        for seed in args.seeds:
            if args.trace is None:
                trace = synthetic_trace(args.requests, 1.0, (1024, 2048), (16, 48), seed=seed)
            else:
                trace = load_trace(args.trace)
            trace_info.append({"seed": seed, "source": Path(trace.source).name if args.trace else trace.source,
                               "sha256": trace.sha256, "requests": len(trace.requests)})
            rows = []
            for spec in args.configs:
                cfg = SimConfig(**parse_layout(spec), profile=args.profile, slo=slo, kv_link_gbps=args.kv_link_gbps,
                                policy="least_loaded", seed=seed)
                prog.update(task, description=f"seed {seed} {cfg.label}: goodput search")
                comp = goodput_of(trace, cfg, probe_duration_s=args.window, max_requests=args.max_requests,
                                  max_probes=12, rel_tol=0.03)
                if not plotted.get(cfg.label) and seed == args.seeds[0]:
                    _fill_grid(comp.goodput, trace, cfg, args, prog, task)
                    plotted[cfg.label] = (comp.goodput, comp.gpus)
                rows.append({"config": cfg.label, "gpus": comp.gpus, "goodput_rps": round(comp.goodput.goodput_rps, 4),
                             "goodput_per_gpu": round(comp.per_gpu, 4), "search": comp.goodput.as_dict()})
                prog.advance(task)
            per_seed.append({"seed": seed, "configs": rows})
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    png = attainment_curves(plotted, slo, out / f"curves_{args.name}.png",
                            f"{args.name}: {args.profile}, seed {args.seeds[0]} ({trace_info[0]['requests']} requests)")
    labels = [r["config"] for r in per_seed[0]["configs"]]  # type: ignore[index]
    summary = {}
    for i, label in enumerate(labels):
        vals = [float(s["configs"][i]["goodput_per_gpu"]) for s in per_seed]  # type: ignore[index]
        first = [float(s["configs"][0]["goodput_per_gpu"]) for s in per_seed]  # type: ignore[index]
        summary[label] = {
            "gpus": per_seed[0]["configs"][i]["gpus"],  # type: ignore[index]
            "goodput_per_gpu": spread(vals),
            # Paired per seed: the same trace for both, so the ratio's spread is not the spreads combined.
            f"vs_{labels[0]}": spread([v / f if f else 0.0 for v, f in zip(vals, first, strict=True)]),
        }
    doc = {
        "name": args.name,
        "traces": trace_info,
        "profile": args.profile,
        "slo": slo.model_dump(),
        "kv_link_gbps": args.kv_link_gbps,
        "window_s": args.window,
        "max_requests": args.max_requests,
        "policy": "least_loaded",
        "seeds": args.seeds,
        "summary": summary,
        "per_seed": per_seed,
    }
    path = write_result(out / f"curves_{args.name}.json", doc, run)
    for label, s in summary.items():
        g = s["goodput_per_gpu"]
        con.print(f"{label:>12}: {g['median']:.3f} req/s/GPU [{g['min']:.3f}..{g['max']:.3f}] over {g['n']} seeds")
    con.print(f"wrote {path} and {png}")


def _fill_grid(g: GoodputResult, trace: Trace, cfg: SimConfig, args: argparse.Namespace, prog: Progress,
               task: TaskID) -> None:
    """Probe extra rates around the knee so the plotted curve has points on both sides."""
    knee = g.rate_scale or min(p.rate_scale for p in g.probes)
    seen = {p.rate_scale for p in g.probes}
    for m in args.grid:
        s = knee * m
        if s in seen:
            continue
        prog.update(task, description=f"{cfg.label}: rate x{m}")
        w = probe_window(trace, s, args.window, 200, args.max_requests)
        a = run_simulation(w, cfg, rate_scale=s).summary.attainment
        g.probes.append(Probe(s, s * trace.mean_rate, a))


if __name__ == "__main__":
    main()
