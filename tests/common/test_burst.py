"""The burst meter's delay-bound rate, pinned on hand-computed buckets."""

from __future__ import annotations

import pytest

from pdserve.common.burst import BurstMeter


def test_need_is_the_delay_bound_over_every_window_of_whole_buckets():
    m = BurstMeter(resolution_s=1.0, span_s=30.0)
    m.add(100.2, 40_000)
    m.add(100.7, 20_000)  # bucket 100: 60k
    m.add(101.5, 30_000)  # bucket 101: 30k
    # windows: [100] 60k/1 s, [100, 101] 90k/2 s, [101] 30k/1 s
    assert m.need(0.0, 110.0) == pytest.approx(60_000)
    # budget 2 s: 60k/3, 90k/4, 30k/3 -> the two-second window binds
    assert m.need(2.0, 110.0) == pytest.approx(22_500)
    # a gap counts as time: a bucket at 104 alone is 10k/3 s, with [100..104] 100k/7 s
    m.add(104.1, 10_000)
    assert m.need(2.0, 110.0) == pytest.approx(max(22_500, 100_000 / 7))


def test_the_bucket_still_filling_and_buckets_past_the_span_are_not_read():
    m = BurstMeter(resolution_s=1.0, span_s=30.0)
    m.add(100.2, 60_000)
    m.add(101.5, 30_000)
    assert m.need(0.0, 101.6) == pytest.approx(60_000)  # 101 is not over yet: a past reading sees no later arrival
    assert m.need(0.0, 130.5) == pytest.approx(30_000)  # the span (30 s) holds 101..129 only
    assert m.need(0.0, 200.0) == 0.0
    assert m.need(0.0, 200.0, since=99.0) == pytest.approx(60_000)  # an explicit range reaches back (retained)


def test_old_buckets_are_dropped_and_bad_arguments_refused():
    m = BurstMeter(resolution_s=1.0, span_s=10.0, retain_s=20.0)
    m.add(0.5, 50_000)
    for t in range(1, 100):
        m.add(t + 0.5, 1_000)
    assert len(m._buckets) <= 22  # what a day of traffic keeps: the retained 20 s, not the day
    assert m.need(0.0, 200.0, since=-1.0) == pytest.approx(1_000)  # the 50k second is gone
    with pytest.raises(ValueError, match="budget must be >= 0"):
        m.need(-1.0, 10.0)
    with pytest.raises(ValueError, match="resolution > 0"):
        BurstMeter(resolution_s=0.0)


def test_a_short_burst_reads_at_its_rate_a_steady_stream_near_its_mean():
    """Why the planner reads this instead of irate(): 44 requests of 6k tokens in 3 s
    arrive at ~90k tokens/s, which one 15 s scrape averages to ~18k."""
    m = BurstMeter()
    for i in range(44):
        m.add(100 + i * 3 / 44, 6_000)
    assert m.need(0.0, 110.0) == pytest.approx(90_000)
    assert m.need(2.0, 110.0) == pytest.approx(44 * 6_000 / 5)  # all three seconds + 2 s of budget
    steady = BurstMeter()
    for i in range(300):  # 10 requests/s of 1k tokens, evenly: 10k tokens/s
        steady.add(100 + i / 10 + 0.01, 1_000)
    assert steady.need(0.0, 130.0) == pytest.approx(10_000)
    assert steady.need(2.0, 130.0) < 10_000
