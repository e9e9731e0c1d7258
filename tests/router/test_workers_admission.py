import pytest

from pdserve.router.core.admission import AdmissionControl
from pdserve.router.shell.discovery import parse_discovery
from pdserve.router.shell.workers import WorkerPool, parse_load

METRICS = """# HELP vllm:num_requests_running x
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
vllm:num_requests_waiting{engine="0",model_name="m"} 4.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.5
vllm:prompt_tokens_total{engine="0",model_name="m"} 99.0
"""


def test_parse_load_sums_engines() -> None:
    assert parse_load(METRICS) == {"running": 5.0, "waiting": 4.0, "kv_usage": 0.5}
    assert parse_load("garbage\nvllm:num_requests_running oops") == {}


def test_parse_load_reads_only_whole_gauge_lines() -> None:
    # The gauges found by name at a line's start: first line, CRLF endings, no final newline;
    # longer names, comments and values that are not numbers are not them.
    page = ('vllm:num_requests_running{engine="0"} 2\r\n# HELP vllm:num_requests_running x\n'
            'vllm:num_requests_running_total 50\nxvllm:num_requests_waiting 9\n'
            'vllm:num_requests_waiting{engine="0"} 1\nvllm:num_requests_waiting{engine="1"} nan?\n'
            'vllm:kv_cache_usage_perc 0.25\nvllm:num_requests_running{engine="1"} 3')
    assert parse_load(page) == {"running": 5.0, "waiting": 1.0, "kv_usage": 0.25}


def test_pool_membership_roles_and_health() -> None:
    pool = WorkerPool(cooldown_s=5)
    added, removed = pool.update(parse_discovery({"prefill": ["http://a:1"], "decode": ["http://b:1", "http://c:1"]}))
    assert added == {"http://a:1", "http://b:1", "http://c:1"} and not removed
    assert [v.worker_id for v in pool.views("decode", now=0)] == ["http://b:1", "http://c:1"]
    pool.mark_failed("http://b:1", now=10)
    assert [v.worker_id for v in pool.views("decode", now=11)] == ["http://c:1"]
    pool.mark_failed("http://c:1", now=10)
    # Everyone cooling down: fail open (try them) unless asked not to.
    assert len(pool.views("decode", now=11)) == 2 and pool.views("decode", now=11, fail_open=False) == []
    pool.mark_ok("http://c:1")
    assert [v.worker_id for v in pool.views("decode", now=16)] == ["http://b:1", "http://c:1"]
    # A worker that changes role is removed and re-added.
    added, removed = pool.update(parse_discovery({"prefill": ["http://b:1"], "decode": ["http://c:1"]}))
    assert removed == {"http://a:1", "http://b:1"} and added == {"http://b:1"}
    assert pool.role_of("http://b:1") == "prefill"


def test_admission_predicts_and_learns() -> None:
    a = AdmissionControl(ttft_slo_ms=100, factor=2, prefill_tokens_per_s=10_000)
    assert a.check(0, 1000).admit  # 0.1 s <= 0.2 s
    v = a.check(5000, 1000)  # 0.6 s > 0.2 s
    assert not v.admit and v.retry_after_s == 1 and v.predicted_ttft_s == pytest.approx(0.6)
    for _ in range(50):
        a.observe_prefill(10_000, 0.1)  # actually 100k tokens/s
    assert a.check(5000, 1000).admit
    assert AdmissionControl(None).check(10**9, 1).admit
    with pytest.raises(ValueError, match="ttft_slo_ms"):
        AdmissionControl(0)
