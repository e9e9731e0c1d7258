"""Trace loaders: formats, scaling, seeded synthesis, and errors that name line and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pdserve.sim.traces import TraceError, load_trace, synth_arrivals, synthetic_trace


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:51.5000000,10,7
"""


def test_azure_csv_relative_times_and_lengths(tmp_path: Path) -> None:
    t = load_trace(write(tmp_path, "a.csv", AZURE))
    assert t.format == "azure"
    assert [r.input_tokens for r in t.requests] == [374, 396, 10]
    assert [r.output_tokens for r in t.requests] == [44, 109, 7]
    assert t.requests[0].arrival_s == 0.0
    assert t.requests[1].arrival_s == pytest.approx(4.314579, abs=1e-6)
    assert t.requests[2].arrival_s == pytest.approx(4.81941, abs=1e-6)
    assert len(t.sha256) == 64


def test_mooncake_jsonl_ms_and_hash_ids(tmp_path: Path) -> None:
    rows = [
        {"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [0, 1]},
        {"timestamp": 3000, "input_length": 513, "output_length": 1, "hash_ids": [0, 2]},
    ]
    t = load_trace(write(tmp_path, "m.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n"))
    assert t.format == "mooncake"
    assert [r.arrival_s for r in t.requests] == [0.0, 3.0]
    assert t.requests[1].hash_ids == (0, 2)


def test_length_csv_gets_seeded_poisson_arrivals(tmp_path: Path) -> None:
    p = write(tmp_path, "s.csv", "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n"
              + "".join(f"{10 + i},{5 + i},{15 + 2 * i},1.0\n" for i in range(200)))
    a = load_trace(p, synthetic_rate=4.0, seed=7)
    b = load_trace(p, synthetic_rate=4.0, seed=7)
    c = load_trace(p, synthetic_rate=4.0, seed=8)
    assert a.format == "lengths"
    assert [r.arrival_s for r in a.requests] == [r.arrival_s for r in b.requests]
    assert [r.arrival_s for r in a.requests] != [r.arrival_s for r in c.requests]
    # 200 Poisson arrivals at 4/s: the mean rate is within 25 % of 4.
    assert 3.0 < a.mean_rate < 5.0
    assert a.requests[3].input_tokens == 13


def test_gamma_arrivals_have_the_requested_burstiness() -> None:
    times = synth_arrivals(4000, 10.0, process="gamma", cv=3.0, seed=1)
    gaps = [b - a for a, b in zip(times, times[1:])]
    mean = sum(gaps) / len(gaps)
    var = sum((g - mean) ** 2 for g in gaps) / len(gaps)
    assert mean == pytest.approx(0.1, rel=0.15)
    assert (var ** 0.5) / mean == pytest.approx(3.0, rel=0.25)


def test_rate_and_time_scaling(tmp_path: Path) -> None:
    t = load_trace(write(tmp_path, "a.csv", AZURE))
    fast = t.scaled(rate_scale=2.0)
    slow = t.scaled(time_scale=3.0)
    assert fast.requests[1].arrival_s == pytest.approx(t.requests[1].arrival_s / 2)
    assert slow.requests[2].arrival_s == pytest.approx(t.requests[2].arrival_s * 3)
    assert fast.sha256 == t.sha256
    with pytest.raises(TraceError, match="rate scale"):
        t.scaled(rate_scale=0)


def test_unsorted_timestamps_are_replayed_in_time_order(tmp_path: Path) -> None:
    rows = [{"timestamp": 2000, "input_length": 5, "output_length": 5},
            {"timestamp": 1000, "input_length": 7, "output_length": 5}]
    t = load_trace(write(tmp_path, "m.jsonl", "\n".join(json.dumps(r) for r in rows)))
    assert [r.input_tokens for r in t.requests] == [7, 5]
    assert [r.index for r in t.requests] == [0, 1]


@pytest.mark.parametrize(
    ("name", "text", "match"),
    [
        ("a.csv", AZURE.replace("396,109", "-396,109"), r"a\.csv:3: field 'ContextTokens': negative value -396"),
        ("a.csv", AZURE.replace("10,7", "10,seven"), r"a\.csv:4: field 'GeneratedTokens': expected an integer"),
        ("a.csv", AZURE.replace("2023-11-16 18:15:50.9951690", "yesterday"), r"a\.csv:3: field 'TIMESTAMP'"),
        ("a.csv", AZURE.replace("10,7", "10"), r"a\.csv:4: field 'GeneratedTokens': missing"),
        ("m.jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 1}\n{"timestamp": 1, "input_length": 10}\n',
         r"m\.jsonl:2: field 'output_length': missing"),
        ("m.jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 1}\n\n{"timestamp": 5, oops}\n',
         r"m\.jsonl:3: not valid JSON"),
        ("m.jsonl", '{"timestamp": 0, "input_length": 1000, "output_length": 1, "hash_ids": [1]}\n',
         r"m\.jsonl:1: field 'hash_ids': 1 ids for input_length 1000; expected ceil"),
        ("m.jsonl", '{"timestamp": -5, "input_length": 10, "output_length": 1}\n', r"m\.jsonl:1: field 'timestamp': negative"),
        ("m.jsonl", '{"timestamp": 0, "input_length": 0, "output_length": 1}\n', r"field 'input_length': too small value 0"),
        ("l.csv", "input_tokens,output_tokens\n5,5\n5,-1\n", r"l\.csv:3: field 'output_tokens': negative value -1"),
        ("x.csv", "foo,bar\n1,2\n", r"x\.csv:1: unrecognised trace format"),
        ("e.csv", "\n\n", r"e\.csv: empty trace file"),
        ("h.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n", r"h\.csv: the trace has no requests"),
    ],
)
def test_bad_input_names_line_and_field(tmp_path: Path, name: str, text: str, match: str) -> None:
    with pytest.raises(TraceError, match=match):
        load_trace(write(tmp_path, name, text))


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such trace file"):
        load_trace(tmp_path / "nope.csv")


def test_synthetic_trace_is_seeded_and_validated() -> None:
    a = synthetic_trace(50, 2.0, (100, 200), 16, seed=3)
    b = synthetic_trace(50, 2.0, (100, 200), 16, seed=3)
    assert a.requests == b.requests
    assert all(100 <= r.input_tokens <= 200 and r.output_tokens == 16 for r in a.requests)
    with pytest.raises(TraceError, match="input_tokens range"):
        synthetic_trace(5, 1.0, (0, 5), 5)
