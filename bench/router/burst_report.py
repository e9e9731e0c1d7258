"""``burst.py``'s judgement and its outputs: per target the median [min..max] over rounds,
per-round ratios to the better Rust router of the same round (the issue's targets), to
``pdserve-baseline`` (an A/B) and of the lean front end to its aiohttp twin; the verdicts;
the Markdown table and the plot."""

from __future__ import annotations

import statistics
from pathlib import Path

RUST = ("vllm-router", "sglang-router")
FLOOR = "python-floor"  # burst.py's python_floor.py target
# The lean front end against the aiohttp one, same processes, same round.
LEAN_TWINS = {"pdserve-lean": "pdserve", "pdserve-lean-2proc": "pdserve-2proc"}
# The targets: pdserve's TTFT p99 and CPU per streamed token against the better
# Rust router of the same round.
TTFT_TARGET, CPU_TARGET = 1.2, 1.3


def median_range(xs: list[float]) -> dict:
    xs = sorted(xs)
    return {"median": round(statistics.median(xs), 3), "min": round(xs[0], 3), "max": round(xs[-1], 3),
            "rounds": len(xs)}


def round_ratios(rounds: dict[str, list[dict]], name: str, key: str, n: int | None = None) -> list[float]:
    """``name``'s ``key`` over the better Rust router's (the lower of the two) in the same round, for each of the
    first ``n`` rounds (default: as many as every target of the level has); [] without both Rust routers."""
    if name not in rounds or not all(k in rounds for k in RUST):
        return []
    if n is None:
        n = min(len(rs) for rs in rounds.values())
    out = []
    for i in range(n):
        best = min((rounds[k][i].get(key) for k in RUST if rounds[k][i].get(key)), default=None)
        mine = rounds[name][i].get(key)
        if best and mine is not None:
            out.append(mine / best)
    return out


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
        calls = [r["router_syscalls_per_token"] for r in rs if r.get("router_syscalls_per_token")]
        if calls:  # burst.py --syscalls
            o["router_syscalls_per_token"] = {g: median_range([c[g] for c in calls]) for g in calls[0]}
        o["errors"] = sum(r["errors"] for r in rs)
        o["streams_ok"] = sum(r["ok"] for r in rs)
        if name not in RUST and all(k in rounds for k in RUST):
            for key, label in (("ttft_p99_ms", "ttft_p99_vs_best_rust"),
                               ("router_cpu_us_per_token", "cpu_per_token_vs_best_rust")):
                ratios = round_ratios(rounds, name, key, n)
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
        if name.startswith("pdserve") and name != "pdserve-baseline" and FLOOR in rounds:
            # Over the Python floor (python_floor.py), round by round: the router's own share of the gap.
            base = rounds[FLOOR]
            key = "router_cpu_us_per_token"
            ratios = [rs[i][key] / base[i][key] for i in range(n) if rs[i].get(key) and base[i].get(key)]
            if ratios:
                o["cpu_per_token_vs_floor"] = median_range(ratios)
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


def syscall_table(caption: str, lead: list[tuple[str, str]], rows: list[tuple[list[str], dict]]) -> list[str]:
    """The markdown lines of a ``--syscalls`` table (none without rows): ``lead`` columns (name, alignment)
    then one column per call group, each cell median [min..max] over rounds."""
    if not rows:
        return []
    groups = list(rows[0][1])
    return ["", caption, "", "| " + " | ".join([name for name, _ in lead] + groups) + " |",
            "|" + "".join(f"{align}|" for _, align in lead) + "---:|" * len(groups),
            *["| " + " | ".join([*cells, *(fmt(calls.get(g), 2) for g in groups)]) + " |" for cells, calls in rows]]


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
    lines += syscall_table("System calls per streamed token over each measured burst (`--syscalls`: perf stat on "
                           "the syscall tracepoints, the router's process tree; reads: read/readv/recvfrom/recvmsg, "
                           "writes: write/writev/sendto/sendmsg):", [("streams", "---:"), ("target", "---")],
                           [([streams, name], o["router_syscalls_per_token"])
                            for streams, targets in doc["summary"].items() for name, o in targets.items()
                            if o.get("router_syscalls_per_token")])
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
