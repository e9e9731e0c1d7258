"""Router overhead: TTFT and ITL added over going direct to a worker, and router CPU.

Starts one mock vLLM worker with an effectively infinite speed-up (the simulated GPU
takes no time, so any latency is serving overhead), then drives N concurrent
streaming completions against (a) the worker directly, (b) ``pdserve router`` (with
uvloop, and with the stock asyncio loop), and,
if installed in ``--bench-venv``, (c) ``vllm-router`` and (d) ``sglang-router``
(PyPI), all side by side in one run. Reports client-side TTFT/ITL p50/p99 per
concurrency level, the p99 added over direct, and the router's CPU time per 1000
streamed tokens (from /proc). Everything shares this machine's cores, so compare
ratios within one run, not absolute numbers across machines.

    .venv/bin/python bench/router/overhead.py --out bench/router/results/overhead.json

Modules: this one runs the targets; ``overhead_load.py`` the load and what it measures;
``overhead_report.py`` the summaries, table and plots; ``procs.py`` the process helpers the
router benchmarks share (start a service, a free port, CPU seconds from /proc).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

from rich.console import Console
from rich.table import Table

from pdserve.worker.testing import start_worker

sys.path.insert(0, str(Path(__file__).resolve().parent))
from overhead_load import measure, paired, steady  # noqa: E402
from overhead_report import PLOT_MODE, fmt_spread, markdown, plot, plot_steady, steady_summary, summarise  # noqa: E402
from procs import free_port, start_proc  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 64, 256])
    ap.add_argument("--requests-per-stream", type=int, default=3, help="requests = concurrency x this (min 30)")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3,
                    help="interleaved rounds per level (targets alternate, so load drift hits all alike)")
    ap.add_argument("--bench-venv", type=Path, default=ROOT / ".cache" / "bench-venv",
                    help="venv with vllm-router / sglang-router installed (skipped if missing)")
    ap.add_argument("--pin", default=None, metavar="ROUTER_CPUS:LOAD_CPUS",
                    help="e.g. 1:0 -- every router on CPU 1, this client and the worker on CPU 0, so a router "
                         "does not steal the load generator's CPU (direct gets the same client/worker CPUs)")
    ap.add_argument("--baseline-src", type=Path, default=None,
                    help="also run `pdserve router` from this source tree (its src/ folder, e.g. an older commit "
                         "unpacked with `git archive COMMIT src | tar -x -C DIR`) as target pdserve-baseline")
    ap.add_argument("--cold-connections", action="store_true",
                    help="measure each burst on fresh client connections (default: warm keep-alive connections)")
    ap.add_argument("--modes", nargs="+", choices=["burst", "steady", "paired"], default=["burst", "steady", "paired"],
                    help="burst: concurrency x --requests-per-stream requests from a standing start (a third of "
                         "them the initial simultaneous wave); steady: closed-loop streams for --steady-seconds, "
                         "first --discard requests of each stream dropped, each target after direct; paired: the "
                         "same, with as many direct streams running alongside each target's (added = target minus "
                         "those, measured in the same window)")
    ap.add_argument("--steady-seconds", type=float, default=5.0, help="measured window per target and round")
    ap.add_argument("--discard", type=int, default=2, help="steady: requests per stream not recorded (warm-up)")
    ap.add_argument("--worker-src", type=Path, default=None,
                    help="run the mock worker from this source tree's src/ (e.g. a fixed commit unpacked with "
                         "`git archive COMMIT src | tar -x -C DIR`), so router changes are compared on one worker")
    ap.add_argument("--only", nargs="+", default=None, help="run only these targets (direct is always run)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--plot", type=Path, default=None, help="PNG of TTFT/ITL vs concurrency")
    ap.add_argument("--replot", type=Path, default=None, help="only redraw --plot from a results JSON")
    ap.add_argument("--merge", type=Path, nargs="+", default=None,
                    help="only combine results JSONs of runs over different --concurrency levels into --out "
                         "(and --plot)")
    args = ap.parse_args()
    if args.merge:
        docs = [json.loads(p.read_text()) for p in args.merge]
        doc = {**docs[0], "command": " ; ".join(d["command"] for d in docs),
               "load_average_1m_at_start": min(d.get("load_average_1m_at_start", 0) for d in docs),
               "load_average_1m_at_end": max(d["load_average_1m_at_end"] for d in docs),
               "merged_from": [str(p) for p in args.merge]}
        for key in ("results", "steady", "steady_rounds", "paired", "paired_rounds", "errors"):
            merged: dict = {}
            for d in docs:
                for name, v in (d.get(key) or {}).items():
                    if isinstance(v, dict) and key not in ("errors",):
                        merged.setdefault(name, {}).update(v)
                    else:
                        merged[name] = v
            doc[key] = merged
        if args.out:
            args.out.write_text(json.dumps(doc, indent=2) + "\n")
            args.out.with_suffix(".md").write_text(markdown(doc))
        if args.plot:
            plot_steady(doc.get("paired") or doc["steady"], args.plot, PLOT_MODE[bool(doc.get("paired"))])
        return 0
    if args.replot:
        doc = json.loads(args.replot.read_text())
        out = args.plot or args.replot.with_suffix(".png")
        if doc.get("paired") or doc.get("steady"):
            plot_steady(doc.get("paired") or doc["steady"], out, PLOT_MODE[bool(doc.get("paired"))])
        else:
            plot(doc["results"], out)
        if "command" in doc:
            args.replot.with_suffix(".md").write_text(markdown(doc))
        return 0
    console = Console()
    load_start = round(os.getloadavg()[0], 2)
    results: dict[str, dict] = {}
    errors: dict[str, str] = {}
    model = "mock-llama"
    router_cpus = load_cpus = None
    if args.pin:
        router_cpus, load_cpus = args.pin.split(":")
        os.sched_setaffinity(0, {int(c) for c in load_cpus.split(",")})
    with ExitStack() as stack:
        wenv = {"PYTHONPATH": str(args.worker_src.resolve())} if args.worker_src else None
        w = stack.enter_context(start_worker(model, speedup=1e9, env=wenv,
                                             args=["--max-num-seqs", "1024", "--max-num-batched-tokens", "65536"]))
        if load_cpus:
            subprocess.run(["taskset", "-a", "-cp", load_cpus, str(w.proc.pid)], check=True, capture_output=True)
        targets: dict[str, tuple[str, int | None]] = {"direct": (w.url, None)}

        def wanted(name: str) -> bool:
            return not args.only or name in args.only

        router = [sys.executable, "-m", "pdserve.cli", "router", "--decode", w.url, "--policy", "kv_aware",
                  "--log-level", "WARNING", "--tokenizer-mode", "mock", "--processes", "1"]  # variants may override
        variants: list[tuple[str, list[str], dict[str, str] | None]] = [
            ("pdserve", [], None),
            ("pdserve-asyncio", ["--event-loop", "asyncio"], None),
            ("pdserve-aiohttp-client", ["--upstream-client", "aiohttp"], None),
            ("pdserve-2proc", ["--processes", "2"], None),
        ]
        if args.baseline_src:
            variants.append(("pdserve-baseline", [], {**os.environ, "PYTHONPATH": str(args.baseline_src.resolve())}))
        for name, extra, env in variants:
            if not wanted(name):
                continue
            port = free_port()
            proc = start_proc(stack, [*router, "--port", str(port), *extra], f"http://127.0.0.1:{port}/health",
                              router_cpus, env)
            targets[name] = (f"http://127.0.0.1:{port}", proc.pid)
        for name, cmd in (
            ("vllm-router", ["vllm-router", "--worker-urls", w.url, "--policy", "round_robin", "--log-level", "warning"]),
            ("sglang-router", ["sglang-router", "launch", "--worker-urls", w.url, "--policy", "round_robin",
                               "--log-level", "warn"]),
        ):
            exe = args.bench_venv / "bin" / cmd[0]
            if not wanted(name):
                continue
            if not exe.exists():
                errors[name] = f"not installed in {args.bench_venv}"
                continue
            port = free_port()
            try:
                # Both default their metrics exporter to port 29000: give each its own.
                proc = start_proc(stack, [str(exe), *cmd[1:], "--host", "127.0.0.1", "--port", str(port),
                                          "--prometheus-port", str(free_port())],
                                  f"http://127.0.0.1:{port}/health", router_cpus)
                targets[name] = (f"http://127.0.0.1:{port}", proc.pid)
            except RuntimeError as e:
                errors[name] = str(e)
        steady_results: dict[str, dict] = {}
        steady_rounds: dict[str, dict[str, list[dict]]] = {}
        for c in args.concurrency if "steady" in args.modes else []:
            rounds: dict[str, list[dict]] = {name: [] for name in targets}
            names = list(targets)
            for rnd in range(args.rounds):
                # Direct first in every round (its pair for the differences), the others in a
                # rotating order so slow drift of the shared box does not favour one.
                others = [x for x in names if x != "direct"]
                k = rnd % max(len(others), 1)
                for name in ["direct", *others[k:], *others[:k]]:
                    url, pid = targets[name]
                    if f"{name}@{c}/steady" in errors or (args.only and name != "direct" and name not in args.only):
                        continue
                    console.print(f"[bold]{name}[/] steady, concurrency {c}, round {rnd + 1}/{args.rounds}: "
                                  f"{args.steady_seconds:g} s x {args.max_tokens}-token streams")
                    metrics_url = f"{url}/metrics" if name.startswith("pdserve") else None
                    try:
                        r = asyncio.run(steady(url, model, c, args.steady_seconds, args.discard, args.max_tokens, pid,
                                               metrics_url))
                        r["load_average_1m"] = round(os.getloadavg()[0], 2)
                        rounds[name].append(r)
                    except Exception as e:  # record and go on with the others
                        errors[f"{name}@{c}/steady"] = f"{type(e).__name__}: {e}"[:300]
                        rounds[name].append({})  # keep rounds aligned with direct's
            steady_rounds[str(c)] = rounds
            for name, o in steady_summary(rounds).items():
                steady_results.setdefault(name, {})[str(c)] = o
        paired_results: dict[str, dict] = {}
        paired_rounds: dict[str, dict[str, list[dict]]] = {}
        for c in args.concurrency if "paired" in args.modes else []:
            rounds = {}
            names = [x for x in targets if x != "direct"]
            for rnd in range(args.rounds):
                k = rnd % max(len(names), 1)
                for name in [*names[k:], *names[:k]]:
                    url, pid = targets[name]
                    if f"{name}@{c}/paired" in errors:
                        continue
                    console.print(f"[bold]{name}[/] paired with direct, concurrency {c}+{c}, round {rnd + 1}/"
                                  f"{args.rounds}: {args.steady_seconds:g} s")
                    metrics_url = f"{url}/metrics" if name.startswith("pdserve") else None
                    try:
                        t, d = asyncio.run(paired(url, targets["direct"][0], model, c, args.steady_seconds,
                                                  args.discard, args.max_tokens, pid, metrics_url))
                        t["load_average_1m"] = round(os.getloadavg()[0], 2)
                        rounds.setdefault(name, []).append(t)
                        rounds.setdefault(f"direct|{name}", []).append(d)
                    except Exception as e:  # record and go on with the others
                        errors[f"{name}@{c}/paired"] = f"{type(e).__name__}: {e}"[:300]
            paired_rounds[str(c)] = rounds
            for name in names:
                if rounds.get(name):
                    o = steady_summary({"direct": rounds[f"direct|{name}"], name: rounds[name]})
                    o[name]["direct_alongside"] = o["direct"]
                    paired_results.setdefault(name, {})[str(c)] = o[name]
        for c in args.concurrency if "burst" in args.modes else []:
            n = max(30, c * args.requests_per_stream)
            runs: dict[str, list[dict]] = {name: [] for name in targets}
            cpu: dict[str, float] = {name: 0.0 for name in targets}
            for rnd in range(args.rounds):
                for name, (url, pid) in targets.items():
                    if f"{name}@{c}" in errors or (args.only and name != "direct" and name not in args.only):
                        continue
                    console.print(f"[bold]{name}[/] concurrency {c}, round {rnd + 1}/{args.rounds}: "
                                  f"{n} streams x {args.max_tokens} tokens")
                    try:
                        r, used = asyncio.run(measure(url, model, c, n, args.max_tokens, pid, args.cold_connections))
                        runs[name].append(r)
                        cpu[name] += used
                    except Exception as e:  # record and go on with the others
                        errors[f"{name}@{c}"] = f"{type(e).__name__}: {e}"[:300]
            for name, rs in runs.items():
                if not rs:
                    continue
                r = summarise(rs)
                if targets[name][1]:
                    r["router_cpu_ms_per_1k_tokens"] = round(cpu[name] * 1e6 / max(r["tokens"], 1), 2)
                    r["router_cpu_us_per_request"] = round(cpu[name] * 1e6 / max(r["requests"], 1), 1)
                results.setdefault(name, {})[str(c)] = r
    for name, levels in results.items():
        for c, r in levels.items():
            d = results.get("direct", {}).get(c)
            if d and name != "direct" and r["ttft_p99_ms"] is not None:
                r["added_ttft_p50_ms"] = round(r["ttft_p50_ms"] - d["ttft_p50_ms"], 3)
                r["added_ttft_p99_ms"] = round(r["ttft_p99_ms"] - d["ttft_p99_ms"], 3)
                r["added_itl_p99_ms"] = round(r["itl_p99_ms"] - d["itl_p99_ms"], 3)
    table = Table(title="client-side latency (ms) by concurrency; added = minus direct")
    for col in ("target", "conc", "TTFT p50", "TTFT p99", "added TTFT p99", "ITL p50", "ITL p99", "CPU ms/1k tok",
                "CPU us/req"):
        table.add_column(col)
    for name, levels in results.items():
        for c, r in levels.items():
            table.add_row(name, c, str(r["ttft_p50_ms"]), str(r["ttft_p99_ms"]), str(r.get("added_ttft_p99_ms", "-")),
                          str(r["itl_p50_ms"]), str(r["itl_p99_ms"]), str(r.get("router_cpu_ms_per_1k_tokens", "-")),
                          str(r.get("router_cpu_us_per_request", "-")))
    if results:
        console.print(table)
    for title, res in (("steady state", steady_results), ("paired with direct", paired_results)):
        if not res:
            continue
        st = Table(title=f"{title}: added over direct (ms), median over rounds [min..max]; router-internal ms")
        for col in ("target", "conc", "added TTFT p50", "added TTFT p99", "added ITL p99", "req/s", "CPU us/req",
                    "internal in->up p99", "internal 1st byte p99"):
            st.add_column(col)
        for name, levels in res.items():
            for c, o in levels.items():
                st.add_row(name, c, fmt_spread(o.get("added_ttft_p50_ms")), fmt_spread(o.get("added_ttft_p99_ms")),
                           fmt_spread(o.get("added_itl_p99_ms")), fmt_spread(o.get("requests_per_s"), 0),
                           fmt_spread(o.get("router_cpu_us_per_request"), 0),
                           fmt_spread(o.get("internal", {}).get("arrival_to_upstream_write", {}).get("p99_le_ms")),
                           fmt_spread(o.get("internal", {}).get("first_upstream_byte_to_client_write", {})
                                      .get("p99_le_ms")))
        console.print(st)
    for k, v in errors.items():
        console.print(f"[red]{k}[/]: {v}")
    doc = {"bench": "router_overhead", "max_tokens": args.max_tokens, "rounds": args.rounds,
           "load_average_1m_at_start": load_start, "load_average_1m_at_end": round(os.getloadavg()[0], 2), "worker": "pdserve worker, --mock-speedup 1e9", "worker_src": str(args.worker_src) if args.worker_src else None,
           "http_stack": "pdserve router: aiohttp server; upstream completions via its own HTTP/1.1 client (http1.py), "
                         "or aiohttp's client with --upstream-client aiohttp (target pdserve-aiohttp-client); "
                         "httpx was not measured",
           "cpus": os.cpu_count(), "pin": args.pin, "cold_connections": args.cold_connections,
           "command": " ".join(sys.argv), "modes": args.modes, "steady_seconds": args.steady_seconds,
           "discard": args.discard, "results": results, "steady": steady_results, "steady_rounds": steady_rounds,
           "paired": paired_results, "paired_rounds": paired_rounds,
           "errors": errors}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=2) + "\n")
        args.out.with_suffix(".md").write_text(markdown(doc))
    if args.plot:
        if paired_results or steady_results:  # the differences the target is judged on
            plot_steady(paired_results or steady_results, args.plot, PLOT_MODE[bool(paired_results)])
        else:
            plot(results, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
