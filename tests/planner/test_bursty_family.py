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


def test_history_precedes_the_seeds_trace_unchanged():
    """bursty.with_history: the seed's own requests, shifted past a history from another stream."""
    from bursty import with_history

    spec = BurstySpec(duration_s=300.0)
    plain = bursty_trace(1, spec)
    trace, n = with_history(1, 200.0, spec)
    hist, scored = trace.requests[:n], trace.requests[n:]
    assert n > 0 and len(scored) == len(plain.requests)
    assert max(r.arrival_s for r in hist) < scored[0].arrival_s
    shift = scored[0].arrival_s - plain.requests[0].arrival_s
    assert 190.0 < shift <= 200.0  # the history's first arrival is the new time origin
    for a, b in zip(scored, plain.requests):
        assert (a.input_tokens, a.output_tokens) == (b.input_tokens, b.output_tokens)
        assert abs(a.arrival_s - shift - b.arrival_s) < 1e-9
    # Not a copy of any seed's start: its own stream.
    assert [r.input_tokens for r in hist[:20]] != [r.input_tokens for r in bursty_trace(1, spec).requests[:20]]
    assert with_history(1, 200.0, spec)[0].sha256 == trace.sha256 != plain.sha256
