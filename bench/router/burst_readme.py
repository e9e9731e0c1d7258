"""The burst benchmark's verdict table in bench/router/README.md, generated from result files
(``burst.py --out``), so the README's numbers are the files' and nothing is typed by hand.

    .venv/bin/python bench/router/burst_readme.py bench/router/results/burst_ab9.json \\
        bench/router/results/burst_ab9_run2.json            # rewrites the marked block
    .venv/bin/python bench/router/burst_readme.py --check FILES...   # exit 1 if the block is stale

One row per result file, stream level and pdserve target: the per-round ratios to the better
Rust router of the same round (median [min..max]), whether the median meets the issue's
bound, the A/B against ``pdserve-baseline`` when the run had one, the lean front end against
its aiohttp twin (``pdserve-lean`` / ``pdserve``, ``pdserve-lean-2proc`` / ``pdserve-2proc``), and the stream-latency
columns (TPOT, each stream's longest wait between reads, context switches per token); and, for
runs made with ``--syscalls``, every router's system calls per streamed token.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from readme_block import replace_block, write_or_check  # noqa: E402
from burst_report import FLOOR, fmt, median_range, round_ratios, syscall_table  # noqa: E402

README = HERE / "README.md"
BEGIN, END = "<!-- burst-verdicts:begin (bench/router/burst_readme.py) -->", "<!-- burst-verdicts:end -->"
TTFT_TARGET, CPU_TARGET = 1.2, 1.3


def _met(o: dict | None, bound: float) -> str:
    if not o:
        return "-"
    return "met" if o["median"] <= bound else "**missed**"


def _twin(o: dict) -> str:
    """The lean front end against its aiohttp twin of the same round (burst_report.py LEAN_TWINS)."""
    if "cpu_per_token_vs_aiohttp" not in o:
        return "-"
    return f"{fmt(o.get('ttft_p99_vs_aiohttp'), 2)}, {fmt(o.get('cpu_per_token_vs_aiohttp'), 2)}"


def block(paths: list[Path], root: Path = HERE.parents[1]) -> str:
    lines = [BEGIN, "",
             "| result file (commit, load 1 min before / after, rounds; perf-traced: made with --syscalls) | streams | target | TTFT p99 / best Rust "
             "| <= 1.2x | CPU/token / best Rust | <= 1.3x | CPU/token / pdserve-baseline "
             "| lean / its aiohttp twin: TTFT p99, CPU/token | TPOT p50 ms "
             "| longest ITL p99 ms | context switches / token | errors |",
             "|---|---:|---|---:|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for path in paths:
        doc = json.loads(path.read_text())
        m = doc["meta"]
        rel = path.resolve().relative_to(root) if path.resolve().is_relative_to(root) else path
        # --syscalls runs had perf's tracepoints on every system call: kernel work per call, so more
        # for the routers that make more calls (the Rust ones): their CPU ratios are marked.
        traced = " --syscalls" in m.get("command", "")
        where = (f"[{path.name}]({Path(*rel.parts[2:]) if rel.parts[:2] == ('bench', 'router') else rel}) "
                 f"({m['commit'][:7]}{', dirty' if m['dirty'] else ''}, {m['loadavg_before']['1m']} / "
                 f"{m['loadavg_after']['1m']}, {m['runs']}{', perf-traced' if traced else ''})")
        for streams, targets in doc["summary"].items():
            for name, o in targets.items():
                if not name.startswith("pdserve") or name == "pdserve-baseline":
                    continue
                t, c = o.get("ttft_p99_vs_best_rust"), o.get("cpu_per_token_vs_best_rust")
                lines.append(f"| {where} | {streams} | {name} | {fmt(t, 2)} | {_met(t, TTFT_TARGET)} | {fmt(c, 2)} "
                             f"| {_met(c, CPU_TARGET)} | {fmt(o.get('cpu_per_token_vs_baseline'), 2)} "
                             f"| {_twin(o)} | {fmt(o.get('tpot_p50_ms'), 1)} | {fmt(o.get('itl_max_p99_ms'), 0)} "
                             f"| {fmt(o.get('router_switches_per_token'), 2)} | {o['errors']} |")
    lines += ["", "Rust routers in the same runs (context switches per token, their threads summed):", "",
              "| result file | streams | target | TTFT p99 ms | CPU µs/token | TPOT p50 ms | longest ITL p99 ms "
              "| context switches / token |", "|---|---:|---|---:|---:|---:|---:|---:|"]
    for path in paths:
        doc = json.loads(path.read_text())
        for streams, targets in doc["summary"].items():
            for name, o in targets.items():
                if name in ("vllm-router", "sglang-router"):
                    lines.append(f"| {path.name} | {streams} | {name} | {fmt(o.get('ttft_p99_ms'), 0)} "
                                 f"| {fmt(o.get('router_cpu_us_per_token'), 1)} | {fmt(o.get('tpot_p50_ms'), 1)} "
                                 f"| {fmt(o.get('itl_max_p99_ms'), 0)} "
                                 f"| {fmt(o.get('router_switches_per_token'), 2)} |")
    lines += floor_table(paths)
    lines += pooled_table(paths)
    lines += syscall_table("System calls per streamed token in the runs that counted them (`burst.py --syscalls`; "
                           "reads: read/readv/recvfrom/recvmsg, writes: write/writev/sendto/sendmsg):",
                           [("result file", "---"), ("streams", "---:"), ("target", "---")],
                           [([path.name, streams, name], o["router_syscalls_per_token"]) for path in paths
                            for streams, targets in json.loads(path.read_text())["summary"].items()
                            for name, o in targets.items() if o.get("router_syscalls_per_token")])
    return "\n".join([*lines, "", END])


def floor_table(paths: list[Path]) -> list[str]:
    """Runs with ``python-floor`` (python_floor.py): its CPU per streamed token against the better Rust router, and
    each pdserve target's against the floor's, per round of the same run (median [min..max], burst_report.summarise):
    the language's share of the gap and pdserve's own."""
    rows = []
    for path in paths:
        for streams, targets in json.loads(path.read_text())["summary"].items():
            if FLOOR not in targets:
                continue
            ours = [(n, o) for n, o in targets.items() if n.startswith("pdserve") and n != "pdserve-baseline"]
            for name, o in [(FLOOR, targets[FLOOR]), *ours]:
                rows.append(f"| {path.name} | {streams} | {name} | {fmt(o.get('router_cpu_us_per_token'), 1)} "
                            f"| {fmt(o.get('cpu_per_token_vs_best_rust'), 2)} | {fmt(o.get('cpu_per_token_vs_floor'), 2)} |")
    if not rows:
        return []
    return ["", "The Python floor (`python_floor.py`: uvloop, httptools, JSON parsed once, round robin, bytes relayed "
            "unparsed) in the same runs, and each pdserve target's CPU per streamed token over the floor's, per round:", "",
            "| result file | streams | target | CPU µs/token | CPU/token / best Rust | CPU/token / python-floor |",
            "|---|---:|---|---:|---:|---:|", *rows]


def _pin(doc: dict) -> str:
    """The run's ``--pin`` setting (``none`` when unpinned), from its command."""
    words = doc["meta"].get("command", "").split()
    return words[words.index("--pin") + 1] if "--pin" in words[:-1] else "none"


def pooled_table(paths: list[Path]) -> list[str]:
    """Runs made at one commit with one ``--pin`` setting, pooled: every round's ratio to the better Rust router of
    that round, median [min..max] over all of them, and in how many of the runs the run's own median meets the bound.
    One run's median moves by more than the bounds' margins from run to run on this box; the pool is the steadier
    reading of the same router."""
    groups: dict[tuple[str, bool, str], list[tuple[Path, dict]]] = {}
    for path in paths:
        doc = json.loads(path.read_text())
        # A run from a tree with modified tracked files is not the commit's code: pooled only with its like.
        groups.setdefault((doc["meta"]["commit"], bool(doc["meta"].get("dirty")), _pin(doc)), []).append((path, doc))
    rows = []
    for (commit, dirty, pin), docs in groups.items():
        if len(docs) < 2:
            continue
        names = ", ".join(p.name for p, _ in docs)
        levels = dict.fromkeys(lv for _, d in docs for lv in d["rounds"])
        for streams in levels:
            targets = dict.fromkeys(n for _, d in docs for n in d["rounds"].get(streams, {})
                                    if n.startswith("pdserve") and n != "pdserve-baseline")
            for name in targets:
                cells = []
                for key, label, bound in (("ttft_p99_ms", "ttft_p99_vs_best_rust", TTFT_TARGET),
                                          ("router_cpu_us_per_token", "cpu_per_token_vs_best_rust", CPU_TARGET)):
                    pooled = [x for _, d in docs for x in round_ratios(d["rounds"].get(streams, {}), name, key)]
                    runs = [d["summary"].get(streams, {}).get(name, {}).get(label) for _, d in docs]
                    runs = [o for o in runs if o]
                    o = median_range(pooled) if pooled else None
                    cells += [fmt(o, 2), _met(o, bound), f"{sum(r['median'] <= bound for r in runs)} of {len(runs)}"]
                rows.append(f"| {names} ({commit[:7]}{', dirty' if dirty else ''}, pin {pin}) | {streams} | {name} | "
                            + " | ".join(cells)
                            + f" | {len(pooled)} |")
    if not rows:
        return []
    return ["", "Runs at one commit and one `--pin` setting, pooled: every round's ratio to the better Rust router of "
            "that round (median [min..max] over all the runs' rounds), and in how many runs that run's own median met "
            "the bound (a run from a modified tree is pooled only with runs from the same kind of tree):", "",
            "| runs (commit, --pin) | streams | target | TTFT p99 / best Rust, pooled | <= 1.2x | runs meeting it "
            "| CPU/token / best Rust, pooled | <= 1.3x | runs meeting it | rounds |",
            "|---|---:|---|---:|---|---|---:|---|---|---:|", *rows]


def files_in(text: str) -> list[Path]:
    """The result files the README's block was generated from, in order (its links)."""
    inner = text.split(BEGIN, 1)[1].split(END, 1)[0]
    seen: list[Path] = []
    for name in re.findall(r"\]\((results/[^)\s]+\.json)\)", inner):
        if HERE / name not in seen:
            seen.append(HERE / name)
    return seen


def rewrite(text: str, new_block: str) -> str:
    return replace_block(text, BEGIN, END, new_block)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", type=Path, nargs="*",
                    help="burst.py result files, in the order of the table (default: those the block names now)")
    ap.add_argument("--check", action="store_true", help="exit 1 if the README's block differs from the files'")
    args = ap.parse_args()
    text = README.read_text()
    new = rewrite(text, block(args.files or files_in(text)))
    return write_or_check(README, text, new, args.check, "the burst verdict block is stale; rerun without --check")


if __name__ == "__main__":
    raise SystemExit(main())
