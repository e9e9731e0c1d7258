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
  cgroup default gives a 2-CPU pod), policy kv_aware (pdserve's default);
- ``vllm-router`` 0.1.17 and ``sglang-router`` 0.3.2 from PyPI (``--peers-python``: a venv
  with both; policy ``--rust-policy``, round_robin by default: their cheapest);
- ``pdserve-lean`` and ``pdserve-lean-2proc`` (only when named): the same two with the lean
  HTTP/1.1 front end (``--http-server lean``), each judged per round against its aiohttp twin
  too (``*_vs_aiohttp``);
- ``pdserve-baseline`` with ``--baseline-src``: pdserve's router from another source tree;
- ``pdserve-mock-tokenizer`` (only when named): ``--tokenizer-mode mock``, the router without
  the model's tokenizer (approximate ids: not a deployable setting, an attribution of its CPU).

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
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from overhead import TICK, _stat, free_port, pct, start_proc  # noqa: E402
from resultmeta import Run, write_result  # noqa: E402

from burst_client import prompts_for  # noqa: E402

from pdserve.tokenization import load_tokenizer  # noqa: E402
from pdserve.tokenization.testing import build_bpe_tokenizer  # noqa: E402
from pdserve.worker.testing import start_worker  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MODEL = "mock-llama"
RUST = ("vllm-router", "sglang-router")
TARGETS = ("direct", "pdserve", "pdserve-2proc", *RUST)
# The lean front end against the aiohttp one, same processes, same round.
LEAN_TWINS = {"pdserve-lean": "pdserve", "pdserve-lean-2proc": "pdserve-2proc"}
# The targets: pdserve's TTFT p99 and CPU per streamed token against the better
# Rust router of the same round.
TTFT_TARGET, CPU_TARGET = 1.2, 1.3


_numbered = [0]  # prompts numbered so far, over every burst of this run


def cpu_split(pid: int) -> tuple[float, float]:
    """(user, kernel) CPU seconds of a process tree, as overhead.cpu_seconds sums them: the
    process, its threads (the Rust routers' tokio workers) and its live descendants
    (``--processes N``)."""
    user = kernel = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            f = _stat(p)
            user += int(f[11])
            kernel += int(f[12])
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            pass  # exited meanwhile
    return user / TICK, kernel / TICK


def switches(pid: int) -> int:
    """Context switches (voluntary + involuntary) of every thread of a process tree: how
    often the router went to sleep in epoll or was preempted, over the burst. A loop that
    wakes for fewer ready sockets per wake-up pays its fixed costs over fewer tokens."""
    total = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                for line in (task / "status").read_text().splitlines():
                    if "ctxt_switches:" in line:
                        total += int(line.split()[1])
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total


def burst_once(url: str, streams: int, procs: int, args: argparse.Namespace, pid: int | None,
               load_cpus: str | None) -> dict:
    """One burst of ``streams`` simultaneous streams against ``url``; per-burst numbers.
    Every burst's prompts are new (numbered on from the previous burst's): no router may
    answer a round from what it cached of an earlier round (prefix trees, memos, the
    piece cache), as a burst of new conversations would not let it."""
    first = _numbered[0]
    _numbered[0] += streams
    start_at = time.time() + args.lead_s
    cmd = [sys.executable, str(HERE / "burst_client.py"), "--url", url, "--start-at", f"{start_at:.6f}",
           "--max-tokens", str(args.max_tokens), "--prompt-words", str(args.prompt_words), "--model", MODEL,
           "--timeout", str(args.timeout)]
    if load_cpus:
        cmd = ["taskset", "-c", load_cpus, *cmd]
    sizes = [streams // procs + (1 if i < streams % procs else 0) for i in range(procs)]
    clients = [subprocess.Popen([*cmd, "--streams", str(n), "--offset", str(first + sum(sizes[:i]))],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i, n in enumerate(sizes)]
    # The router's CPU over the burst only: read it just before the clients open their streams.
    time.sleep(max(0.0, start_at - time.time() - 0.02))
    u0, k0 = cpu_split(pid) if pid else (0.0, 0.0)
    s0 = switches(pid) if pid else 0
    outs = [c.communicate(timeout=args.timeout + 60) for c in clients]
    u1, k1 = cpu_split(pid) if pid else (0.0, 0.0)
    s1 = switches(pid) if pid else 0
    cpu = (u1 - u0) + (k1 - k0)
    late = time.time() - start_at
    ttft: list[float] = []
    e2e: list[float] = []
    gaps: list[float] = []  # per stream: its longest wait between reads after the first token
    tpot: list[float] = []  # per stream: (end - first token) / (tokens - 1)
    tokens, errors = 0, []
    for c, (out, err) in zip(clients, outs):
        if c.returncode != 0:
            raise RuntimeError(f"load client failed ({c.returncode}): {err.decode()[-500:]}")
        r = json.loads(out)
        ttft += [x for x in r["ttft_s"] if x is not None]
        e2e += [x for x in r["e2e_s"] if x is not None]
        gaps += [x for x in r.get("gap_max_s", []) if x is not None]
        tpot += [(e - t) / (n - 1) for t, e, n in zip(r["ttft_s"], r["e2e_s"], r["tokens"])
                 if t is not None and e is not None and n > 1]
        tokens += sum(r["tokens"])
        errors += r["errors"]
    ms = lambda v: None if v is None else round(v * 1000, 2)  # noqa: E731
    out = {"streams": streams, "ok": len(e2e), "errors": len(errors), "error_examples": sorted(set(errors))[:3],
           "ttft_p50_ms": ms(pct(ttft, 0.5)), "ttft_p99_ms": ms(pct(ttft, 0.99)), "ttft_max_ms": ms(max(ttft, default=None)),
           "e2e_p99_ms": ms(pct(e2e, 0.99)), "tpot_p50_ms": ms(pct(tpot, 0.5)), "tpot_p99_ms": ms(pct(tpot, 0.99)),
           "itl_max_p99_ms": ms(pct(gaps, 0.99)), "tokens": tokens, "wall_s": round(late, 3),
           "load_average_1m": round(os.getloadavg()[0], 2)}
    if pid:
        out["router_cpu_s"] = round(cpu, 3)
        out["router_cpu_us_per_token"] = round(cpu * 1e6 / max(tokens, 1), 2)
        out["router_kernel_share"] = round((k1 - k0) / cpu, 3) if cpu > 0 else None
        out["router_switches_per_token"] = round((s1 - s0) / max(tokens, 1), 4)
    return out


# Where the router's CPU goes, by the innermost matching frame of each py-spy sample
# (first rule that matches, scanning from the leaf up). "event loop and sockets" is time
# in uvloop's C code with no Python frame above the loop: epoll, accept, recv, and the
# callbacks' own C work; a socket write made from Python is charged to its caller.
PROFILE_RULES = (
    ("chat template render", ("HfTokenizer._render",)),
    ("tokenize: BPE encode", ("SegmentEncoder.encode", "WordEncoder.encode", "encode_batch_fast")),
    ("tokenize: other", ("ModelTokenizer.chat_ids", "completion_ids")),
    ("request JSON + validation", ("parse_request", "read_body")),
    ("block keys", ("request_keys",)),
    ("policy + scheduler", ("Scheduler.", "Policy.", "KvAware")),
    ("metrics", ("prometheus_client", "metrics.py")),
    ("relay: per streamed chunk (incl. its socket write)", ("_Pipe.__call__",)),
    ("upstream HTTP/1 client: parse", ("Response._feed", "_Conn.data_received")),
    ("upstream HTTP/1 client: send + connect", ("send_with_retries", "Http1Pool")),
    ("relay: stream setup + end", ("relay_stream",)),
    ("handler: other", ("CompletionHandler",)),
    ("aiohttp server (HTTP parsing, response head)", ("aiohttp/",)),
)


def profile_start(pid: int | None, folder: Path, tag: str) -> subprocess.Popen | None:
    spy = Path(sys.executable).parent / "py-spy"
    exe = str(spy) if spy.exists() else "py-spy"
    try:
        proc = subprocess.Popen([exe, "record", "--pid", str(pid), "--rate", "250", "--format", "raw",
                                 "--nonblocking", "--output", str(folder / f"{tag}.txt")],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except FileNotFoundError:
        raise SystemExit("--profile needs py-spy (pip install py-spy)") from None
    time.sleep(1.0)  # attached before the burst starts
    return proc


def profile_stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
    proc.wait(30)


def profile_summary(folder: Path) -> dict:
    """Share of samples per PROFILE_RULES category, and the 15 hottest leaf frames."""
    cats: dict[str, int] = {}
    leaves: dict[str, int] = {}
    total = 0
    for f in sorted(folder.glob("*.txt")):
        for line in f.read_text().splitlines():
            stack, _, n = line.rpartition(" ")
            if not stack or not n.isdigit():
                continue
            frames = stack.split(";")
            count = int(n)
            total += count
            leaves[frames[-1]] = leaves.get(frames[-1], 0) + count
            if frames[-1].startswith("run_app "):  # no Python frame above the loop's C code
                cat = "event loop and sockets (uvloop C)"
            else:
                cat = next((name for fr in reversed(frames) for name, keys in PROFILE_RULES
                            if any(k in fr for k in keys)), "other")
            cats[cat] = cats.get(cat, 0) + count
    share = lambda c: round(100 * c / max(total, 1), 1)  # noqa: E731
    return {"tool": "py-spy record --rate 250 --nonblocking, pdserve's router over its measured bursts",
            "samples": total,
            "categories_pct": {k: share(v) for k, v in sorted(cats.items(), key=lambda kv: -kv[1])},
            "top_leaf_frames_pct": {k: share(v) for k, v in sorted(leaves.items(), key=lambda kv: -kv[1])[:15]}}


def peer_versions(python: Path) -> dict[str, str]:
    if not python.exists():
        return {}
    code = ("import importlib.metadata as m, json; print(json.dumps({p: m.version(p) for p in "
            "('vllm-router', 'sglang-router')}))")
    r = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=False)
    return json.loads(r.stdout) if r.returncode == 0 else {}


def median_range(xs: list[float]) -> dict:
    xs = sorted(xs)
    return {"median": round(statistics.median(xs), 3), "min": round(xs[0], 3), "max": round(xs[-1], 3),
            "rounds": len(xs)}


def summarise(rounds: dict[str, list[dict]]) -> dict[str, dict]:
    """Per target: median [min..max] over rounds, and per-round ratios to the better Rust
    router of the same round (lower TTFT p99 / lower CPU per token, each on its own)."""
    out: dict[str, dict] = {}
    n = min((len(rs) for rs in rounds.values()), default=0)
    for name, rs in rounds.items():
        o: dict = {}
        for key in ("ttft_p50_ms", "ttft_p99_ms", "ttft_max_ms", "e2e_p99_ms", "tpot_p50_ms", "tpot_p99_ms",
                    "itl_max_p99_ms", "router_cpu_us_per_token", "router_kernel_share", "router_switches_per_token"):
            vals = [r[key] for r in rs if r.get(key) is not None]
            if vals:
                o[key] = median_range(vals)
        o["errors"] = sum(r["errors"] for r in rs)
        o["streams_ok"] = sum(r["ok"] for r in rs)
        if name not in RUST and all(k in rounds for k in RUST):
            for key, label in (("ttft_p99_ms", "ttft_p99_vs_best_rust"),
                               ("router_cpu_us_per_token", "cpu_per_token_vs_best_rust")):
                ratios = []
                for i in range(n):
                    best = min((rounds[k][i].get(key) for k in RUST if rounds[k][i].get(key)), default=None)
                    mine = rs[i].get(key)
                    if best and mine is not None:
                        ratios.append(mine / best)
                if ratios:
                    o[label] = median_range(ratios)
        if name.startswith("pdserve") and name != "pdserve-baseline" and "pdserve-baseline" in rounds:
            # The A/B: this tree's router against --baseline-src's, round by round.
            base = rounds["pdserve-baseline"]
            for key, label in (("ttft_p99_ms", "ttft_p99_vs_baseline"),
                               ("router_cpu_us_per_token", "cpu_per_token_vs_baseline")):
                ratios = [rs[i][key] / base[i][key] for i in range(n) if rs[i].get(key) and base[i].get(key)]
                if ratios:
                    o[label] = median_range(ratios)
        twin = LEAN_TWINS.get(name)
        if twin in rounds:
            base = rounds[twin]
            for key, label in (("ttft_p99_ms", "ttft_p99_vs_aiohttp"),
                               ("router_cpu_us_per_token", "cpu_per_token_vs_aiohttp")):
                ratios = [rs[i][key] / base[i][key] for i in range(n) if rs[i].get(key) and base[i].get(key)]
                if ratios:
                    o[label] = median_range(ratios)
        out[name] = o
    return out


def verdicts(summary: dict[str, dict[str, dict]]) -> dict[str, dict]:
    """Target met when the median ratio over rounds is within the issue's bound."""
    out: dict[str, dict] = {}
    for streams, targets in summary.items():
        for name, o in targets.items():
            if not name.startswith("pdserve"):
                continue
            t, c = o.get("ttft_p99_vs_best_rust"), o.get("cpu_per_token_vs_best_rust")
            out.setdefault(name, {})[streams] = {
                "ttft_p99_within_1.2x": None if t is None else t["median"] <= TTFT_TARGET,
                "cpu_per_token_within_1.3x": None if c is None else c["median"] <= CPU_TARGET,
                "errors": o["errors"]}
    return out


def fmt(o: dict | None, digits: int = 1) -> str:
    if not o:
        return "-"
    return f"{o['median']:.{digits}f} [{o['min']:.{digits}f}..{o['max']:.{digits}f}]"


def markdown(doc: dict) -> str:
    m = doc["meta"]
    lines = [f"# Router burst benchmark\n\nCommand: `{m['command']}`  ",
             f"Commit {m['commit'][:10]}{' (dirty)' if m['dirty'] else ''}, {m['date']}, load average (1 min) "
             f"{m['loadavg_before']['1m']} before, {m['loadavg_after']['1m']} after; {m['cpus']} CPUs; "
             f"{doc['setup']}; chat prompt {doc.get('prompt_tokens')} tokens (the router's tokenizer); peers "
             f"{', '.join(f'{k} {v}' for k, v in doc.get('peers', {}).items()) or 'not installed'}\n",
             "Median over rounds [min..max]; ratios are per round against the better of vllm-router and "
             "sglang-router in the same round.\n",
             *[f"A/B, per round against pdserve-baseline ({streams} streams, {name}): TTFT p99 "
               f"{fmt(o.get('ttft_p99_vs_baseline'), 2)}, CPU/token {fmt(o.get('cpu_per_token_vs_baseline'), 2)}\n"
               for streams, targets in doc["summary"].items() for name, o in targets.items()
               if "cpu_per_token_vs_baseline" in o],
             *[f"Lean front end, per round against its aiohttp twin {LEAN_TWINS[name]} ({streams} streams, {name}): "
               f"TTFT p99 {fmt(o.get('ttft_p99_vs_aiohttp'), 2)}, CPU/token {fmt(o.get('cpu_per_token_vs_aiohttp'), 2)}\n"
               for streams, targets in doc["summary"].items() for name, o in targets.items()
               if "cpu_per_token_vs_aiohttp" in o],
             "| streams | target | TTFT p50 ms | TTFT p99 ms | TTFT p99 / best Rust | router CPU µs/token "
             "| CPU/token / best Rust | kernel share of CPU | TPOT p50 ms | longest ITL p99 ms "
             "| router context switches / token | errors |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for streams, targets in doc["summary"].items():
        for name, o in targets.items():
            lines.append(f"| {streams} | {name} | {fmt(o.get('ttft_p50_ms'), 0)} | {fmt(o.get('ttft_p99_ms'), 0)} "
                         f"| {fmt(o.get('ttft_p99_vs_best_rust'), 2)} | {fmt(o.get('router_cpu_us_per_token'), 1)} "
                         f"| {fmt(o.get('cpu_per_token_vs_best_rust'), 2)} | {fmt(o.get('router_kernel_share'), 2)} "
                         f"| {fmt(o.get('tpot_p50_ms'), 1)} | {fmt(o.get('itl_max_p99_ms'), 0)} "
                         f"| {fmt(o.get('router_switches_per_token'), 2)} | {o['errors']} |")
    prof = doc.get("profile")
    if prof:
        lines += ["", f"Where pdserve's router CPU went ({prof['tool']}; {prof['samples']} samples):", "",
                  "| category | % of samples |", "|---|---:|",
                  *[f"| {k} | {v} |" for k, v in prof["categories_pct"].items()]]
    return "\n".join(lines) + "\n"


def plot(doc: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = list(doc["summary"])
    colour = {name: f"C{i}" for i, name in enumerate(doc["summary"][levels[0]])}  # one colour per target
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.2))
    for ax, key, title in ((axes[0], "ttft_p99_ms", "TTFT p99 (ms)"),
                           (axes[1], "router_cpu_us_per_token", "router CPU per streamed token (µs)")):
        names = [n for n in doc["summary"][levels[0]] if key in doc["summary"][levels[0]][n]]
        width = 0.8 / max(len(names), 1)
        for i, name in enumerate(names):
            os_ = [doc["summary"][lv].get(name, {}).get(key) for lv in levels]
            xs = [j + i * width for j in range(len(levels))]
            med = [o["median"] if o else 0 for o in os_]
            err = [[o["median"] - o["min"] if o else 0 for o in os_], [o["max"] - o["median"] if o else 0 for o in os_]]
            ax.bar(xs, med, width, yerr=err, capsize=3, label=name, color=colour[name])
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(levels))], [f"{lv} streams" for lv in levels])
        ax.set_title(title)
        ax.legend(fontsize=8)
    fig.suptitle("simultaneous streaming chat requests, one mock worker; median over rounds, bars min..max")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, nargs="+", default=[256, 1024], help="simultaneous streams per burst")
    ap.add_argument("--rounds", type=int, default=5, help="measured bursts per target and level")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--prompt-words", type=int, default=64)
    ap.add_argument("--client-procs", type=int, default=2, help="load processes sharing each burst")
    ap.add_argument("--speedup", type=float, default=1e9, help="mock worker --mock-speedup (1e9: no GPU time)")
    ap.add_argument("--targets", nargs="+", default=list(TARGETS),
                    choices=[*TARGETS, *LEAN_TWINS, "pdserve-baseline", "pdserve-mock-tokenizer"],
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
    ap.add_argument("--profile-dir", type=Path, default=None,
                    help="with --profile: keep py-spy's raw folded stacks here (default: a temporary folder)")
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
    with ExitStack() as stack:
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
        for name, extra, src in (("pdserve", ["--processes", "1"], None),
                                 ("pdserve-2proc", ["--processes", "2"], None),
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
                    spy = profile_start(pid, profile_dir, f"{streams}-{rnd}") if profile_dir and name == "pdserve" else None
                    r = burst_once(url, streams, procs, args, pid, load_cpus)
                    if spy is not None:
                        profile_stop(spy)
                    rs[name].append(r)
                    print(f"{streams} streams, round {rnd + 1}/{args.rounds}, {name}: TTFT p50 {r['ttft_p50_ms']} "
                          f"p99 {r['ttft_p99_ms']} ms, TPOT p50 {r['tpot_p50_ms']} ms, longest ITL p99 "
                          f"{r['itl_max_p99_ms']} ms, errors {r['errors']}, CPU/token "
                          f"{r.get('router_cpu_us_per_token', '-')} µs, load {r['load_average_1m']}", flush=True)
            rounds[str(streams)] = rs
        prompt_tokens = len(load_tokenizer(str(tok)).chat_ids(
            [{"role": "user", "content": prompts_for(1, 0, args.prompt_words)[0]}]))
        profile = profile_summary(profile_dir) if profile_dir else None
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
