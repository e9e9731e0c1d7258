"""Router CPU per request with OpenTelemetry tracing off, on, and on but sampled out.

One mock prefill and one mock decode worker (effectively infinite speed-up: the GPU takes
no time, so the router's work is what is measured) behind three ``pdserve router``
processes started side by side: ``off`` (default, no --otlp-traces-endpoint), ``on``
(every request traced: route, prefill, kv_handoff, decode spans exported over OTLP/HTTP
to a loopback receiver that decodes them) and ``on-ratio0`` (tracing on, sampling ratio
0: spans are created unsampled and nothing is exported) and, with ``--baseline-src``,
``off-baseline`` (the router from before the tracing hooks: what ``off`` costs). Each round drives the same
warm burst of streaming P/D completions through each router in rotating order and reads
the router's CPU time from /proc; the ratio to ``off`` within a round is what to read,
over several rounds (the machine is shared).

    mkdir -p /tmp/pdserve-base2 && git archive HEAD src | tar -x -C /tmp/pdserve-base2
    git diff 906f017 906f017^ -- src/pdserve/router | (cd /tmp/pdserve-base2 && patch -p1)  # no hooks
    flock /tmp/pdserve-bench.lock .venv/bin/python bench/router/tracing_cost.py --requests 400 --rounds 9 \\
        --baseline-src /tmp/pdserve-base2/src --out bench/router/results/tracing_cost.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from overhead_load import measure  # noqa: E402
from procs import free_port, start_proc  # noqa: E402
from resultmeta import Run, spread, write_result  # noqa: E402

from pdserve.common.otlp_sink import OtlpSink  # noqa: E402
from pdserve.worker.testing import start_worker  # noqa: E402

MODEL = "mock-llama"
PD_ARGS = ["--mock-side-channel-port", "0", "--max-num-seqs", "1024",
           "--kv-transfer-config", json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"})]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=400, help="measured requests per router per round")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--baseline-src", type=Path,
                    help="a src/ tree without the tracing hooks (see above): adds "
                         "'off-baseline', the same router without the tracing hooks, to show what 'off' costs")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    run = Run(runs=args.rounds)
    variants: dict[str, list[str] | None] = {"off": [], "on": None, "on-ratio0": ["--otlp-traces-sample-ratio", "0"]}
    if args.baseline_src:
        variants["off-baseline"] = []
    cpu_us: dict[str, list[float]] = {v: [] for v in variants}
    ratios: dict[str, list[float]] = {v: [] for v in variants if v != "off"}
    with ExitStack() as stack, OtlpSink() as sink:
        p = stack.enter_context(start_worker(MODEL, speedup=1e9, args=PD_ARGS))
        d = stack.enter_context(start_worker(MODEL, speedup=1e9, args=PD_ARGS))
        base = [sys.executable, "-m", "pdserve.cli", "router", "--prefill", p.url, "--decode", d.url,
                "--tokenizer-mode", "mock", "--log-level", "WARNING"]
        routers: dict[str, tuple[str, int]] = {}
        for name, extra in variants.items():
            flags = extra if extra is not None else []
            if name.startswith("on"):
                flags = ["--otlp-traces-endpoint", sink.endpoint, *flags]
            env = None
            if name == "off-baseline":
                env = {**os.environ, "PYTHONPATH": str(args.baseline_src.resolve())}
            port = free_port()
            proc = start_proc(stack, [*base, "--port", str(port), *flags], f"http://127.0.0.1:{port}/health",
                              env=env)
            routers[name] = (f"http://127.0.0.1:{port}", proc.pid)
        names = list(variants)
        for rnd in range(args.rounds):
            order = names[rnd % len(names):] + names[:rnd % len(names)]
            this: dict[str, float] = {}
            for name in order:
                url, pid = routers[name]
                r, cpu = asyncio.run(measure(url, MODEL, args.concurrency, args.requests, args.max_tokens, pid,
                                             cold=False))
                this[name] = cpu * 1e6 / args.requests
                cpu_us[name].append(this[name])
            if this["off"] > 0:  # a tiny run can use less than one 10 ms CPU tick
                for name in ratios:
                    ratios[name].append(this[name] / this["off"])
            print(f"round {rnd + 1}: " + ", ".join(f"{n} {this[n]:.0f} µs/request" for n in names), flush=True)
        time.sleep(6)  # the batch processor exports every 5 s: let the last spans arrive
        spans = sink.snapshot()
    traced = {s.trace_id for s in spans if s.service == "pdserve-router"}
    expected = (args.rounds * args.requests) + args.rounds * args.concurrency  # measured + warm-up
    doc = {
        "setup": {"baseline_src": str(args.baseline_src) if args.baseline_src else None, "workers": "1 prefill + 1 decode mock, speedup 1e9", "requests_per_round": args.requests,
                  "concurrency": args.concurrency, "max_tokens": args.max_tokens, "stream": True},
        "router_cpu_us_per_request": {n: spread(v) for n, v in cpu_us.items()},
        "ratio_to_off": {n: spread(v) for n, v in ratios.items() if v},
        "exported": {"traces": len(traced), "spans": len(spans), "expected_traces_on": expected},
    }
    print(json.dumps({k: doc[k] for k in ("ratio_to_off", "exported")}, indent=1))
    print("median router CPU µs/request: " + ", ".join(
        f"{n} {statistics.median(v):.0f}" for n, v in cpu_us.items()))
    if args.out:
        write_result(args.out, doc, run)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
