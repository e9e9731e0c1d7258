from prometheus_client import generate_latest

from pdserve.router.shell.metrics import RouterMetrics


def _itl_lines(m: RouterMetrics) -> list[str]:
    return [ln for ln in generate_latest(m.registry).decode().splitlines() if "inter_token_latency" in ln and "_created" not in ln]


def test_batched_zero_gaps_expose_exactly_what_n_zero_observations_would() -> None:
    # Tokens that arrive in one read are n gaps of 0 s, added to prometheus_client's
    # first-bucket child in one update (hot path); if the library ever changes how it
    # stores buckets, this catches it.
    from pdserve.router.shell.metrics import HistogramBatch

    fast, slow = RouterMetrics(), RouterMetrics()
    for m in (fast, slow):
        m.itl.observe(0.02)
        m.itl.observe(0.3)
    batch = HistogramBatch(fast.itl)
    batch.observe(0.0, 5)
    batch.flush()
    for _ in range(5):
        slow.itl.observe(0.0)
    assert _itl_lines(fast) == _itl_lines(slow)
    assert 'pdserve_router_inter_token_latency_seconds_bucket{le="0.01"} 5.0' in _itl_lines(fast)
    assert "pdserve_router_inter_token_latency_seconds_count 7.0" in _itl_lines(fast)


def test_histogram_batch_exposes_exactly_what_single_observations_would() -> None:
    from pdserve.router.shell.metrics import HistogramBatch

    gaps = [0.0, 0.004, 0.01, 0.0100001, 0.3, 2.0, 99.0, 0.05]  # edges, between edges, beyond the last
    fast, slow = RouterMetrics(), RouterMetrics()
    batch = HistogramBatch(fast.itl, every=5)
    for g in gaps:
        batch.observe(g)
        slow.itl.observe(g)
    assert _itl_lines(fast) != _itl_lines(slow)  # three are still in the batch
    batch.observe(0.0, 4)  # the batch reaches 5 and flushes itself
    for _ in range(4):
        slow.itl.observe(0.0)
    assert _itl_lines(fast) == _itl_lines(slow)
    assert "pdserve_router_inter_token_latency_seconds_count 12.0" in _itl_lines(fast)
    batch.flush()  # nothing pending: no change
    assert _itl_lines(fast) == _itl_lines(slow)


def test_burst_gauge_reads_a_burst_at_its_own_rate_when_scraped() -> None:
    """3 s of prompt tokens at 90k/s followed by silence: the counter's rate over a 15 s scrape
    says 18k/s; the gauge, computed when scraped, says what the router saw (pdserve.common.burst)."""
    clock = [100.0]
    m = RouterMetrics(clock=lambda: clock[0])
    for i in range(30):  # 30 requests x 9000 tokens over 100.0 .. 102.9
        clock[0] = 100.0 + i * 0.1
        m.observe_prefix(9000, 0)
    clock[0] = 110.0

    def gauge(budget: str) -> float:
        text = generate_latest(m.registry).decode()
        line = next(ln for ln in text.splitlines()
                    if ln.startswith(f'pdserve_router_prompt_tokens_burst_rate{{budget="{budget}"}}'))
        return float(line.rsplit(" ", 1)[1])

    assert gauge("0") == 90_000.0  # the busiest whole second
    assert gauge("2") == 270_000.0 / 5  # all three seconds, plus the 2 s budget
    clock[0] = 200.0  # 30 s later the burst has left the gauge's span
    assert gauge("0") == 0.0


def test_burst_gauge_under_processes_is_set_once_per_new_second(monkeypatch) -> None:
    """With --processes N the exposition reads values written with set(), not functions: the
    gauge is recomputed on the first request of each new second (values read at that moment)."""
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "/nonexistent-only-the-flag-is-read")
    clock = [100.0]
    m = RouterMetrics(clock=lambda: clock[0])

    def gauge(budget: str) -> float:
        text = generate_latest(m.registry).decode()
        return float(next(ln for ln in text.splitlines()
                          if ln.startswith(f'pdserve_router_prompt_tokens_burst_rate{{budget="{budget}"}}')).split()[-1])

    for i in range(10):  # 90k tokens in second 100
        clock[0] = 100.0 + i * 0.1
        m.observe_prefix(9000, 0)
    assert gauge("0") == 0.0  # set at 100.0, before second 100 was over
    clock[0] = 101.2
    m.observe_prefix(1000, 0)  # first request of second 101: second 100 is read
    assert gauge("0") == 90_000.0 and gauge("2") == 30_000.0
    clock[0] = 101.9
    m.observe_prefix(1000, 0)  # same second: not recomputed
    assert gauge("0") == 90_000.0
