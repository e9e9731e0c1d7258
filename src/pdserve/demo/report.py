"""The demo's report folder: summary.md, timeline.json, requests.csv and two PNG plots."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from pdserve.demo.replay import RequestResult  # noqa: E402
from pdserve.demo.timeline import Sample, Slo, Summary  # noqa: E402


def _ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v * 1000:.0f} ms"


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v * 100:.1f} %"


def plot_load_and_replicas(samples: Sequence[Sample], path: Path) -> None:
    t = [s.t for s in samples]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.plot(t, [s.sent_rps for s in samples], color="tab:gray", label="arrivals (req/s)")
    predicted = [(s.t, s.predicted_rps) for s in samples if s.predicted_rps is not None]
    if predicted:
        ax.plot([p[0] for p in predicted], [p[1] for p in predicted], color="tab:purple", linestyle="--", label="planner forecast (req/s)")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("requests / s")
    ax2 = ax.twinx()
    ax2.step(t, [s.prefill_replicas for s in samples], where="post", color="tab:blue", label="prefill replicas")
    ax2.step(t, [s.decode_replicas for s in samples], where="post", color="tab:orange", label="decode replicas")
    ax2.set_ylabel("replicas")
    top = max([s.prefill_replicas for s in samples] + [s.decode_replicas for s in samples] + [1])
    ax2.set_ylim(0, top + 1)
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="upper left", fontsize="small")
    ax.set_title("Load and pool sizes")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_latency(samples: Sequence[Sample], slo: Slo, path: Path) -> None:
    t = [s.t for s in samples]
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for ax, key, name, limit in ((a1, "ttft", "TTFT", slo.ttft_s), (a2, "itl", "ITL", slo.itl_s)):
        for q, style in (("p50", "-"), ("p90", "-")):
            vals = [getattr(s, f"{key}_{q}") for s in samples]
            ax.plot(t, [v * 1000 if v is not None else float("nan") for v in vals], style, label=f"{name} {q}")
        ax.axhline(limit * 1000, color="red", linestyle="--", label=f"SLO {limit * 1000:.0f} ms")
        ax.set_ylabel(f"{name} (ms)")
        ax.legend(loc="upper left", fontsize="small")
    a2.set_xlabel("time (s)")
    a1.set_title("Latency seen by the client, against the SLO")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(
    out: Path,
    summary: Summary,
    samples: Sequence[Sample],
    results: Sequence[RequestResult],
    slo: Slo,
    settings: dict[str, object],
    planner: dict[str, object] | None = None,
    engine: dict[str, float | str] | None = None,
) -> list[Path]:
    """``engine``: the load engine's own statistics (aiperf's export), shown beside ours as a cross-check."""
    out.mkdir(parents=True, exist_ok=True)
    files = [out / "load_replicas.png", out / "latency.png", out / "timeline.json", out / "requests.csv", out / "summary.md"]
    plot_load_and_replicas(samples, files[0])
    plot_latency(samples, slo, files[1])
    files[2].write_text(json.dumps({"settings": settings, "slo": asdict(slo), "summary": asdict(summary),
                                    "load_engine_stats": engine, "samples": [s.as_dict() for s in samples]}, indent=1))
    with open(files[3], "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["index", "sent_at_s", "prompt_tokens", "output_tokens", "ttft_s", "mean_itl_s", "e2e_s", "error"])
        for r in sorted(results, key=lambda r: r.sent_at):
            mean_itl = sum(r.gaps_s) / len(r.gaps_s) if r.gaps_s else None
            w.writerow([r.index, f"{r.sent_at:.3f}", r.prompt_tokens, r.output_tokens, r.ttft_s, mean_itl, r.e2e_s, r.error or ""])
    s = summary
    endpoint = settings.get("endpoint")
    what = ([f"An already running pdserve router at {endpoint}, replaying a trace in compressed time.",
             "Latencies are measured by the client; pool sizes come from the router's /health."]
            if endpoint and endpoint != "local stack" else
            ["Mock vLLM prefill and decode workers (processes) behind the pdserve router, sized by the",
             "planner's local process-pool actuator, replaying an excerpt of the Azure LLM inference",
             "trace 2023 (conversation) in compressed time. Latencies are measured by the client."])
    lines = [
        "# pdserve demo report",
        "",
        *what,
        "",
        "## Settings",
        "",
        *[f"- {k}: `{v}`" for k, v in settings.items()],
        "",
        "## Results",
        "",
        "| metric | value |",
        "| --- | ---: |",
        f"| requests sent | {s.requests} |",
        f"| succeeded / failed | {s.succeeded} / {s.failed} |",
        f"| TTFT p50 / p90 / p99 | {_ms(s.ttft_p50)} / {_ms(s.ttft_p90)} / {_ms(s.ttft_p99)} |",
        f"| ITL p50 / p90 / p99 | {_ms(s.itl_p50)} / {_ms(s.itl_p90)} / {_ms(s.itl_p99)} |",
        f"| SLO (TTFT / ITL) | {_ms(slo.ttft_s)} / {_ms(slo.itl_s)} |",
        f"| requests meeting both SLOs | {_pct(s.attainment)} (target {_pct(slo.attainment)}) |",
        f"| prefill replicas min / max | {s.min_prefill} / {s.max_prefill} |",
        f"| decode replicas min / max | {s.min_decode} / {s.max_decode} |",
        f"| prefix-cache hit ratio (mean over windows) | {_pct(s.mean_hit_ratio)} |",
        "",
        *(["## Planner", "", *[f"- {k}: {v}" for k, v in planner.items()], ""] if planner else []),
        *(["## The load engine's own statistics", "",
           "aiperf's aggregate over the same requests (its `profile_export_aiperf.json`, seconds shown as ms):", "",
           *[f"- {k}: {_ms(v) if k.startswith(('ttft', 'itl')) and isinstance(v, float) else v}" for k, v in engine.items()],
           ""] if engine else []),
        "## Plots",
        "",
        "![load and replicas](load_replicas.png)",
        "",
        "![latency against SLO](latency.png)",
        "",
        "Raw data: `timeline.json` (one sample per second), `requests.csv` (one row per request).",
        "",
    ]
    files[4].write_text("\n".join(lines))
    return files
