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


def test_syscall_counts_are_read_from_perf_and_reported_per_token() -> None:
    import burst_syscalls

    # perf stat -x , as it writes them (one event not counted: left out, not read as 0)
    text = ("# started on Thu Dec  3 16:00:19 2026\n\n"
            "5120,,raw_syscalls:sys_enter,715400,100.00,,\n"
            "1024,,syscalls:sys_enter_read,715400,100.00,,\n"
            "512,,syscalls:sys_enter_recvfrom,715400,100.00,,\n"
            "2048,,syscalls:sys_enter_writev,715400,100.00,,\n"
            "<not counted>,,syscalls:sys_enter_futex,0,100.00,,\n")
    counts = burst_syscalls.parse_counts(text)
    assert counts == {"all": 5120, "read": 1024, "recvfrom": 512, "writev": 2048}
    per = burst_syscalls.per_token(counts, tokens=1024)
    assert per == {"reads": 1.5, "writes": 2.0, "epoll waits": 0.0, "futex": 0.0, "all": 5.0}
    rounds = {"direct": [r(100), r(100)],
              "pdserve": [{**r(200, 10), "router_syscalls_per_token": per},
                          {**r(200, 10), "router_syscalls_per_token": {**per, "writes": 1.0}}]}
    s = burst.summarise(rounds)
    assert s["pdserve"]["router_syscalls_per_token"]["writes"] == {"median": 1.5, "min": 1.0, "max": 2.0, "rounds": 2}
    assert "router_syscalls_per_token" not in s["direct"]
    md = burst.markdown({"summary": {"256": s}, "meta": {"command": "c", "commit": "x", "dirty": False, "date": "d", "cpus": 2,
                                                          "loadavg_before": {"1m": 0}, "loadavg_after": {"1m": 0}},
                         "setup": "s", "prompt_tokens": 1, "peers": {}, "verdicts": {}})
    assert "| 256 | pdserve | 1.50 [1.50..1.50] | 1.50 [1.00..2.00] | 0.00 [0.00..0.00] |" in md


def test_each_pdserve_target_is_read_over_the_python_floor_round_by_round() -> None:
    rounds = {
        "direct": [r(100), r(100), r(100)],
        "vllm-router": [r(300, 20), r(300, 20), r(300, 20)],
        "sglang-router": [r(300, 20), r(300, 20), r(300, 20)],
        "python-floor": [r(200, 10), r(200, 10), r(200, 20)],
        "pdserve-lean": [r(200, 20), r(200, 30), r(200, 50)],  # 2.0, 3.0, 2.5 the floor's
    }
    s = burst.summarise(rounds)
    assert s["pdserve-lean"]["cpu_per_token_vs_floor"] == {"median": 2.5, "min": 2.0, "max": 3.0, "rounds": 3}
    assert "cpu_per_token_vs_floor" not in s["python-floor"] and "cpu_per_token_vs_floor" not in s["sglang-router"]
    del rounds["python-floor"]
    assert "cpu_per_token_vs_floor" not in burst.summarise(rounds)["pdserve-lean"]
