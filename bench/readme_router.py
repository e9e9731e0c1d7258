"""The router's part of the README tables: the routing windows beside Dynamo (bench/router/README.md's
tables and the README rows), decision time, overhead and the burst runs (``bench/readme_table.py``
puts them in)."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from readme_common import Row, _load, _pct, _provenance, _spread


def _hit(x: float | dict[str, Any]) -> str:
    if isinstance(x, dict):
        return f"{x['median']:.3f} [{x['min']:.3f}..{x['max']:.3f}]" if x["n"] > 1 else f"{x['median']:.3f}"
    return f"{x:.3f}"


def _over(x: float | dict[str, Any], what: str) -> str:
    return f" over {x['n']} {what}" if isinstance(x, dict) and x["n"] > 1 else ""


def _med(x: float | dict[str, Any]) -> float:
    return float(x["median"]) if isinstance(x, dict) else float(x)


def verdict(d: dict[str, Any], policy: str = "kv_aware") -> str:
    """Whether ``policy`` (kv_aware) meets the routing target on this window: hit ratio >= the
    median of Dynamo kv_router's runs, and max/mean requests <= 1.1."""
    kv, k = d["results"][policy], d.get("dynamo", {}).get("kv_router")
    if k is None:
        return "no Dynamo run"
    misses = []
    if _med(kv["prefix_hit_ratio"]) < _med(k["prefix_hit_ratio"]):
        misses.append("hit ratio below Dynamo's median")
    if _med(kv["max_mean_requests"]) > 1.1:
        misses.append("max/mean > 1.1")
    return "target met" if not misses else "target missed: " + ", ".join(misses)


def _rank_test(ours: float | dict[str, Any], theirs: float | dict[str, Any]) -> str:
    """How sure the verdict is: the two-sided Mann-Whitney p of pdserve's tie phases against Dynamo's runs
    (rank-based, as neither spread is normal: both come from chaotic replays)."""
    if not (isinstance(ours, dict) and isinstance(theirs, dict) and "values" in ours and "values" in theirs):
        return ""
    from scipy.stats import mannwhitneyu  # statsmodels' dependency

    p = float(mannwhitneyu(ours["values"], theirs["values"], alternative="two-sided").pvalue)
    return f" (kv_aware vs Dynamo's runs, two-sided Mann-Whitney p = {p:.2g}, {ours['n']} vs {theirs['n']})"


def routing(d: dict[str, Any], rel: str = "") -> str:
    r, dyn = d["results"], d.get("dynamo", {})
    kv = r["kv_aware"]
    role = ROUTING_ROLE.get(rel)
    k_hit = dyn.get("kv_router", {}).get("prefix_hit_ratio")
    test = _rank_test(kv["prefix_hit_ratio"], k_hit) if k_hit is not None else ""
    txt = (f"{d['layout']}, {d['trace']} {d['window']}{f' ({role})' if role else ''}: {verdict(d)}{test}; "
           f"pdserve kv_aware hit ratio {_hit(kv['prefix_hit_ratio'])}{_over(kv['prefix_hit_ratio'], 'tie phases')}, "
           f"max/mean requests {_med(kv['max_mean_requests']):.2f}, TTFT p90 {_pct(-kv['ttft_p90_gain_vs_round_robin'])} vs "
           f"its round_robin")
    if "kv_router" in dyn:
        k = dyn["kv_router"]
        txt += (f"; Dynamo kv_router {_hit(k['prefix_hit_ratio'])} over {k['prefix_hit_ratio']['n']} runs, max/mean "
                f"{_med(k['max_mean_requests']):.2f}, TTFT p90 {_pct(-k['ttft_p90_gain_vs_round_robin'])} vs its "
                f"round_robin; round_robin hit ratio {_hit(r['round_robin']['prefix_hit_ratio'])} (pdserve) / "
                f"{_hit(dyn['round_robin']['prefix_hit_ratio'])} (Dynamo)")
    if DECODE_REUSE in r:
        x = r[DECODE_REUSE]
        txt += (f"; with decode-side reuse (--decode-reuse-threshold-tokens {d['decode_reuse_threshold_tokens']}, "
                f"which Dynamo's replay does not model): {verdict(d, DECODE_REUSE)}, hit ratio "
                f"{_hit(x['prefix_hit_ratio'])}, max/mean requests {_med(x['max_mean_requests']):.2f}")
    return txt + f"; upper bound (unlimited shared cache) {d['bound']['hit_ratio']:.3f}"


ROUTING_FILES = ["bench/router/results/routing_quality.json", "bench/router/results/routing_quality_synthetic.json",
                 "bench/router/results/routing_quality_disagg.json", "bench/router/results/routing_quality_min20.json",
                 "bench/router/results/routing_quality_disagg_min20.json"]
# Which windows the cost weights were tuned on (pdserve.router.policies.cost.CostWeights says
# how): Mooncake minutes 0-10 (and 10-20, 40-50, not in the table) and the synthetic trace;
# minutes 20-30 were held out, in both layouts.
ROUTING_ROLE = {ROUTING_FILES[0]: "tuned on", ROUTING_FILES[1]: "tuned on", ROUTING_FILES[2]: "tuned on",
                ROUTING_FILES[3]: "held out", ROUTING_FILES[4]: "held out"}
# routing_quality.py's row for kv_aware with RoutingSpec.decode_reuse_threshold_tokens on (P/D layouts).
DECODE_REUSE = "kv_aware_decode_reuse"
SIDE_BY_SIDE = ["round_robin", "least_loaded", "kv_aware", DECODE_REUSE, "prefix_approx", "cache_aware",
                "sglang_router_cache_aware", "vllm_router_cache_aware", "dynamo_kv_router_rule", "greedy_global"]


def routing_table(root: Path) -> str:
    """bench/router/README.md's side-by-side table: every window, pdserve's policies and Dynamo's."""
    lines = ["| window | system | policy | hit ratio | TTFT p50 s | TTFT p90 s | TTFT p90 vs own round_robin | "
             "max/mean requests |", "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for rel in ROUTING_FILES:
        d = _load(root, rel)
        where = f"{d['layout']}, {d['trace']} {d['window']} ({d['requests']} req, {ROUTING_ROLE[rel]})"
        groups = [("pdserve", {k: d["results"][k] for k in SIDE_BY_SIDE if k in d["results"]}),
                  ("Dynamo 1.6.1", d.get("dynamo", {}))]
        for system, rows in groups:
            for name, x in rows.items():
                gain = x.get("ttft_p90_gain_vs_round_robin")
                lines.append(f"| {where} | {system} | {name} | {_hit(x['prefix_hit_ratio'])} | "
                             f"{_med(x['ttft_p50_s']):.3f} | {_med(x['ttft_p90_s']):.3f} | "
                             f"{'' if gain is None else _pct(-gain)} | {_med(x['max_mean_requests']):.2f} |")
        b = d["bound"]
        lines.append(f"| {where} | bound | unlimited shared cache, idle engine | {b['hit_ratio']:.3f} | "
                     f"{b['ttft_p50_s']:.3f} | {b['ttft_p90_s']:.3f} | | |")
    lines.append("")
    lines.append("Sources: " + ", ".join(_provenance(_load(root, rel), rel) for rel in ROUTING_FILES) + ".")
    return "\n".join(lines)


REUSE_FILE = "bench/router/results/routing_reuse_gaps.json"


def reuse_table(root: Path) -> str:
    """How long each layout's routed caches hold the window's prompts, beside the share of prompt tokens an
    unlimited cache serves from reuses at most that far apart (bench/router/reuse_gaps.py)."""
    d = _load(root, REUSE_FILE)
    gaps = list(d["windows"][0]["hit_fraction_by_reuse_gap_s"])
    lines = ["Seconds of the window's prompt traffic each layout's routed caches hold, and the share of prompt "
             "tokens one unlimited cache serves from reuses at most g seconds apart:", "",
             "| window | requests | " + " | ".join(f"{name} caches hold s" for name in d["layouts"])
             + " | " + " | ".join(f"g <= {g} s" for g in gaps) + " |",
             "| --- | ---: | " + " | ".join("---:" for _ in d["layouts"]) + " | " + " | ".join("---:" for _ in gaps) + " |"]
    for w in d["windows"]:
        lines.append(f"| {d['trace']} {w['window']} | {w['requests']} | "
                     + " | ".join(f"{w['cache_holds_s'][name]:.1f}" for name in d["layouts"]) + " | "
                     + " | ".join(f"{w['hit_fraction_by_reuse_gap_s'][g]:.3f}" for g in gaps) + " |")
    lines.append("")
    lines.append(f"Source: {_provenance(d, REUSE_FILE)}.")
    return "\n".join(lines)


GAP_FILES = [f"bench/router/results/routing_gap_min{m}.json" for m in (0, 10, 20, 40)]
GAP_ROLE = {"minutes 20-30": "held out"}  # the rest are the tuning windows (CostWeights)


def gap_table(root: Path) -> str:
    """Per-request comparison of kv_aware and Dynamo's kv_router on the P/D windows (bench/router/routing_gap.py)."""
    lines = ["Request by request on the 4P4D windows (`routing_gap.py`; shares of the window's prompt tokens, median "
             "[min..max] over pairs of runs: pdserve tie phase k beside Dynamo run k):", "",
             "| window | pairs | hit at dispatch pdserve / Dynamo | reported hit pdserve / Dynamo | "
             "lost while queued pdserve / Dynamo | Dynamo ahead: pdserve routed away (seen / not yet in its view) | "
             "Dynamo ahead: not cached "
             "anywhere in pdserve | pdserve ahead: Dynamo routed away | pdserve ahead: not cached anywhere in Dynamo |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for rel in GAP_FILES:
        d = _load(root, rel)
        x = d["shares"]
        lines.append(
            f"| {d['layout']}, {d['trace']} {d['window']} ({GAP_ROLE.get(d['window'], 'tuned on')}) | {d['pairs']} | "
            f"{_hit(x['pdserve_dispatch'])} / {_hit(x['dynamo_dispatch'])} | {_hit(x['pdserve_admission'])} / "
            f"{_hit(x['dynamo_admission'])} | {_hit(x['pdserve_lost_while_queued'])} / "
            f"{_hit(x['dynamo_lost_while_queued'])} | {_hit(x['dynamo_ahead_routed_away'])} / "
            f"{_hit(x.get('dynamo_ahead_routed_away_unseen', {'n': 1, 'median': 0.0}))} | "
            f"{_hit(x['dynamo_ahead_not_cached_anywhere'])} | {_hit(x['pdserve_ahead_routed_away'])} | "
            f"{_hit(x['pdserve_ahead_not_cached_anywhere'])} |")
    lines.append("")
    lines.append("Sources: " + ", ".join(_provenance(_load(root, rel), rel) for rel in GAP_FILES) + ".")
    return "\n".join(lines)


def decision(d: dict[str, Any]) -> str:
    k = d["results"]["kv_aware"]
    return (f"{d['workers']} workers, {d['indexed_blocks']:,} indexed blocks, median [range] of per-run percentiles "
            f"over {d['runs']} runs of {d['requests']:,} decisions: kv_aware p99 {_spread(k['cpu_p99_us'], '.0f')} µs "
            f"CPU, {_spread(k['p99_us'], '.0f')} µs wall; p50 {_spread(k['cpu_p50_us'], '.0f')} µs CPU")


def overhead(d: dict[str, Any]) -> str:
    conc = "256"
    parts = []
    for router, res in d["paired"].items():
        a = res[conc]["added_ttft_p99_ms"]
        parts.append(f"{router} {a['median']:+.1f} [{a['min']:+.1f}..{a['max']:+.1f}] ms")
    return (f"added TTFT p99 at {conc} streams, paired with direct, median [min..max] over {d['rounds']} rounds: "
            + ", ".join(parts) + ". This box cannot resolve 2 ms for any router")


def burst(d: dict[str, Any]) -> str:
    parts = []
    for streams, targets in d["summary"].items():
        for name in ("pdserve", "pdserve-2proc", "pdserve-lean", "pdserve-lean-2proc", "pdserve-baseline"):
            o = targets.get(name, {})
            t, c = o.get("ttft_p99_vs_best_rust"), o.get("cpu_per_token_vs_best_rust")
            if t and c:
                errors = o.get("errors", 0)
                ab = o.get("cpu_per_token_vs_baseline")
                parts.append(f"{streams} streams, {name}: TTFT p99 {_spread(t, '.2f')}x, CPU/token {_spread(c, '.2f')}x"
                             + (f" (CPU/token vs pdserve-baseline {_spread(ab, '.2f')}x)" if ab else "")
                             + (f", {errors} errors" if errors else ""))
    return ("ratio to the better of vllm-router / sglang-router in the same round, median [range] over "
            f"{d['meta']['runs']} rounds: " + "; ".join(parts))


BURST_FILES: list[tuple[str, str]] = [  # (how the run was set up, result file), in table order
    ("round_robin", "bench/router/results/burst.json"),
                          ("cache_aware", "bench/router/results/burst_cache_aware.json"),
                          ("round_robin; A/B of the encode change", "bench/router/results/burst_ab.json"),
                          ("cache_aware, new prompts every burst; A/B of session 5's piece cache and block keys",
                           "bench/router/results/burst_ab5.json"),
                          ("cache_aware, new prompts every burst; A/B of all session 5 router changes, 256 streams",
                           "bench/router/results/burst_ab6.json"),
                          ("cache_aware, new prompts every burst; A/B of session 6's word-by-word encode, 256 streams",
                           "bench/router/results/burst_ab7.json"),
                          ("cache_aware, new prompts every burst; the same A/B repeated (second run), 256 streams",
                           "bench/router/results/burst_ab7_run2.json"),
                          ("cache_aware, new prompts every burst; session 6, pdserve's router under py-spy, "
                           "256 streams", "bench/router/results/burst_profile7.json"),
                          ("cache_aware, new prompts every burst; A/B of session 7's relay and request-path changes, "
                           "256 and 1,024 streams", "bench/router/results/burst_ab8.json"),
                          ("cache_aware, new prompts every burst; the same session 7 A/B repeated (second run), "
                           "256 and 1,024 streams", "bench/router/results/burst_ab8_run2.json"),
                          ("cache_aware, new prompts every burst; session 7's router on a quiet machine (third run, "
                           "no baseline), 256 and 1,024 streams", "bench/router/results/burst_ab8_run3.json"),
                          ("cache_aware, new prompts every burst; session 8: A/B of one write per upstream read "
                           "(head and end coalesced), 9 rounds, 256 and 1,024 streams",
                           "bench/router/results/burst_ab9.json"),
                          ("cache_aware, new prompts every burst; the same session 8 A/B repeated (second run), "
                           "9 rounds, 256 and 1,024 streams", "bench/router/results/burst_ab9_run2.json"),
                          ("cache_aware, new prompts every burst; the same session 8 A/B, third run on a quiet "
                           "machine, 9 rounds, 256 and 1,024 streams", "bench/router/results/burst_ab9_run3.json"),
                          ("cache_aware, new prompts every burst; session 9: A/B of the template render's plain "
                           "globals and the one-read body, 5 rounds, 256 and 1,024 streams",
                           "bench/router/results/burst_ab10.json"),
                          ("cache_aware, new prompts every burst; the same session 9 A/B repeated (second run), "
                           "5 rounds, 256 and 1,024 streams", "bench/router/results/burst_ab10_run2.json"),
                          ("cache_aware, new prompts every burst; session 10: the lean HTTP/1.1 front end "
                           "(--http-server lean, opt-in) beside aiohttp's, 7 rounds, 256 and 1,024 streams",
                           "bench/router/results/burst_lean.json"),
                          ("cache_aware, new prompts every burst; the same session 10 comparison repeated (second "
                           "run), 5 rounds, 256 and 1,024 streams", "bench/router/results/burst_lean_run2.json"),
                          *((f"cache_aware, new prompts every burst; session {n}: the lean front end the default "
                             f"(pdserve-lean; pdserve = --http-server aiohttp){quiet}, {run}, 7 rounds, 256 and 1,024 "
                             "streams", f"bench/router/results/burst_lean{n}{suffix}.json")
                            for n, quiet in ((11, ""), (12, ", quiet machine"), (13, ", quiet machine, relay read changes"))
                            for run, suffix in (("first run", ""), ("second run", "_run2"), ("third run", "_run3"))),
                          *((f"cache_aware, new prompts every burst; session 20: the router's CPU in scheduler "
                             f"nanoseconds, the Python floor and the router without its tokenizer beside it, {run}, "
                             "7 rounds, 256 and 1,024 streams", f"bench/router/results/burst20{suffix}.json")
                            for run, suffix in (("first run", ""), ("second run", "_run2"), ("third run", "_run3"),
                                                ("pinned run (--pin 1:0: routers on one core, worker and load on "
                                                 "the other)", "_pinned"))),
                          *((f"cache_aware, new prompts every burst; session 20: A/B of the session's router changes "
                             f"(one-chunk relay read, xxh3 block keys) against 3cb50ce, {run}, 7 rounds, 256 and 1,024 "
                             "streams", f"bench/router/results/burst20_ab{k}.json")
                            for k, run in ((1, "first run"), (2, "second run"), (3, "third run"), (4, "fourth run"),
                                           (5, "fifth run"), (6, "sixth run"))),
]


def router_rows() -> list[Row]:
    """The README rows of the router benchmarks, in table order."""
    return [
        *(Row("Routing beside NVIDIA Dynamo 1.6.1's replay (same window, workers, block size, KV blocks)",
              "kv_aware hit ratio >= Dynamo kv_router at max/mean <= 1.1", rel, partial(routing, rel=rel))
          for rel in ROUTING_FILES),
        Row("Routing decision time", "< 200 µs p99 (CPU)", "bench/router/results/decision_time.json", decision),
        Row("Router overhead vs direct, side by side with vllm-router and sglang-router",
            "<= 2 ms TTFT p99 at 256 streams", "bench/router/results/overhead_pinned_256x7.json", overhead),
        *(Row(f"Router burst: simultaneous streaming chats (one connection each), side by side with vllm-router "
              f"and sglang-router, theirs with {policy} (bench/router/burst.py)", "TTFT p99 <= 1.2x and CPU per "
              "streamed token <= 1.3x the better Rust router", rel, burst)
          for policy, rel in BURST_FILES),
    ]
