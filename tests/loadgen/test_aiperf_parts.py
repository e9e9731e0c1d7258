"""The pure half of the aiperf load engine: its input rows, its command line, its records read back.

The records below are lines of a real aiperf 0.13.0 ``profile_export.jsonl`` (a run against
the router and mock workers on loopback; metrics not read here left out)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from pdserve.demo.workload import DemoRequest
from pdserve.loadgen import aiperf

ROOT = Path(__file__).resolve().parents[2]

REQUESTS = {i: DemoRequest(i, 0.5 + 0.25 * i, f"prompt {i}", 40 + i, 10 + i) for i in range(4)}
OK = {"metadata": {"conversation_id": "pdserve-1", "benchmark_phase": "profiling",
                   "request_start_ns": 1796145368418041043, "request_end_ns": 1796145368426077819},
      "metrics": {"time_to_first_token": {"value": 6.139666999999999, "unit": "ms"},
                  "request_latency": {"value": 8.036776, "unit": "ms"},
                  "inter_chunk_latency": {"value": [1.897109, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], "unit": "ms"},
                  "usage_completion_tokens": {"value": 11, "unit": "tokens"},
                  "output_sequence_length": {"value": 11, "unit": "tokens"}}, "error": None}
FIRST = {"metadata": {"conversation_id": "pdserve-0", "benchmark_phase": "profiling",
                      "request_start_ns": 1796145368180161173, "request_end_ns": 1796145368210106371},
         "metrics": {"time_to_first_token": {"value": 29.945197999999998, "unit": "ms"},
                     "request_latency": {"value": 29.945197999999998, "unit": "ms"},
                     "output_sequence_length": {"value": 10, "unit": "tokens"}}, "error": None}
FAILED = {"metadata": {"conversation_id": "pdserve-2", "benchmark_phase": "profiling",
                       "request_start_ns": 1796145368669929632, "request_end_ns": 1796145368669929632},
          "metrics": {}, "error": {"code": 400, "type": "Bad Request", "message": "This model's maximum context "
                                   "length is 131072 tokens. However, your request has 160001 input tokens."}}


def test_rows_are_a_mooncake_trace_with_literal_prompts_lengths_and_times() -> None:
    rows = [json.loads(line) for line in aiperf.dataset_rows(REQUESTS.values())]
    assert rows[1] == {"session_id": "pdserve-1", "timestamp": 750.0, "text_input": "prompt 1", "output_length": 11}
    assert [r["timestamp"] for r in rows] == [500.0, 750.0, 1000.0, 1250.0]


def test_command_replays_on_a_fixed_schedule_and_exports_records(tmp_path: Path) -> None:
    settings = aiperf.AiperfSettings("/x/aiperf", "/tok", api_key="k")
    cmd = aiperf.command(settings, "http://127.0.0.1:9", "m", tmp_path / "in.jsonl", tmp_path / "art")
    assert cmd[:2] == ["/x/aiperf", "profile"]
    pairs = dict(zip(cmd[2::1], cmd[3::1]))
    assert pairs["--url"] == "http://127.0.0.1:9" and pairs["--model"] == "m" and pairs["--tokenizer"] == "/tok"
    assert pairs["--custom-dataset-type"] == "mooncake_trace" and pairs["--export-level"] == "records"
    assert pairs["--extra-inputs"] == "ignore_eos:true" and pairs["--api-key"] == "k"
    assert "--fixed-schedule" in cmd and "--streaming" in cmd


def test_a_record_becomes_the_demo_result_with_its_own_times() -> None:
    rec = aiperf.parse_record(OK, REQUESTS)
    assert rec is not None
    r = rec.result
    assert (r.index, r.prompt_tokens, r.output_tokens) == (1, 41, 11)
    assert r.ttft_s == pytest.approx(0.006139667) and r.e2e_s == pytest.approx(0.008036776)
    assert len(r.gaps_s) == 10 and r.gaps_s[0] == pytest.approx(0.001897109) and r.ok
    assert rec.sent_wall_s == pytest.approx(1796145368.418041) and rec.end_wall_s > rec.sent_wall_s


def test_a_failed_record_keeps_the_servers_reason() -> None:
    rec = aiperf.parse_record(FAILED, REQUESTS)
    assert rec is not None and not rec.result.ok
    assert rec.result.error is not None and rec.result.error.startswith("HTTP 400: This model's maximum context")


def test_records_of_other_phases_or_sessions_are_not_ours() -> None:
    assert aiperf.parse_record({**OK, "metadata": {**OK["metadata"], "benchmark_phase": "warmup"}}, REQUESTS) is None
    assert aiperf.parse_record({**OK, "metadata": {**OK["metadata"], "conversation_id": "other-1"}}, REQUESTS) is None
    assert aiperf.parse_record({**OK, "metadata": {**OK["metadata"], "conversation_id": "pdserve-99"}}, REQUESTS) is None


def test_a_latency_in_another_unit_is_refused_not_misread() -> None:
    bad = {**OK, "metrics": {**OK["metrics"], "time_to_first_token": {"value": 6.1, "unit": "s"}}}
    with pytest.raises(ValueError, match="time_to_first_token"):
        aiperf.parse_record(bad, REQUESTS)


def test_schedule_start_is_the_wall_time_of_the_first_send() -> None:
    recs = aiperf.parse_lines([json.dumps(OK), json.dumps(FIRST), ""], REQUESTS)
    start = aiperf.schedule_start(recs)
    # Request 0 (due at 0.5 s) went out at ...368.180 s, request 1 (due at 0.75 s) at ...368.418 s: a
    # request is never early, so the zero is the earliest send time less its due time.
    assert start == pytest.approx(1796145368.418041 - 0.75)
    assert aiperf.schedule_start([]) is None


def test_summary_reads_aiperfs_percentiles_in_seconds(tmp_path: Path) -> None:
    path = tmp_path / aiperf.SUMMARY_FILE
    path.write_text(json.dumps({"aiperf_version": "0.13.0",
                                "time_to_first_token": {"unit": "ms", "p50": 6.2, "p90": 15.0, "p99": 20.2},
                                "inter_chunk_latency": {"unit": "ms", "p50": 0.5, "p90": 1.5, "p99": 4.2},
                                "request_count": {"unit": "requests", "avg": 20.0}}))
    stats = aiperf.summary_stats(path)
    assert stats["ttft_p50"] == pytest.approx(0.0062) and stats["itl_p99"] == pytest.approx(0.0042)
    assert stats["request_count"] == 20.0 and stats["aiperf_version"] == "0.13.0"


def test_the_load_extra_pins_the_aiperf_this_module_is_written_for() -> None:
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["load"]
    assert f"aiperf=={aiperf.AIPERF_VERSION}" in extra
