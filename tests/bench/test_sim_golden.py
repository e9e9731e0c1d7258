"""Golden simulator results: a speed-up of the simulator must not change what it computes.

Each case replays a committed trace excerpt and compares every request's TTFT, finish
time, placement and cached tokens, plus the step count, with ``golden/sim_*.json``.
A change that is meant to change results regenerates them on purpose:

    PDSERVE_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/bench/test_sim_golden.py

and says so in its commit message; a speed-up must pass without regenerating.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from pdserve.sim.config import SimConfig, parse_layout
from pdserve.sim.simulator import run_simulation
from pdserve.sim.traces import load_trace

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "golden"
MOONCAKE = ROOT / "bench/sim/data/mooncake_conv_excerpt.jsonl"
AZURE = ROOT / "bench/sim/data/azure_conv_excerpt.csv"

CASES = {
    "mooncake_4p4d_kv_aware": (MOONCAKE, "4p4d", "kv_aware", None),
    "mooncake_chunked8_kv_aware": (MOONCAKE, "chunked:8", "kv_aware", None),
    "azure_chunked2_least_loaded": (AZURE, "chunked:2", "least_loaded", 600),
}


def _digest(case: str) -> dict[str, object]:
    path, layout, policy, limit = CASES[case]
    trace = load_trace(path).head(limit)
    res = run_simulation(trace, SimConfig(**parse_layout(layout), profile="llama-3.1-8b-h100", policy=policy))
    per_request = [
        (r.index, round(r.ttft, 9), round(r.finish_s, 9), r.prefill_instance, r.decode_instance)
        for r in sorted(res.records, key=lambda r: r.index)
    ]
    s = res.summary
    return {
        "requests": s.requests, "finished": s.finished, "engine_steps": res.steps,
        "preemptions": res.preemptions, "end_time_s": round(res.end_time_s, 9),
        "prefix_hit_ratio": None if s.prefix_hit_ratio is None else round(s.prefix_hit_ratio, 9),
        "ttft_p50_s": round(s.ttft["p50"], 9), "ttft_p90_s": round(s.ttft["p90"], 9),
        "per_request_sha256": hashlib.sha256(json.dumps(per_request).encode()).hexdigest(),
    }


@pytest.mark.parametrize("case", sorted(CASES))
def test_simulator_results_match_the_golden_file(case: str) -> None:
    got = _digest(case)
    path = GOLDEN / f"sim_{case}.json"
    if os.environ.get("PDSERVE_UPDATE_GOLDEN") == "1":
        path.write_text(json.dumps(got, indent=2) + "\n")
    want = json.loads(path.read_text())
    assert got == want, f"simulator results changed for {case}; if on purpose, regenerate (see module docstring)"
