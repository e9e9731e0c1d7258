"""PNG plots of simulation results (matplotlib, Agg backend, no display needed)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from pdserve.sim.goodput import GoodputResult  # noqa: E402
from pdserve.sim.metrics import RequestRecord, Slo  # noqa: E402

# Fixed metadata keeps PNG bytes stable across runs.
_META = {"Software": "pdserve.sim", "Creation Time": None}


def attainment_curves(
    curves: Mapping[str, tuple[GoodputResult, int]], slo: Slo, path: Path, title: str
) -> Path:
    """Attainment vs per-GPU rate, one line per configuration (DistServe's figure shape).

    ``curves`` maps a configuration label to (its goodput search, its GPU count).
    """
    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=110)
    for label, (res, gpus) in curves.items():
        pts = sorted(res.probes, key=lambda p: p.rate_scale)
        if not pts:
            continue
        xs = [p.rate_rps / gpus for p in pts]
        ys = [100 * p.attainment for p in pts]
        line = ax.plot(xs, ys, marker="o", ms=3, label=f"{label} ({gpus} GPU): {res.goodput_rps / gpus:.2f} req/s/GPU")
        if res.goodput_rps > 0:
            ax.axvline(res.goodput_rps / gpus, color=line[0].get_color(), ls=":", lw=1)
    ax.axhline(100 * slo.target, color="grey", ls="--", lw=1, label=f"target {100 * slo.target:.0f}%")
    ax.set_xlabel("request rate per GPU (req/s)")
    ax.set_ylabel("SLO attainment (%)")
    ax.set_ylim(0, 102)
    ax.set_title(f"{title}\nTTFT <= {slo.ttft_s:g} s and TPOT <= {slo.tpot_s * 1000:g} ms")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, metadata=_META)
    plt.close(fig)
    return path


def latency_cdfs(records: Sequence[RequestRecord], slo: Slo, path: Path, title: str) -> Path:
    """CDFs of TTFT and TPOT for one run, with the SLOs marked."""
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.8), dpi=110)
    done = [r for r in records if r.finished]
    for ax, name, values, limit in (
        (axes[0], "TTFT (s)", sorted(r.ttft for r in done), slo.ttft_s),
        (axes[1], "TPOT (s)", sorted(r.tpot for r in done if r.output_tokens > 1), slo.tpot_s),
    ):
        values = [v for v in values if math.isfinite(v)]
        if values:
            n = len(values)
            ax.plot(values, [(i + 1) / n for i in range(n)])
            ax.set_xscale("log" if values[0] > 0 and values[-1] / max(values[0], 1e-9) > 100 else "linear")
        ax.axvline(limit, color="red", ls="--", lw=1, label="SLO")
        ax.set_xlabel(name)
        ax.set_ylabel("fraction of requests")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, metadata=_META)
    plt.close(fig)
    return path
