"""The seeded bursty family (bench/planner/bursty.py): the bursts it reports are the ones in its trace."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "planner"))
from bursty import BurstySpec, bursts, bursty_trace  # noqa: E402


def test_reported_bursts_are_in_the_trace():
    spec = BurstySpec(duration_s=400.0)
    trace = bursty_trace(3, spec)
    found = bursts(3, spec)
    assert found and all(b["requests"] >= 1 for b in found)
    # Inside each burst, requests arrive at burst_rate (16.8/s) on top of the 2/s background.
    for b in found:
        inside = [r for r in trace.requests if b["start_s"] - 0.05 < r.arrival_s <= b["start_s"] + b["duration_s"] + 0.05]
        assert len(inside) >= b["requests"]
        assert len(inside) / max(b["duration_s"], 0.1) > 4 * spec.base_rate
    assert bursty_trace(3, spec).sha256 == trace.sha256  # seeded: the same trace every time
