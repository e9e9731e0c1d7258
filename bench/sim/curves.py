"""Attainment vs per-GPU rate for colocated / chunked / disaggregated (DistServe's figure).

    # DistServe-style: OPT-13B on A100, long prompts, short answers (synthetic, seeded)
    .venv/bin/python bench/sim/curves.py --name distserve-opt13b
    # a real trace (e.g. the committed Azure excerpt) on Llama-3.1-8B / H100
    .venv/bin/python bench/sim/curves.py --name azure-llama8b --trace bench/sim/data/azure_conv_excerpt.csv \
        --profile llama-3.1-8b-h100 --configs colocated:2 chunked:2 1p1d --ttft-slo-ms 250 --itl-slo-ms 25

For each configuration: a goodput search, then a grid of rates around the knee.
Writes bench/sim/results/curves_NAME.json and .png.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pdserve.sim.config import SimConfig, parse_layout
from pdserve.sim.goodput import GoodputResult, Probe
from pdserve.sim.metrics import Slo
from pdserve.sim.plots import attainment_curves
from pdserve.sim.simulator import run_simulation
from pdserve.sim.sweep import goodput_of, probe_window
from pdserve.sim.traces import load_trace, synthetic_trace

HERE = Path(__file__).resolve().parent
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
    args = ap.parse_args()
    con = Console()
    if args.trace is None:
        trace = synthetic_trace(4000, 1.0, (1024, 2048), (16, 48), seed=5)
    else:
        trace = load_trace(args.trace)
    slo = Slo(ttft_s=args.ttft_slo_ms / 1000, tpot_s=args.itl_slo_ms / 1000, target=args.target)
    curves: dict[str, tuple[GoodputResult, int]] = {}
    rows = []
    t0 = time.perf_counter()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=con, transient=True) as prog:
        task = prog.add_task("configurations", total=len(args.configs))
        for spec in args.configs:
            cfg = SimConfig(**parse_layout(spec), profile=args.profile, slo=slo, kv_link_gbps=args.kv_link_gbps,
                            policy="least_loaded")
            prog.update(task, description=f"{cfg.label}: goodput search")
            comp = goodput_of(trace, cfg, probe_duration_s=args.window, max_requests=args.max_requests,
                              max_probes=12, rel_tol=0.03)
            knee = comp.goodput.rate_scale or min(p.rate_scale for p in comp.goodput.probes)
            seen = {p.rate_scale for p in comp.goodput.probes}
            for g in GRID:
                s = knee * g
                if s in seen:
                    continue
                prog.update(task, description=f"{cfg.label}: rate x{g}")
                w = probe_window(trace, s, args.window, 200, args.max_requests)
                a = run_simulation(w, cfg, rate_scale=s).summary.attainment
                comp.goodput.probes.append(Probe(s, s * trace.mean_rate, a))
            curves[cfg.label] = (comp.goodput, comp.gpus)
            rows.append({"config": cfg.label, "gpus": comp.gpus, "goodput_rps": round(comp.goodput.goodput_rps, 4),
                         "goodput_per_gpu": round(comp.per_gpu, 4), **{"search": comp.goodput.as_dict()}})
            prog.advance(task)
    out = HERE / "results"
    out.mkdir(parents=True, exist_ok=True)
    png = attainment_curves(curves, slo, out / f"curves_{args.name}.png",
                            f"{args.name}: {args.profile}, {trace.format} trace ({len(trace.requests)} requests)")
    doc = {
        "name": args.name,
        "trace": {"source": Path(trace.source).name if args.trace else trace.source, "sha256": trace.sha256},
        "profile": args.profile,
        "slo": slo.model_dump(),
        "kv_link_gbps": args.kv_link_gbps,
        "window_s": args.window,
        "max_requests": args.max_requests,
        "configs": rows,
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    (out / f"curves_{args.name}.json").write_text(json.dumps(doc, indent=2) + "\n")
    for r in rows:
        con.print(f"{r['config']:>12}: {r['goodput_rps']:.3f} req/s on {r['gpus']} GPU = {r['goodput_per_gpu']:.3f} req/s/GPU")
    con.print(f"wrote {png}")


if __name__ == "__main__":
    main()
