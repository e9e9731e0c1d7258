"""``overhead.py``'s summaries, table and plots: spreads over rounds, steady-state
summaries against direct, Markdown, the latency and CPU plots."""

from __future__ import annotations

from pathlib import Path

from overhead_load import ROUTER_HISTOGRAMS
from procs import pct


def spread(xs: list[float]) -> dict:
    """Median over rounds, with min and max."""
    xs = sorted(xs)
    mid = len(xs) // 2
    med = xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2
    return {"median": round(med, 3), "min": round(xs[0], 3), "max": round(xs[-1], 3), "rounds": len(xs)}


def steady_summary(rounds: dict[str, list[dict]]) -> dict[str, dict]:
    """Per target: added TTFT/ITL p50/p99 as the median (min..max) over rounds of
    (target - direct in the same round), plus the medians of the raw values."""
    out: dict[str, dict] = {}
    direct = rounds.get("direct", [])
    for name, rs in rounds.items():
        if not rs:
            continue
        o: dict = {}
        for key in ("ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms", "requests_per_s",
                    "router_cpu_us_per_request", "router_cpu_busy"):
            vals = [r[key] for r in rs if r.get(key) is not None]
            if vals:
                o[key] = spread(vals)
        if name != "direct":
            for key in ("ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms"):
                diffs = [r[key] - d[key] for r, d in zip(rs, direct) if r.get(key) is not None and d.get(key) is not None]
                if diffs:
                    o["added_" + key] = spread(diffs)
        internal = [r["internal"] for r in rs if r.get("internal")]
        for k in ROUTER_HISTOGRAMS.values():
            for m in ("mean_ms", "p50_le_ms", "p99_le_ms"):
                vals = [i[k][m] for i in internal if i.get(k) and i[k].get(m) is not None]
                if vals:
                    o.setdefault("internal", {}).setdefault(k, {})[m] = spread(vals)
        out[name] = o
    return out


def summarise(runs: list[dict]) -> dict:
    ttfts = [x for r in runs for x in r["ttft"]]
    itls = [x for r in runs for x in r["itl"]]
    ms = lambda v: None if v is None else round(v * 1000, 3)  # noqa: E731
    return {"ttft_p50_ms": ms(pct(ttfts, 0.5)), "ttft_p99_ms": ms(pct(ttfts, 0.99)),
            "itl_p50_ms": ms(pct(itls, 0.5)), "itl_p99_ms": ms(pct(itls, 0.99)),
            "tokens": sum(r["tokens"] for r in runs), "requests": sum(r["requests"] for r in runs),
            "wall_s": round(sum(r["wall_s"] for r in runs), 3)}


def plot(results: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for name, levels in results.items():
        cs = sorted(levels, key=int)
        for ax, key in zip(axes, ("ttft_p50_ms", "ttft_p99_ms", "itl_p99_ms")):
            # A zero (all tokens in one read) has no place on a log axis: leave a gap.
            ys = [levels[c][key] if levels[c][key] else float("nan") for c in cs]
            ax.plot([int(c) for c in cs], ys, marker="o", label=name)
    for ax, title in zip(axes, ("TTFT p50 (ms)", "TTFT p99 (ms)", "ITL p99 (ms)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("concurrent streams")
        ax.set_title(title)
        ax.legend(fontsize=8)
    fig.suptitle("router overhead vs direct (mock worker, zero GPU time; shared 2-core VM)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def fmt_spread(o: dict | None, digits: int = 1) -> str:
    if not o:
        return "-"
    f = lambda v: f"{v:+.{digits}f}" if digits else f"{v:.0f}"  # noqa: E731
    if digits and o["min"] >= 0 and o["median"] >= 0:
        f = lambda v: f"{v:.{digits}f}"  # noqa: E731
    return f"{f(o['median'])} [{f(o['min'])}..{f(o['max'])}]"


PLOT_MODE = {True: "paired with direct streams in the same window", False: "steady state, after direct"}


def plot_steady(steady: dict[str, dict], path: Path, mode: str = "steady state") -> None:
    """Added TTFT p50/p99 and ITL p99 over direct: median over rounds, bars min..max."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    keys = ("added_ttft_p50_ms", "added_ttft_p99_ms", "added_itl_p99_ms")
    names = [n for n in steady if n != "direct"]
    for i, name in enumerate(names):
        levels = steady[name]
        cs = sorted(levels, key=int)
        for ax, key in zip(axes, keys):
            pts = [(int(c), levels[c][key]) for c in cs if levels[c].get(key)]
            if not pts:
                continue
            # Side by side, not on top of each other: a small shift per target.
            xs = [c * (1 + 0.06 * (i - len(names) / 2)) for c, _ in pts]
            med = [o["median"] for _, o in pts]
            err = [[o["median"] - o["min"] for _, o in pts], [o["max"] - o["median"] for _, o in pts]]
            ax.errorbar(xs, med, yerr=err, marker="o", capsize=3, label=name)
    for ax, title in zip(axes, ("added TTFT p50 (ms)", "added TTFT p99 (ms)", "added ITL p99 (ms)")):
        ax.set_xscale("log", base=2)
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_xlabel("concurrent streams")
        ax.set_title(title)
    axes[1].axhline(2, color="red", lw=0.8, ls="--", label="target (2 ms at 256)")
    axes[1].legend(fontsize=8)
    fig.suptitle(f"{mode}, added over direct: median over rounds, bars min..max (shared 2-core VM)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def markdown(doc: dict) -> str:
    """The results as a markdown table (one row per target and concurrency)."""
    lines = [f"# Router overhead\n\nCommand: `{doc.get('command', '')}`  ",
             f"CPU pinning: {doc.get('pin') or 'none'}; connections: {'cold' if doc.get('cold_connections') else 'warm'}; load average (1 min): "
             f"{doc.get('load_average_1m_at_start', '?')} at the start, {doc['load_average_1m_at_end']} at the end; {doc['max_tokens']}-token streams, {doc['rounds']} interleaved rounds.\n",
             "| target | streams | TTFT p50 ms | TTFT p99 ms | added TTFT p50 ms | added TTFT p99 ms | ITL p99 ms "
             "| router CPU us/request | router CPU ms/1k tokens |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, levels in doc.get("results", {}).items():
        for c, r in levels.items():
            lines.append(f"| {name} | {c} | {r['ttft_p50_ms']} | {r['ttft_p99_ms']} | {r.get('added_ttft_p50_ms', '-')} | "
                         f"{r.get('added_ttft_p99_ms', '-')} | {r['itl_p99_ms']} | {r.get('router_cpu_us_per_request', '-')} "
                         f"| {r.get('router_cpu_ms_per_1k_tokens', '-')} |")
    if not doc.get("results"):
        lines = lines[:2]
    else:
        lines.insert(2, "## Burst (standing start; a third of the requests are the first simultaneous wave)\n")
    for key, title in (("paired", "Paired: each target's streams with as many direct streams alongside"),
                       ("steady", "Steady state: each target after direct")):
        if not doc.get(key):
            continue
        lines += ["", f"## {title} ({doc['steady_seconds']:g} s closed loop per target and round, first "
                      f"{doc['discard']} requests of each stream dropped)", "",
                  "Median over rounds [min..max] of the per-round difference to direct (ms); router-internal "
                  "times from its own histograms (p99 is a bucket upper bound).", "",
                  "| target | streams | added TTFT p50 | added TTFT p99 | added ITL p50 | added ITL p99 | TTFT p99 "
                  "| direct alongside TTFT p99 "
                  "| req/s | router CPU us/request | router busy (cores) | internal arrival->upstream write p99 "
                  "| internal 1st byte->client p99 |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for name, levels in doc[key].items():
            for c, o in levels.items():
                it = o.get("internal", {})
                lines.append(
                    f"| {name} | {c} | {fmt_spread(o.get('added_ttft_p50_ms'))} | {fmt_spread(o.get('added_ttft_p99_ms'))} "
                    f"| {fmt_spread(o.get('added_itl_p50_ms'))} | {fmt_spread(o.get('added_itl_p99_ms'))} "
                    f"| {fmt_spread(o.get('ttft_p99_ms'))} "
                    f"| {fmt_spread(o.get('direct_alongside', {}).get('ttft_p99_ms'))} "
                    f"| {fmt_spread(o.get('requests_per_s'), 0)} "
                    f"| {fmt_spread(o.get('router_cpu_us_per_request'), 0)} | {fmt_spread(o.get('router_cpu_busy'), 2)} "
                    f"| {fmt_spread(it.get('arrival_to_upstream_write', {}).get('p99_le_ms'))} "
                    f"| {fmt_spread(it.get('first_upstream_byte_to_client_write', {}).get('p99_le_ms'))} |")
    return "\n".join(lines) + "\n"
