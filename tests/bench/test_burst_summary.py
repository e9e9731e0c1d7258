"""burst.py's judgement (burst_report.py): each round's pdserve number over the better Rust router of the
same round (TTFT p99 and CPU per token each on its own), median over rounds."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "bench" / "router"))

import burst_report as burst  # noqa: E402


def r(ttft: float, cpu: float | None = None, errors: int = 0) -> dict:
    out = {"ttft_p50_ms": ttft / 2, "ttft_p99_ms": ttft, "errors": errors, "ok": 10 - errors}
    if cpu is not None:
        out["router_cpu_us_per_token"] = cpu
    return out


def test_ratios_are_per_round_against_the_better_rust_router_of_that_round() -> None:
    rounds = {
        "direct": [r(100), r(100), r(100)],
        # round 1: sglang better on TTFT, vllm on CPU; round 2 the other way round
        "vllm-router": [r(300, 10), r(200, 40), r(100, 10)],
        "sglang-router": [r(200, 20), r(400, 20), r(100, 10)],
        "pdserve": [r(240, 15), r(300, 30), r(100, 20, errors=1)],
    }
    s = burst.summarise(rounds)["pdserve"]
    assert s["ttft_p99_vs_best_rust"] == {"median": 1.2, "min": 1.0, "max": 1.5, "rounds": 3}
    assert s["cpu_per_token_vs_best_rust"] == {"median": 1.5, "min": 1.5, "max": 2.0, "rounds": 3}
    assert s["errors"] == 1
    assert "ttft_p99_vs_best_rust" not in burst.summarise(rounds)["vllm-router"]
    v = burst.verdicts({"256": burst.summarise(rounds)})["pdserve"]["256"]
    assert v == {"ttft_p99_within_1.2x": True, "cpu_per_token_within_1.3x": False, "errors": 1}


def test_no_ratio_without_both_rust_routers() -> None:
    rounds = {"direct": [r(100)], "vllm-router": [r(100, 10)], "pdserve": [r(100, 10)]}
    assert "ttft_p99_vs_best_rust" not in burst.summarise(rounds)["pdserve"]


def test_the_ab_is_per_round_against_the_baseline() -> None:
    rounds = {
        "direct": [r(100), r(100), r(100)],
        "pdserve-baseline": [r(200, 20), r(400, 40), r(100, 10)],
        "pdserve": [r(100, 30), r(400, 20), r(150, 10)],
    }
    s = burst.summarise(rounds)
    assert s["pdserve"]["ttft_p99_vs_baseline"] == {"median": 1.0, "min": 0.5, "max": 1.5, "rounds": 3}
    assert s["pdserve"]["cpu_per_token_vs_baseline"] == {"median": 1.0, "min": 0.5, "max": 1.5, "rounds": 3}
    assert "cpu_per_token_vs_baseline" not in s["pdserve-baseline"]
