"""``pdserve sim``: replay a trace on a configuration, write result.json, CSV and plots."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pdserve.router.shell.config import add_routing_args, routing_from_args
from pdserve.sim.config import DEFAULT_KV_EVENT_LAG_S, SimConfig, SimConfigError, parse_layout
from pdserve.sim.metrics import Slo
from pdserve.sim.plots import attainment_curves, latency_cdfs
from pdserve.sim.result import dumps, result_document, sweep_entry, write_requests_csv
from pdserve.sim.simulator import run_simulation
from pdserve.sim.sweep import Compared, goodput_of, same_gpus_baselines
from pdserve.sim.traces import TraceError, load_trace


def add_trace_args(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("trace")
    g.add_argument("--trace", required=True, type=Path, help="Azure CSV, Mooncake JSONL or a length CSV")
    g.add_argument("--limit", type=int, default=None, help="replay only the first N requests")
    g.add_argument("--rate-scale", type=float, default=1.0, help="replay this many times faster")
    g.add_argument("--time-scale", type=float, default=1.0, help="multiply arrival times by this")
    g.add_argument("--synthetic-rate", type=float, default=1.0,
                   help="length-only traces: mean arrival rate, req/s (default 1)")
    g.add_argument("--arrival", choices=("poisson", "gamma"), default="poisson",
                   help="length-only traces: arrival process")
    g.add_argument("--arrival-cv", type=float, default=1.0, help="gamma arrivals: inter-arrival CV")
    g.add_argument("--seed", type=int, default=0, help="seed for synthesised arrivals")


def add_engine_args(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("engines")
    g.add_argument("--profile", default=SimConfig.model_fields["profile"].default,
                   help="perf profile (pdserve.worker.perf), e.g. opt-13b-a100")
    g.add_argument("--tp", type=int, default=None, help="tensor-parallel size for every engine")
    g.add_argument("--max-num-seqs", type=int, default=256)
    g.add_argument("--token-budget", type=int, default=512, help="chunked prefill token budget")
    g.add_argument("--decode-token-budget", type=int, default=None,
                   help="disagg: decode engines' max_num_batched_tokens (default 8192, or --token-budget when "
                        "larger): the chunk a decode step carries when it prefills a prompt itself")
    g.add_argument("--max-model-len", type=int, default=131072)
    g.add_argument("--no-prefix-caching", action="store_true")
    g.add_argument("--block-size", type=int, default=None,
                   help="KV block size (default: 16, or 512 for traces with Mooncake hash_ids)")
    g.add_argument("--kv-link-gbps", type=float, default=100.0, help="KV link per instance, Gbit/s")
    g.add_argument("--kv-transfer", choices=("serial", "layerwise"), default="serial")
    g.add_argument("--ingress-ms", type=float, default=0.0,
                   help="host/HTTP time from the client's send to the engine (router hops, parsing); default 0 = "
                   "not modelled. pdserve's mock stack measures ~3 ms on loopback (bench/sim/hop_probe.py)")
    g.add_argument("--pd-handoff-ms", type=float, default=0.0,
                   help="disagg: host/HTTP time from prefill end to the decode side's KV pull, on top of the "
                   "link time; default 0. The mock stack measures ~3 ms on loopback (bench/sim/hop_probe.py)")
    g.add_argument("--step-host-ms", type=float, default=0.0,
                   help="host time added to every engine step beyond the profile's step overhead; default 0")
    v = ap.add_argument_group("what the router sees (default: what the live router sees)")
    v.add_argument("--scrape-interval", type=float, default=0.5,
                   help="seconds between the router's scrapes of engine gauges, as pdserve router's flag")
    v.add_argument("--kv-event-lag-ms", type=float, default=DEFAULT_KV_EVENT_LAG_S * 1000,
                   help="KV event batch publish -> router index lag")
    v.add_argument("--exact-views", action="store_true",
                   help="an idealised router that sees every engine's state at the instant it decides")
    s = ap.add_argument_group("SLOs")
    s.add_argument("--ttft-slo-ms", type=float, default=1000.0)
    s.add_argument("--itl-slo-ms", type=float, default=100.0, help="TPOT (mean inter-token latency) objective")
    s.add_argument("--target", type=float, default=0.9, help="attainment target for goodput")


def engine_fields(args: argparse.Namespace) -> dict[str, object]:
    return {
        "profile": args.profile,
        "tp": args.tp,
        "max_num_seqs": args.max_num_seqs,
        "token_budget": args.token_budget,
        "decode_token_budget": args.decode_token_budget,
        "max_model_len": args.max_model_len,
        "enable_prefix_caching": not args.no_prefix_caching,
        "block_size": args.block_size,
        "kv_link_gbps": args.kv_link_gbps,
        "kv_transfer": args.kv_transfer,
        "ingress_s": args.ingress_ms / 1000,
        "pd_handoff_s": args.pd_handoff_ms / 1000,
        "step_host_s": args.step_host_ms / 1000,
        "view_refresh_s": args.scrape_interval,
        "kv_event_lag_s": args.kv_event_lag_ms / 1000,
        "exact_views": args.exact_views,
        "slo": Slo(ttft_s=args.ttft_slo_ms / 1000, tpot_s=args.itl_slo_ms / 1000, target=args.target),
    }


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="pdserve sim",
        description="Replay a trace in the deterministic discrete-event simulator. Writes DIR/result.json, "
        "DIR/requests.csv, DIR/latency_cdf.png and (with the sweep) DIR/attainment_vs_rate.png.",
    )
    add_trace_args(ap)
    ap.add_argument("--out", type=Path, default=Path("sim-out"), help="output directory (default ./sim-out)")
    ap.add_argument("--config", default="2p2d", help="layout: colocated:N, chunked:N or XpYd (default 2p2d)")
    add_routing_args(ap, block_size=False, admission=False)
    ap.add_argument("--prefill-profile", default=None)
    ap.add_argument("--decode-profile", default=None)
    ap.add_argument("--prefill-tp", type=int, default=None)
    ap.add_argument("--decode-tp", type=int, default=None)
    add_engine_args(ap)
    sw = ap.add_argument_group("goodput sweep")
    sw.add_argument("--no-sweep", action="store_true", help="skip the goodput comparison")
    sw.add_argument("--sweep-duration", type=float, default=30.0,
                    help="each goodput probe replays the trace's first S seconds at the probed rate (default 30)")
    sw.add_argument("--sweep-max-requests", type=int, default=1500, help="cap on requests per probe")
    sw.add_argument("--sweep-probes", type=int, default=8, help="max simulations per configuration")
    ap.add_argument("--quiet", action="store_true", help="no progress output")
    return ap


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    # soft_wrap: an error names a path or a value whole, on one line (rich folds long words at
    # 80 columns when stderr is not a terminal, which cut a trace's path in two).
    err = Console(stderr=True, soft_wrap=True)
    try:
        trace = load_trace(args.trace, synthetic_rate=args.synthetic_rate, arrival_process=args.arrival,
                           arrival_cv=args.arrival_cv, seed=args.seed)
        trace = trace.head(args.limit).scaled(args.rate_scale, args.time_scale)
        config = SimConfig(
            **parse_layout(args.config),
            routing=routing_from_args(args),
            prefill_profile=args.prefill_profile,
            decode_profile=args.decode_profile,
            prefill_tp=args.prefill_tp,
            decode_tp=args.decode_tp,
            seed=args.seed,
            **engine_fields(args),
        )
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=err, disable=args.quiet, transient=True) as prog:
            task = prog.add_task(f"replaying on {config.label}", total=len(trace.requests))
            result = run_simulation(trace, config, progress=lambda i, n: prog.update(task, completed=i))
            compared: list[Compared] = []
            if not args.no_sweep:
                cfgs = same_gpus_baselines(config)
                t2 = prog.add_task("goodput sweep", total=len(cfgs) * args.sweep_probes)
                for c in cfgs:
                    compared.append(goodput_of(trace, c, max_probes=args.sweep_probes,
                                               probe_duration_s=args.sweep_duration,
                                               max_requests=args.sweep_max_requests,
                                               on_probe=lambda *_: prog.advance(t2)))
    except (TraceError, SimConfigError) as e:
        err.print(f"[red]pdserve sim: {e}[/red]")
        return 2
    except ValidationError as e:
        err.print(f"[red]pdserve sim: invalid configuration: {e}[/red]")
        return 2
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    sweep = [sweep_entry(c.config.label, c.goodput, c.gpus) for c in compared]
    doc = result_document(trace, result, rate_scale=args.rate_scale, time_scale=args.time_scale,
                          request_limit=args.limit, sweep=sweep)
    (out / "result.json").write_text(dumps(doc))
    write_requests_csv(result, out / "requests.csv")
    title = f"{Path(trace.source).name}: {config.label} on {config.profile}"
    latency_cdfs(result.records, config.slo, out / "latency_cdf.png", title)
    if compared:
        attainment_curves({c.config.label: (c.goodput, c.gpus) for c in compared}, config.slo,
                          out / "attainment_vs_rate.png", f"{Path(trace.source).name} (first {args.sweep_duration:g} s at each rate)")
    _report(Console(), result, compared, out)
    return 0


def _report(con: Console, result, compared: list[Compared], out: Path) -> None:  # type: ignore[no-untyped-def]
    s = result.summary
    con.print(
        f"{result.config.label}: {s.finished}/{s.requests} finished, attainment {100 * s.attainment:.1f}% "
        f"(TTFT {100 * s.attainment_ttft:.1f}%, TPOT {100 * s.attainment_tpot:.1f}%), "
        f"TTFT p50/p90 {s.ttft['p50']}/{s.ttft['p90']} s, TPOT p50/p90 {s.tpot['p50']}/{s.tpot['p90']} s, "
        f"{result.gpus} GPUs, KV moved {s.kv_bytes_moved / 1e9:.1f} GB"
    )
    for c in compared:
        con.print(f"  goodput {c.config.label:>14}: {c.goodput.goodput_rps:.3f} req/s = {c.per_gpu:.3f} req/s/GPU")
        if c.goodput.goodput_rps == 0 and c.goodput.probes:
            low = min(c.goodput.probes, key=lambda p: p.rate_scale)
            con.print(f"    even at {low.rate_rps:.3g} req/s only {100 * low.attainment:.1f}% of requests meet both SLOs "
                      f"(target {100 * c.goodput.target:.0f}%): the SLOs are out of reach for part of this trace "
                      "(e.g. its longest prompts); relax --ttft-slo-ms / --itl-slo-ms")
    con.print(f"wrote {out}/result.json, requests.csv and plots")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
