"""bench/router/README.md's burst verdict table is what burst_readme.py makes of the result
files it names (no number in it typed by hand), and a stale table is caught."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "router"))

import burst_readme  # noqa: E402


def test_the_verdict_block_is_generated_from_the_files_it_names() -> None:
    text = burst_readme.README.read_text()
    files = burst_readme.files_in(text)
    assert files, "the block names no result file"
    assert burst_readme.rewrite(text, burst_readme.block(files)) == text, (
        "stale: run .venv/bin/python bench/router/burst_readme.py")


def test_a_changed_number_is_stale() -> None:
    text = burst_readme.README.read_text()
    files = burst_readme.files_in(text)
    inner = text.split(burst_readme.BEGIN, 1)[1].split(burst_readme.END, 1)[0]
    row = next(line for line in inner.splitlines() if line.startswith("| [burst"))
    cells = row.split(" | ")
    cells[3] = "0.01 [0.01..0.01]"  # the TTFT ratio cell
    tampered = text.replace(row, " | ".join(cells), 1)
    assert burst_readme.rewrite(tampered, burst_readme.block(files)) != tampered


def test_runs_that_counted_system_calls_get_their_table(tmp_path: Path) -> None:
    import json

    calls = {g: {"median": 1.0, "min": 0.5, "max": 2.0, "rounds": 3}
             for g in ("reads", "writes", "epoll waits", "futex", "all")}
    doc = {"meta": {"commit": "abcdef0123", "dirty": False, "loadavg_before": {"1m": 0.1},
                    "loadavg_after": {"1m": 0.2}, "runs": 3},
           "summary": {"256": {"pdserve-lean": {"errors": 0, "router_syscalls_per_token": calls},
                               "sglang-router": {"errors": 0, "router_syscalls_per_token": calls}}}}
    path = tmp_path / "burst_x.json"
    path.write_text(json.dumps(doc))
    out = burst_readme.block([path], root=tmp_path)
    assert "| reads | writes | epoll waits | futex | all |" in out
    assert "| burst_x.json | 256 | sglang-router | 1.00 [0.50..2.00] | 1.00 [0.50..2.00] |" in out
    del doc["summary"]["256"]["pdserve-lean"]["router_syscalls_per_token"]
    del doc["summary"]["256"]["sglang-router"]["router_syscalls_per_token"]
    path.write_text(json.dumps(doc))
    assert "System calls per streamed token" not in burst_readme.block([path], root=tmp_path)


def test_runs_with_the_python_floor_get_each_pdserve_target_over_it_per_round(tmp_path: Path) -> None:
    import json

    def cpu(*v: float) -> list[dict]:
        return [{"router_cpu_us_per_token": x} for x in v]

    doc = {"meta": {"commit": "abcdef0123", "dirty": False, "loadavg_before": {"1m": 0.1},
                    "loadavg_after": {"1m": 0.2}, "runs": 3},
           # per round: pdserve-lean / floor = 2.0, 3.0, 2.5 -> median 2.5 [2.0..3.0] (burst_report.summarise's)
           "rounds": {"256": {"python-floor": cpu(10, 10, 20), "pdserve-lean": cpu(20, 30, 50),
                              "sglang-router": cpu(20, 20, 20)}},
           "summary": {"256": {
               "python-floor": {"errors": 0, "router_cpu_us_per_token": {"median": 10, "min": 10, "max": 20},
                                "cpu_per_token_vs_best_rust": {"median": 0.5, "min": 0.5, "max": 1.0}},
               "pdserve-lean": {"errors": 0, "router_cpu_us_per_token": {"median": 30, "min": 20, "max": 50},
                                "cpu_per_token_vs_best_rust": {"median": 1.5, "min": 1.0, "max": 2.5},
                                "cpu_per_token_vs_floor": {"median": 2.5, "min": 2.0, "max": 3.0}},
               "sglang-router": {"errors": 0}}}}
    path = tmp_path / "burst_f.json"
    path.write_text(json.dumps(doc))
    out = burst_readme.block([path], root=tmp_path)
    assert "| burst_f.json | 256 | python-floor | 10.0 [10.0..20.0] | 0.50 [0.50..1.00] | - |" in out
    assert "| burst_f.json | 256 | pdserve-lean | 30.0 [20.0..50.0] | 1.50 [1.00..2.50] | 2.50 [2.00..3.00] |" in out
    del doc["summary"]["256"]["python-floor"]
    path.write_text(json.dumps(doc))
    assert "The Python floor" not in burst_readme.block([path], root=tmp_path)


def test_runs_at_one_commit_and_pin_are_pooled_round_by_round(tmp_path: Path) -> None:
    """Two runs at one commit, unpinned: their rounds' ratios pooled (a run's own median can miss while the pool
    meets, and the count of runs meeting says so); a pinned run at the same commit is its own group, alone here."""
    import json

    from burst_report import summarise

    def run(path: Path, lean: list[float], rust: list[float], pin: str | None) -> None:
        rounds = {"256": {
            "pdserve-lean": [{"router_cpu_us_per_token": c, "ttft_p99_ms": 100.0, "errors": 0, "ok": 1} for c in lean],
            "vllm-router": [{"router_cpu_us_per_token": c * 2, "ttft_p99_ms": 100.0, "errors": 0, "ok": 1} for c in rust],
            "sglang-router": [{"router_cpu_us_per_token": c, "ttft_p99_ms": 200.0, "errors": 0, "ok": 1} for c in rust]}}
        command = "python bench/router/burst.py --streams 256" + (f" --pin {pin}" if pin else "")
        path.write_text(json.dumps({"meta": {"commit": "abcdef0123", "dirty": False, "loadavg_before": {"1m": 0.1},
                                             "loadavg_after": {"1m": 0.2}, "runs": len(lean), "command": command},
                                    "rounds": rounds, "summary": {"256": summarise(rounds["256"])}}))

    a, b, c = tmp_path / "burst_a.json", tmp_path / "burst_b.json", tmp_path / "burst_c.json"
    run(a, [12, 14, 16], [10, 10, 10], None)  # CPU ratios 1.2, 1.4, 1.6: median 1.4, missed
    run(b, [11, 12, 13], [10, 10, 10], None)  # 1.1, 1.2, 1.3: median 1.2, met
    run(c, [50, 50, 50], [10, 10, 10], "1:0")  # pinned: another group, of one run: not pooled
    out = burst_readme.block([a, b, c], root=tmp_path)
    # pooled CPU ratios 1.1 1.2 1.2 1.3 1.4 1.6: median 1.25; TTFT 100 / 100 (vllm's is the better) = 1.0
    assert ("| burst_a.json, burst_b.json (abcdef0, pin none) | 256 | pdserve-lean | 1.00 [1.00..1.00] | met "
            "| 2 of 2 | 1.25 [1.10..1.60] | met | 1 of 2 | 6 |") in out
    assert "burst_c.json (" not in out.split("pooled:", 1)[1]
    assert "pooled" not in burst_readme.block([a, c], root=tmp_path)
