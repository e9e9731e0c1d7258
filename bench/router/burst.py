"""Burst benchmark: N streaming chat requests arriving at one instant, through pdserve's
router and through vllm-router and sglang-router, side by side in one run (issue 14).

    flock /tmp/pdserve-bench.lock .venv/bin/python bench/router/burst.py --streams 256 1024 --rounds 5 \\
        --out bench/router/results/burst.json --plot bench/router/results/burst.png

One mock vLLM worker (aggregated: no prefill/decode split, so every router is a plain
proxy in front of the same worker; zero modelled GPU time by default, so every delay is
serving overhead) with the served model's tokenizer (a byte-level BPE with Llama 3's
chat template, trained locally: pdserve's router tokenizes every chat request the way
vLLM does, the Rust routers do not tokenize). Targets, each its own process:

- ``direct``: the worker itself (the floor);
- ``pdserve`` (``--processes 1``) and ``pdserve-2proc`` (``--processes 2``, what the
  cgroup default gives a 2-CPU pod), policy kv_aware (pdserve's default), with aiohttp's
  front end (``--http-server aiohttp``: the names date from when it was the default);
- ``vllm-router`` 0.1.17 and ``sglang-router`` 0.3.2 from PyPI (``--peers-python``: a venv
  with both; policy ``--rust-policy``, round_robin by default: their cheapest);
- ``pdserve-lean`` and ``pdserve-lean-2proc`` (only when named): the same two with the lean
  HTTP/1.1 front end (``--http-server lean``, the router's default since session 11), each
  judged per round against its aiohttp twin too (``*_vs_aiohttp``);
- ``pdserve-baseline`` with ``--baseline-src``: pdserve's router from another source tree
  (with that tree's default front end);
- ``pdserve-mock-tokenizer`` (only when named): ``--tokenizer-mode mock``, the router without
  the model's tokenizer (approximate ids: not a deployable setting, an attribution of its CPU).
- ``python-floor`` (only when named): ``python_floor.py``, the least a Python streaming proxy
  does (uvloop, httptools, JSON parsed once, round robin, bytes relayed unparsed): not a router, the
  floor under any Python data path, so the gap to the Rust routers splits into language and features.

Modules: this one runs the targets and the rounds; ``burst_measure.py`` one burst and its
numbers; ``burst_report.py`` the ratios, verdicts, table and plot; ``burst_profile.py``
``--profile``'s py-spy sampling; ``burst_syscalls.py`` ``--syscalls``' system call counts.

Each burst: ``--client-procs`` load processes (``burst_client.py``, one connection per
stream, so the load generator is not one saturated event loop) open N streams at one
wall-clock instant. TTFT is measured from that instant to the first content token. The
router's CPU seconds (utime + stime of its process tree, from /proc) over the burst,
divided by the content tokens streamed, give its CPU per streamed token. Every target
gets one unmeasured warm-up burst per N, then ``--rounds`` measured bursts in rotating
order; the targets are judged per round against the better Rust router of the same
round (ratios), reported as the median over rounds [min..max].
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from procs import free_port, start_proc  # noqa: E402
from resultmeta import Run, write_result  # noqa: E402

from burst_client import prompts_for  # noqa: E402
from burst_measure import MODEL, burst_once  # noqa: E402
from burst_profile import profile_start, profile_stop, profile_summary  # noqa: E402
from burst_syscalls import check_perf, per_token, syscalls_start, syscalls_stop  # noqa: E402
from burst_report import LEAN_TWINS, RUST, markdown, plot, summarise, verdicts  # noqa: E402

from pdserve.tokenization import load_tokenizer  # noqa: E402
from pdserve.tokenization.testing import build_bpe_tokenizer  # noqa: E402
from pdserve.worker.testing import start_worker  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TARGETS = ("direct", "pdserve", "pdserve-2proc", *RUST)


def peer_versions(python: Path) -> dict[str, str]:
    if not python.exists():
        return {}
    code = ("import importlib.metadata as m, json; print(json.dumps({p: m.version(p) for p in "
            "('vllm-router', 'sglang-router')}))")
    r = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=False)
    return json.loads(r.stdout) if r.returncode == 0 else {}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, nargs="+", default=[256, 1024], help="simultaneous streams per burst")
    ap.add_argument("--rounds", type=int, default=5, help="measured bursts per target and level")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--prompt-words", type=int, default=64)
    ap.add_argument("--client-procs", type=int, default=2, help="load processes sharing each burst")
    ap.add_argument("--speedup", type=float, default=1e9, help="mock worker --mock-speedup (1e9: no GPU time)")
    ap.add_argument("--targets", nargs="+", default=list(TARGETS),
                    choices=[*TARGETS, *LEAN_TWINS, "pdserve-baseline", "pdserve-mock-tokenizer", "python-floor"],
                    help="direct is always run")
    ap.add_argument("--rust-policy", default="round_robin", help="vllm-router / sglang-router --policy")
    ap.add_argument("--peers-python", type=Path, default=ROOT / ".cache" / "peers-venv" / "bin" / "python",
                    help="a Python with vllm-router and sglang-router installed (the `peers` extra)")
    ap.add_argument("--baseline-src", type=Path, default=None,
                    help="src/ of another pdserve tree (`git archive COMMIT src | tar -x -C DIR`): target "
                         "pdserve-baseline, its router with --processes 1")
    ap.add_argument("--pin", default=None, metavar="ROUTER_CPUS:LOAD_CPUS",
                    help="taskset the routers to ROUTER_CPUS and the worker and load clients to LOAD_CPUS")
    ap.add_argument("--lead-s", type=float, default=1.0, help="seconds the load processes get to start")
    ap.add_argument("--timeout", type=float, default=120.0, help="per stream")
    ap.add_argument("--profile", action="store_true",
                    help="sample the pdserve router with py-spy (on PATH or next to this Python) over its measured "
                         "bursts and add where its CPU goes to the result (the `profile` key)")
    ap.add_argument("--profile-target", default="pdserve-lean",
                    help="with --profile: the single-process pdserve target to sample (the default router is the lean one)")
    ap.add_argument("--profile-dir", type=Path, default=None,
                    help="with --profile: keep py-spy's raw folded stacks here (default: a temporary folder)")
    ap.add_argument("--syscalls", action="store_true",
                    help="count every router's system calls over each measured burst with perf's syscall "
                         "tracepoints (burst_syscalls.py; needs perf and the right to trace) and add them per "
                         "streamed token to each round (`router_syscalls_per_token`)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--plot", type=Path, default=None)
    ap.add_argument("--replot", type=Path, default=None, help="only redraw --plot and the .md from a results JSON")
    args = ap.parse_args()
    if args.replot:
        doc = json.loads(args.replot.read_text())
        doc["summary"] = {lv: summarise(rs) for lv, rs in doc["rounds"].items()}  # this version's ratios
        doc["verdicts"] = verdicts(doc["summary"])
        args.replot.write_text(json.dumps(doc, indent=2) + "\n")
        args.replot.with_suffix(".md").write_text(markdown(doc))
        plot(doc, args.plot or args.replot.with_suffix(".png"))
        return 0
    targets = ["direct", *[t for t in args.targets if t != "direct"]]
    if "pdserve-baseline" in targets and not args.baseline_src:
        ap.error("target pdserve-baseline needs --baseline-src")
    run = Run(runs=args.rounds)
    router_cpus = load_cpus = None
    if args.pin:
        router_cpus, load_cpus = args.pin.split(":")
        os.sched_setaffinity(0, {int(c) for c in load_cpus.split(",")})
    errors: dict[str, str] = {}
    if args.syscalls:
        check_perf()
    with ExitStack() as stack:
        perf_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="burst-perf-"))) if args.syscalls else None
        profile_dir = None
        if args.profile:
            profile_dir = args.profile_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="burst-prof-")))
            profile_dir.mkdir(parents=True, exist_ok=True)
        tok = build_bpe_tokenizer(stack.enter_context(tempfile.TemporaryDirectory(prefix="burst-tok-")))
        w = stack.enter_context(start_worker(MODEL, speedup=args.speedup, tokenizer=str(tok),
                                             args=["--max-num-seqs", "4096", "--max-num-batched-tokens", "1048576"]))
        if load_cpus:
            subprocess.run(["taskset", "-a", "-cp", load_cpus, str(w.proc.pid)], check=True, capture_output=True)
        urls: dict[str, tuple[str, int | None]] = {"direct": (w.url, None)}
        router = [sys.executable, "-m", "pdserve.cli", "router", "--decode", w.url, "--tokenizer", str(tok),
                  "--log-level", "WARNING"]
        for name, extra, src in (("pdserve", ["--processes", "1", "--http-server", "aiohttp"], None),
                                 ("pdserve-2proc", ["--processes", "2", "--http-server", "aiohttp"], None),
                                 ("pdserve-lean", ["--processes", "1", "--http-server", "lean"], None),
                                 ("pdserve-lean-2proc", ["--processes", "2", "--http-server", "lean"], None),
                                 ("pdserve-baseline", ["--processes", "1"], args.baseline_src),
                                 ("pdserve-mock-tokenizer", ["--processes", "1", "--tokenizer-mode", "mock"], None)):
            if name not in targets:
                continue
            env = {**os.environ, "PYTHONPATH": str(src.resolve())} if src else None
            port = free_port()
            proc = start_proc(stack, [*router, *extra, "--port", str(port)], f"http://127.0.0.1:{port}/health",
                              router_cpus, env)
            urls[name] = (f"http://127.0.0.1:{port}", proc.pid)
        peers_bin = args.peers_python.parent
        for name, cmd in (("vllm-router", [str(peers_bin / "vllm-router"), "--log-level", "warning"]),
                          ("sglang-router", [str(peers_bin / "sglang-router"), "launch", "--log-level", "warn"])):
            if name not in targets:
                continue
            if not Path(cmd[0]).exists():
                errors[name] = f"not installed next to {args.peers_python}"
                continue
            port = free_port()
            # Both default their metrics exporter to port 29000: give each its own.
            proc = start_proc(stack, [str(args.peers_python), *cmd, "--worker-urls", w.url, "--policy",
                                      args.rust_policy, "--host", "127.0.0.1", "--port", str(port),
                                      "--prometheus-port", str(free_port())],
                              f"http://127.0.0.1:{port}/health", router_cpus)
            urls[name] = (f"http://127.0.0.1:{port}", proc.pid)
        if "python-floor" in targets:
            port = free_port()
            proc = start_proc(stack, [sys.executable, str(Path(__file__).resolve().parent / "python_floor.py"),
                                      "--port", str(port), "--worker-urls", w.url],
                              f"http://127.0.0.1:{port}/health", router_cpus)
            urls["python-floor"] = (f"http://127.0.0.1:{port}", proc.pid)
        rounds: dict[str, dict[str, list[dict]]] = {}
        for streams in args.streams:
            procs = max(1, min(args.client_procs, streams))
            rs: dict[str, list[dict]] = {name: [] for name in urls}
            for name, (url, pid) in urls.items():  # warm-up: first-use costs, connection pools
                print(f"warm-up {name} x{streams}", flush=True)
                burst_once(url, streams, procs, args, pid, load_cpus)
            names = list(urls)
            for rnd in range(args.rounds):
                k = rnd % len(names)
                for name in names[k:] + names[:k]:
                    url, pid = urls[name]
                    sampled = profile_dir is not None and name == args.profile_target
                    spy = profile_start(pid, profile_dir, f"{streams}-{rnd}") if sampled else None
                    perf_out = perf_dir / f"{name}-{streams}-{rnd}.csv" if perf_dir is not None else None
                    perf = syscalls_start(pid, perf_out) if perf_out is not None and pid is not None else None
                    r = burst_once(url, streams, procs, args, pid, load_cpus)
                    if spy is not None:
                        profile_stop(spy)
                    if perf is not None and perf_out is not None:
                        r["router_syscalls_per_token"] = per_token(syscalls_stop(perf, perf_out), r["tokens"])
                    rs[name].append(r)
                    print(f"{streams} streams, round {rnd + 1}/{args.rounds}, {name}: TTFT p50 {r['ttft_p50_ms']} "
                          f"p99 {r['ttft_p99_ms']} ms, TPOT p50 {r['tpot_p50_ms']} ms, longest ITL p99 "
                          f"{r['itl_max_p99_ms']} ms, errors {r['errors']}, CPU/token "
                          f"{r.get('router_cpu_us_per_token', '-')} µs, load {r['load_average_1m']}", flush=True)
            rounds[str(streams)] = rs
        prompt_tokens = len(load_tokenizer(str(tok)).chat_ids(
            [{"role": "user", "content": prompts_for(1, 0, args.prompt_words)[0]}]))
        profile = profile_summary(profile_dir, args.profile_target) if profile_dir else None
    summary = {s: summarise(rs) for s, rs in rounds.items()}
    doc = {"bench": "router_burst",
           "setup": (f"one mock worker (--mock-speedup {args.speedup:g}), aggregated (no P/D split), chat requests "
                     f"of ~{args.prompt_words} words, {args.max_tokens} streamed tokens each, a locally trained BPE "
                     f"tokenizer with Llama 3's chat template; pdserve policy kv_aware, Rust routers "
                     f"{args.rust_policy}; {args.client_procs} load processes, one connection per stream; "
                     f"pin {args.pin or 'none'}; {args.rounds} rounds, rotating order, one warm-up burst each"),
           "prompt_tokens": prompt_tokens, "peers": peer_versions(args.peers_python),
           "summary": summary, "verdicts": verdicts(summary), "rounds": rounds, "errors": errors}
    if profile is not None:
        doc["profile"] = profile
    print(json.dumps({"summary": summary, "verdicts": doc["verdicts"]}, indent=1))
    if args.out:
        write_result(args.out, doc, run)
        full = json.loads(args.out.read_text())
        args.out.with_suffix(".md").write_text(markdown(full))
        if args.plot:
            plot(full, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
