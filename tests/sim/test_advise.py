"""The advisor: candidate enumeration, ranking, verdicts with numbers, emitted files."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pdserve.api.spec import DisaggregatedServiceSpec
from pdserve.planner.core.profile import CapacityProfile
from rich.console import Console

from pdserve.sim import advise as advise_mod
from pdserve.sim import advise_cli
from pdserve.sim.advise import advise, candidates, feasible_tps
from pdserve.sim.config import SimConfig, SimConfigError
from pdserve.sim.metrics import Slo
from pdserve.sim.goodput import GoodputResult
from pdserve.sim.sweep import Compared, gpu_count
from pdserve.sim.traces import Trace, synthetic_trace

FAST = dict(coarse_window_s=15.0, fine_window_s=40.0, coarse_max_requests=250, fine_max_requests=600)


def test_candidates_cover_layouts_within_the_gpu_budget() -> None:
    base = SimConfig(topology="chunked", instances=1)
    cands = candidates(base, 4, [1, 2])
    labels = [c.label for c in cands]
    assert labels[:4] == ["colocated:4", "chunked:4", "colocated:2", "chunked:2"]
    assert {"1P3D", "2P2D", "3P1D", "1P1D"} <= set(labels)
    assert all(gpu_count(c) <= 4 for c in cands)
    mixed = candidates(base, 4, [1, 2], mixed_tp=True)
    assert any(c.prefill_tp == 2 and c.decode_tp == 1 for c in mixed)
    assert not any(c.topology == "disagg" and c.prefill_tp != c.decode_tp for c in cands)


def test_tp_choices_drop_sizes_where_the_model_does_not_fit() -> None:
    assert feasible_tps(SimConfig(profile="opt-66b-a100"), 8) == [2, 4, 8]
    with pytest.raises(SimConfigError, match="does not fit"):
        advise(synthetic_trace(20, 1.0, 100, 10), SimConfig(profile="opt-66b-a100"), 1, **FAST)


def test_says_plainly_when_disaggregation_does_not_pay() -> None:
    # Short prompts, long answers, a loose TPOT SLO: prefill interference is tiny.
    trace = synthetic_trace(2000, 1.0, (32, 128), (60, 120), seed=3)
    base = SimConfig(profile="opt-13b-a100", slo=Slo(ttft_s=0.5, tpot_s=0.06))
    adv = advise(trace, base, 2, tps=[1], coarse_window_s=10.0, fine_window_s=20.0,
                 coarse_max_requests=150, fine_max_requests=300)
    assert adv.best.compared.config.topology != "disagg"
    assert adv.verdict.startswith("Disaggregation does not pay here")
    assert "req/s/GPU" in adv.verdict and "ISL/OSL" in adv.verdict
    assert adv.facts["best_colocated_per_gpu"] >= adv.facts["best_split_per_gpu"]
    assert [r.compared.per_gpu for r in adv.ranked if r.refined] == sorted(
        (r.compared.per_gpu for r in adv.ranked if r.refined), reverse=True)


def test_recommends_a_split_when_prefill_stalls_break_the_tpot_slo(tmp_path: Path) -> None:
    trace = synthetic_trace(3000, 1.0, (1024, 2048), (16, 48), seed=5)
    p = tmp_path / "lengths.csv"
    with p.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["input_tokens", "output_tokens"])
        w.writerows([r.input_tokens, r.output_tokens] for r in trace.requests)
    out = tmp_path / "o"
    out.mkdir()
    r = subprocess.run(
        [sys.executable, "-m", "pdserve.cli", "advise", "--trace", str(p), "--gpus", "3", "--profile", "opt-13b-a100",
         "--ttft-slo-ms", "1000", "--itl-slo-ms", "30", "--tp-choices", "1", "--quiet", "--name", "opt",
         "--window", "40", "--max-requests", "500",
         "--manifest", str(out / "dsvc.yaml"), "--capacity-profile", str(out / "cap.json"), "--json", str(out / "a.json")],
        capture_output=True, text=True, timeout=120, env={**os.environ},
    )
    assert r.returncode == 0, r.stderr
    assert "Disaggregation pays: 2P(TP1)1D(TP1)" in " ".join(r.stdout.split())
    doc = yaml.safe_load((out / "dsvc.yaml").read_text())
    assert doc["kind"] == "DisaggregatedService" and doc["metadata"]["name"] == "opt"
    spec = DisaggregatedServiceSpec.model_validate(doc["spec"])
    assert (spec.prefill.replicas, spec.decode.replicas) == (2, 1)
    assert spec.prefill.tensor_parallel_size == spec.decode.tensor_parallel_size == 1
    assert spec.slo.itl_ms == 30.0
    cap = CapacityProfile.load(out / "cap.json")
    assert cap.prefill.tensor_parallel_size == 1
    lo, hi = cap.isl_range()
    assert lo <= 1024 and hi >= 2048
    assert cap.prefill_capacity(1500, 1000.0) > 0
    ranking = json.loads((out / "a.json").read_text())
    assert ranking["recommendation"] == "2P(TP1)1D(TP1)"
    assert ranking["facts"]["kv_mb_per_request"] > 1000  # OPT-13B: 0.8 MB per prompt token


def test_every_split_whose_coarse_estimate_beats_the_best_refined_split_is_refined(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The case from issue 15 (8 GPUs, llama-3.1-8b-h100, TTFT 1 s, ITL 40 ms, bursty trace):
    # short coarse windows overstated 5P3D ~2x, and 6P2D's coarse 3.007 req/s/GPU sat
    # below the best refined result overall (colocated 3.068) but far above the refined
    # 5P3D (1.691), so it was never refined and the verdict compared colocated with 5P3D.
    # Goodput searches are replaced by these numbers (coarse, refined) per layout; the
    # trace, candidates, ranking, latency runs and verdict are the real ones.
    per_gpu = {  # label: (coarse estimate, refined), req/s/GPU
        "colocated:8": (3.10, 3.068), "chunked:8": (3.05, 2.90),
        "1P7D": (0.50, 0.45), "2P6D": (1.00, 0.90), "3P5D": (1.60, 1.40), "4P4D": (2.20, 1.60),
        "5P3D": (3.20, 1.691), "6P2D": (3.007, 2.95), "7P1D": (1.50, 1.20),
    }
    calls: list[tuple[str, bool]] = []

    def fake_goodput_of(trace: Trace, config: SimConfig, *, rel_tol: float, **_: object) -> Compared:
        coarse = rel_tol > 0.05
        calls.append((config.label, coarse))
        gpus = gpu_count(config)
        rps = per_gpu[config.label][0 if coarse else 1] * gpus
        return Compared(config, gpus, GoodputResult(rps / trace.mean_rate, rps, config.slo.target))

    monkeypatch.setattr(advise_mod, "goodput_of", fake_goodput_of)
    trace = synthetic_trace(400, 4.0, (512, 2048), (32, 256), process="gamma", cv=3.0, seed=7)
    base = SimConfig(profile="llama-3.1-8b-h100", slo=Slo(ttft_s=1.0, tpot_s=0.04))
    adv = advise(trace, base, 8, tps=[1], coarse_window_s=5.0, fine_window_s=10.0,
                 coarse_max_requests=50, fine_max_requests=100)
    refined = {r.compared.config.label for r in adv.ranked if r.refined}
    # Every split whose coarse estimate beats the best refined split (2.95 once 6P2D is refined).
    assert {"5P3D", "6P2D"} <= refined
    assert "4P4D" not in refined  # 2.20 < 2.95: its estimate cannot beat the best refined split
    assert adv.facts["best_split_per_gpu"] == pytest.approx(2.95, abs=1e-3)
    assert "6P(TP1)2D(TP1)" in adv.verdict and "5P(TP1)3D(TP1)" not in adv.verdict
    # Coarse numbers are marked as estimates in the table and the JSON.
    table = advise_cli._table(adv)
    console = Console(width=300, record=True)
    console.print(table)
    text = console.export_text()
    assert "~0.500" in text and "coarse estimate" in text
    assert all(("~" in line) == ("coarse" in line) for line in text.splitlines() if "TP1" in line)
