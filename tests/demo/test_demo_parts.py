"""The demo's pure parts: workload shaping, windowed statistics, metrics parsing, report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pdserve.tokenization import mock as tokenizer
from pdserve.demo import observe, report, timeline, workload
from pdserve.demo.replay import RequestResult
from pdserve.sim.traces import from_rows, load_trace


def test_excerpt_is_a_loadable_azure_trace_spanning_the_hour() -> None:
    trace = load_trace(workload.default_trace_path())
    assert trace.format == "azure"
    assert len(trace.requests) == 3874
    assert 3400 < trace.duration_s < 3510
    assert workload.default_trace_path().stat().st_size < 200_000


def test_workload_compresses_thins_and_keeps_the_shape() -> None:
    config = workload.WorkloadConfig(duration_s=120, mean_rate=3.0)
    trace, reqs = workload.load(None, config)
    assert abs(len(reqs) / 120 - 3.0) < 0.3
    assert reqs[-1].send_at_s <= 120 and reqs[0].send_at_s >= 0
    assert [r.send_at_s for r in reqs] == sorted(r.send_at_s for r in reqs)
    # The trace peaks in its middle (~500 req/min vs ~250 at the start): so does the replay.
    first = sum(1 for r in reqs if r.send_at_s < 20)
    middle = sum(1 for r in reqs if 50 <= r.send_at_s < 70)
    assert middle > 1.2 * first
    # Deterministic: the same config gives the same requests.
    assert workload.build(trace, config) == reqs


def test_prompts_have_the_stated_token_counts_and_share_a_system_prompt() -> None:
    trace = from_rows([(0.0, 400, 100, ()), (1.0, 8000, 900, ()), (2.0, 3, 1, ())], format="azure", source="t")
    config = workload.WorkloadConfig(duration_s=10, mean_rate=100, token_scale=0.5, max_prompt_tokens=1000, max_output_tokens=64)
    reqs = workload.build(trace, config)
    assert [r.prompt_tokens for r in reqs] == [200, 1000, workload.SYSTEM_PROMPT_WORDS + 1]
    assert [r.max_tokens for r in reqs] == [50, 64, config.min_output_tokens]
    for r in reqs:
        assert len(tokenizer.encode(r.prompt)) == r.prompt_tokens
        assert r.prompt.startswith(workload.system_prompt())
    assert reqs[0].prompt != reqs[1].prompt


@pytest.mark.parametrize(
    "kwargs, message",
    [({"duration_s": 0}, "duration"), ({"mean_rate": -1}, "rate"), ({"token_scale": 2}, "token scale"), ({"max_prompt_tokens": 10}, "system prompt")],
)
def test_bad_workload_settings_are_named(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        workload.WorkloadConfig(**kwargs)


def _result(sent: float, ttft: float | None, gaps: list[float], error: str | None = None) -> RequestResult:
    return RequestResult(index=0, sent_at=sent, prompt_tokens=10, ttft_s=ttft, gaps_s=gaps, e2e_s=1.0, output_tokens=len(gaps) + 1, error=error)


def test_window_sample_counts_only_the_window() -> None:
    slo = timeline.Slo(ttft_s=0.5, itl_s=0.05)
    finished = [(1.0, _result(0.5, 0.1, [0.01])), (15.0, _result(14.0, 0.2, [0.02, 0.04])), (18.0, _result(17.0, 0.9, [0.01])), (19.0, _result(18.0, None, [], "HTTP 503"))]
    s = timeline.sample(20.0, 10.0, [0.5, 14.0, 17.0, 18.0, 19.5], finished, inflight=1, pools=(2, 3), slo=slo, ratio=0.4, predicted_rps=None)
    assert s.sent_rps == pytest.approx(0.4)
    assert s.done_rps == pytest.approx(0.3)
    assert s.errors == 1
    assert s.ttft_p50 == pytest.approx(0.55)
    assert s.itl_p50 == pytest.approx(0.02)
    assert s.attainment == pytest.approx(1 / 3)  # one meets both SLOs, one is slow, one failed
    assert (s.prefill_replicas, s.decode_replicas) == (2, 3)


def test_hit_ratio_ignores_windows_where_counters_reset() -> None:
    a, b = timeline.Counters(10, 100), timeline.Counters(40, 160)
    assert timeline.hit_ratio(a, b) == pytest.approx(0.5)
    assert timeline.hit_ratio(b, a) is None
    assert timeline.hit_ratio(None, b) is None
    assert timeline.hit_ratio(a, a) is None


def test_parse_metrics_sums_vllm_counters_across_labels() -> None:
    text = (
        "# HELP vllm:prefix_cache_hits Prefix cache hits, in tokens.\n"
        "# TYPE vllm:prefix_cache_hits counter\n"
        'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 30.0\n'
        'vllm:prefix_cache_hits_total{engine="1",model_name="m"} 12.0\n'
        "# HELP vllm:num_requests_waiting Waiting.\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        'vllm:num_requests_waiting{engine="0",model_name="m"} 3.0\n'
    )
    m = observe.parse_metrics(text)
    assert m["vllm:prefix_cache_hits_total"] == 42.0
    assert m["vllm:num_requests_waiting"] == 3.0


def test_read_pools_tolerates_a_missing_or_half_written_file(tmp_path: Path) -> None:
    f = tmp_path / "discovery.json"
    assert observe.read_pools(f) == {"prefill": [], "decode": []}
    f.write_text('{"prefill": ["http://127.0.0.1:1"')
    assert observe.read_pools(f) == {"prefill": [], "decode": []}
    f.write_text(json.dumps({"prefill": ["http://127.0.0.1:1"], "decode": ["http://127.0.0.1:2", "http://127.0.0.1:3"]}))
    assert observe.read_pools(f) == {"prefill": ["http://127.0.0.1:1"], "decode": ["http://127.0.0.1:2", "http://127.0.0.1:3"]}


def test_report_writes_summary_and_plots(tmp_path: Path) -> None:
    slo = timeline.Slo(ttft_s=0.5, itl_s=0.05)
    results = [_result(float(i), 0.1 + 0.01 * i, [0.01, 0.02]) for i in range(10)]
    finished = [(r.sent_at + 1, r) for r in results]
    samples = [
        timeline.sample(float(t), 5.0, [r.sent_at for r in results], finished, 0, (1 + t // 5, 1), slo, 0.3, 2.0)
        for t in range(1, 12)
    ]
    summary = timeline.summarize(results, samples, slo)
    assert summary.succeeded == 10 and summary.attainment == 1.0 and summary.max_prefill == 3
    files = report.write(tmp_path / "r", summary, samples, results, slo, {"duration_s": 12})
    for f in files:
        assert f.stat().st_size > 0, f
    assert (tmp_path / "r" / "load_replicas.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (tmp_path / "r" / "summary.md").read_text()
    assert "| succeeded / failed | 10 / 0 |" in md and "![latency against SLO](latency.png)" in md
    assert len(json.loads((tmp_path / "r" / "timeline.json").read_text())["samples"]) == 11
