"""Calibrate the engine model against published vLLM measurements and check its qualitative shape.

    python bench/worker/calibration.py [--out-dir bench/worker]

Writes calibration_results.json, calibration_results.md and calibration.png.

1. Replays the published sweep "vLLM throughput-latency sweep on NVIDIA A100"
   (https://johnmusgrave.com/p/vllm-throughput-latency-sweep-on; vLLM 0.23.0,
   Llama-3.1-8B-Instruct BF16, one A100 40GB, 1024-token prompts, 128 output tokens,
   --ignore-eos, closed loop at concurrency C) through the engine model, and compares
   the published numbers: ~75 output tok/s at C=1 (about 77% of the memory-bandwidth
   ceiling) and a 6.6x throughput gain at C=8.
2. The same sweep for llama-3.1-8b-h100, against the H100's bandwidth ceiling scaled by
   the efficiency the A100 measurement shows (no H100 sweep of this exact setup was
   retrievable offline; see the results file).
3. Qualitative facts on H100: prefill throughput vs chunk size (compute saturates at a
   few hundred tokens), decode step time vs batch (weights + KV reads), and the slowdown
   of a 32-request decode step when a 1024-token prefill chunk joins it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.progress import track  # noqa: E402
from rich.table import Table  # noqa: E402

from pdserve.worker.engine import Engine, EngineConfig, EngineRequest  # noqa: E402
from pdserve.worker.perf import PerfModel, load_profile  # noqa: E402

PUBLISHED = {
    "source": "https://johnmusgrave.com/p/vllm-throughput-latency-sweep-on",
    "setup": "vLLM 0.23.0, meta-llama/Llama-3.1-8B-Instruct BF16, 1x A100 40GB, random 1024 in / 128 out, "
             "--ignore-eos, --max-concurrency C",
    "c1_output_tok_s": 75.0,
    "c1_fraction_of_bandwidth_ceiling": 0.77,
    "c8_over_c1_throughput": 6.6,
}


def closed_loop(profile: str, concurrency: int, n_requests: int, isl: int = 1024, osl: int = 128) -> dict[str, float]:
    """Keep `concurrency` requests in flight (vllm bench serve --max-concurrency) and measure the engine."""
    perf = PerfModel(load_profile(profile))
    engine = Engine(EngineConfig(num_blocks=perf.num_kv_blocks(16, 0.9), max_num_seqs=256,
                                 max_num_batched_tokens=8192, max_model_len=isl + osl + 16), perf)
    now = 0.0
    issued = 0
    done = 0
    first_token: dict[str, float] = {}
    arrival: dict[str, float] = {}
    ttfts: list[float] = []
    tpots: list[float] = []

    def issue(t: float) -> None:
        nonlocal issued
        rid = f"r{issued}"
        # distinct prompts (random dataset): no prefix sharing
        engine.add_request(EngineRequest(rid, [1000 + issued * 7 + i for i in range(isl)], max_tokens=osl,
                                         ignore_eos=True, seed=issued), t)
        arrival[rid] = t
        issued += 1

    for _ in range(min(concurrency, n_requests)):
        issue(now)
    while done < n_requests:
        out = engine.step(now)
        now += out.duration
        for ev in out.tokens:
            if ev.index == 0:
                first_token[ev.request_id] = now
                ttfts.append(now - arrival[ev.request_id])
            if ev.finished:
                done += 1
                tpots.append((now - first_token[ev.request_id]) / max(1, osl - 1))
                if issued < n_requests:
                    issue(now)
    return {
        "concurrency": concurrency,
        "output_tok_s": n_requests * osl / now,
        "mean_ttft_ms": 1e3 * sum(ttfts) / len(ttfts),
        "mean_tpot_ms": 1e3 * sum(tpots) / len(tpots),
    }


def qualitative(profile: str) -> dict[str, object]:
    m = PerfModel(load_profile(profile))
    chunks = [16, 32, 64, 128, 256, 384, 512, 1024, 2048, 4096, 8192]
    prefill = [{"tokens": n, "tok_s": n / m.step_time([(n, 0)]),
                "compute_bound": m.breakdown([(n, 0)]).compute_s > m.breakdown([(n, 0)]).memory_s} for n in chunks]
    batches = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    decode = []
    for b in batches:
        bd = m.breakdown(decode_contexts=[1000] * b)
        weights_s = m.weight_bytes / (m.profile.gpu.memory_bandwidth * m.profile.efficiency.mbu)
        decode.append({"batch": b, "step_ms": 1e3 * bd.total_s, "memory_ms": 1e3 * bd.memory_s,
                       "compute_ms": 1e3 * bd.compute_s, "weights_ms": 1e3 * weights_s})
    base = m.step_time(decode_contexts=[1000] * 32)
    mixed = [{"prefill_tokens": n, "slowdown": m.step_time([(n, 0)], [1000] * 32) / base}
             for n in [0, 64, 128, 256, 512, 1024, 2048]]
    crossover = next(p["tokens"] for p in prefill if p["compute_bound"])
    return {"prefill": prefill, "decode": decode, "mixed": mixed, "compute_bound_from_tokens": crossover,
            "decode32_step_ms": 1e3 * base}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", type=Path, default=Path(__file__).parent)
    ap.add_argument("--requests-per-level", type=int, default=20, help="requests per concurrency unit (as the sweep)")
    args = ap.parse_args(argv)
    console = Console()
    levels = [1, 2, 4, 8, 16, 32, 64]
    sweeps: dict[str, list[dict[str, float]]] = {}
    for profile in ("llama-3.1-8b-a100-40gb", "llama-3.1-8b-h100"):
        sweeps[profile] = [closed_loop(profile, c, c * args.requests_per_level)
                           for c in track(levels, description=f"sweep {profile}")]
    a100 = sweeps["llama-3.1-8b-a100-40gb"]
    c1, c8 = a100[0]["output_tok_s"], a100[3]["output_tok_s"]
    h100 = sweeps["llama-3.1-8b-h100"]
    h_perf = PerfModel(load_profile("llama-3.1-8b-h100"))
    h100_expected_c1 = (h_perf.profile.gpu.memory_bandwidth / h_perf.weight_bytes
                        * PUBLISHED["c1_fraction_of_bandwidth_ceiling"])
    checks = [
        {"check": "A100-40GB C=1 output tok/s", "model": c1, "published": PUBLISHED["c1_output_tok_s"]},
        {"check": "A100-40GB C=8 / C=1 throughput", "model": c8 / c1, "published": PUBLISHED["c8_over_c1_throughput"]},
        {"check": "H100 C=1 output tok/s (bandwidth ceiling x published 77% efficiency)", "model": h100[0]["output_tok_s"],
         "published": h100_expected_c1},
    ]
    for c in checks:
        c["error"] = c["model"] / c["published"] - 1
        c["within_30pct"] = abs(c["error"]) <= 0.30
    qual = qualitative("llama-3.1-8b-h100")
    results = {"published": PUBLISHED, "checks": checks, "sweeps": sweeps, "qualitative_h100": qual}
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "calibration_results.json").write_text(json.dumps(results, indent=2))
    _write_markdown(args.out_dir / "calibration_results.md", results)
    _plot(args.out_dir / "calibration.png", sweeps, qual)
    table = Table("check", "model", "published", "error")
    for c in checks:
        table.add_row(c["check"], f"{c['model']:.2f}", f"{c['published']:.2f}", f"{c['error']:+.0%}")
    console.print(table)
    mixed1024 = next(x["slowdown"] for x in qual["mixed"] if x["prefill_tokens"] == 1024)
    console.print(f"prefill compute-bound from {qual['compute_bound_from_tokens']} tokens; "
                  f"1024-token prefill in a 32-decode step: {mixed1024:.1f}x slower")
    return 0 if all(c["within_30pct"] for c in checks) else 1


def _write_markdown(path: Path, r: dict) -> None:
    q = r["qualitative_h100"]
    lines = ["# Engine-model calibration (generated by bench/worker/calibration.py)", "",
             f"Published reference: {r['published']['source']}  ", f"Setup: {r['published']['setup']}", "",
             "| check | model | published | error | within 30% |", "|---|---|---|---|---|"]
    for c in r["checks"]:
        lines.append(f"| {c['check']} | {c['model']:.2f} | {c['published']:.2f} | {c['error']:+.1%} | "
                     f"{'yes' if c['within_30pct'] else 'NO'} |")
    lines += ["", "The H100 row has no direct published sweep behind it (none of this exact setup was retrievable "
              "offline): it checks that the H100 profile keeps the efficiency the A100 measurement shows "
              "(77% of the HBM bandwidth ceiling at batch 1).", "",
              "## Closed-loop sweeps (1024 in / 128 out)", "",
              "| profile | C | output tok/s | mean TTFT ms | mean TPOT ms |", "|---|---|---|---|---|"]
    for prof, rows in r["sweeps"].items():
        for x in rows:
            lines.append(f"| {prof} | {x['concurrency']} | {x['output_tok_s']:.0f} | {x['mean_ttft_ms']:.1f} | "
                         f"{x['mean_tpot_ms']:.2f} |")
    lines += ["", "## Qualitative facts (llama-3.1-8b-h100)", "",
              f"- Prefill becomes compute-bound from **{q['compute_bound_from_tokens']} tokens** per step; "
              f"throughput: " + ", ".join(f"{p['tokens']}: {p['tok_s']:.0f} tok/s" for p in q["prefill"]),
              "- Decode step (context 1000) vs batch: " + ", ".join(
                  f"{d['batch']}: {d['step_ms']:.2f} ms" for d in q["decode"])
              + f"; weight reads alone take {q['decode'][0]['weights_ms']:.2f} ms, so small batches are "
                "dominated by weights and large ones by KV reads.",
              f"- A 32-request decode step takes {q['decode32_step_ms']:.2f} ms; with a prefill chunk joining it: "
              + ", ".join(f"+{m['prefill_tokens']} tokens: {m['slowdown']:.1f}x" for m in q["mixed"]), ""]
    path.write_text("\n".join(lines))


def _plot(path: Path, sweeps: dict, q: dict) -> None:
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.2))
    for prof, rows in sweeps.items():
        ax[0].plot([x["concurrency"] for x in rows], [x["output_tok_s"] for x in rows], marker="o", label=prof)
    ax[0].scatter([1, 8], [PUBLISHED["c1_output_tok_s"], PUBLISHED["c1_output_tok_s"] * PUBLISHED["c8_over_c1_throughput"]],
                  marker="x", s=80, color="k", label="published vLLM (A100 40GB)", zorder=5)
    ax[0].set(xscale="log", yscale="log", xlabel="concurrency", ylabel="output tok/s", title="1024/128 closed loop")
    ax[0].legend(fontsize=7)
    ax[1].plot([p["tokens"] for p in q["prefill"]], [p["tok_s"] for p in q["prefill"]], marker="o")
    ax[1].axvline(q["compute_bound_from_tokens"], ls="--", color="gray")
    ax[1].set(xscale="log", xlabel="prefill chunk tokens", ylabel="prefill tok/s", title="H100 prefill throughput")
    ax[2].plot([m["prefill_tokens"] for m in q["mixed"]], [m["slowdown"] for m in q["mixed"]], marker="o")
    ax[2].set(xlabel="prefill tokens added to a 32-request decode step", ylabel="step time / decode-only",
              title="H100 mixed-step slowdown")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    raise SystemExit(main())
