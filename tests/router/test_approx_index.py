import math

import pytest

from pdserve.router.core.approx_index import ApproxPrefixIndex


def test_records_and_expires_by_ttl() -> None:
    idx = ApproxPrefixIndex(ttl_s=10, max_blocks=100)
    idx.record("w1", [1, 2, 3], now=0)
    idx.record("w2", [1, 2], now=5)
    assert idx.overlaps([1, 2, 3], ["w1", "w2"], now=6) == {"w1": 3, "w2": 2}
    # w1's blocks were last used at t=0: gone after the TTL; w2's still live.
    assert idx.overlaps([1, 2, 3], ["w1", "w2"], now=12) == {"w2": 2}
    # Using a block again refreshes it.
    idx.record("w1", [1], now=12)
    assert idx.overlaps([1, 2], ["w1"], now=20) == {"w1": 1}


def test_size_bound_evicts_least_recently_used() -> None:
    idx = ApproxPrefixIndex(ttl_s=math.inf, max_blocks=3)
    idx.record("w1", [1, 2, 3], now=0)
    idx.record("w1", [1], now=1)  # 1 becomes most recent; 2 is now the oldest
    idx.record("w2", [9], now=2)
    assert len(idx) == 3
    assert idx.overlaps([1, 2, 3], ["w1"], now=3) == {"w1": 1}
    assert idx.size_of("w1") == 2 and idx.size_of("w2") == 1


def test_forget_worker_and_bad_options() -> None:
    idx = ApproxPrefixIndex()
    idx.record("w1", [1, 2], now=0)
    idx.forget_worker("w1")
    assert idx.overlaps([1, 2], ["w1"], now=0) == {}
    with pytest.raises(ValueError, match="ttl_s"):
        ApproxPrefixIndex(ttl_s=0)
    with pytest.raises(ValueError, match="max_blocks"):
        ApproxPrefixIndex(max_blocks=0)


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from("abc"), st.lists(st.integers(0, 9), max_size=5), st.integers(0, 50)), max_size=20),
    st.lists(st.integers(0, 9), max_size=8),
    st.sampled_from([5.0, math.inf]),
)
def test_overlaps_match_a_naive_model(records, prompt, ttl) -> None:
    idx = ApproxPrefixIndex(ttl_s=ttl, max_blocks=1000)
    last: dict[tuple[str, int], float] = {}
    now = 0.0
    for worker, hashes, dt in records:
        now += dt
        idx.record(worker, hashes, now)
        for h in hashes:
            last[(worker, h)] = now
    expected = {}
    for w in "abc":
        n = 0
        for h in prompt:
            t = last.get((w, h))
            if t is None or now - t > ttl:
                break
            n += 1
        if n:
            expected[w] = n
    assert idx.overlaps(prompt, "abc", now) == expected


def test_recent_routes_tracks_the_latest_worker_per_block() -> None:
    from pdserve.router.core.approx_index import RecentRoutes

    r = RecentRoutes(ttl_s=5, max_blocks=10)
    r.record("w1", [1, 2, 3], now=0)
    assert r.overlap([1, 2, 3, 4], now=1) == ("w1", 3)
    r.record("w2", [1, 2], now=2)  # the prefix went elsewhere later: the latest wins
    assert r.overlap([1, 2, 3], now=3) == ("w2", 2)
    assert r.overlap([1, 2, 3], now=8) == (None, 0)  # expired
    r.record("w3", range(100, 120), now=10)  # outgrows the bound: stale entries purged
    assert len(r) <= 10 or r.overlap([100], now=10) == ("w3", 1)
    r.forget_worker("w3")
    assert r.overlap([100], now=10) == (None, 0)
    with pytest.raises(ValueError):
        RecentRoutes(ttl_s=0)


def test_kv_aware_counts_just_routed_prompts_before_their_events_arrive() -> None:
    from pdserve.router.policies import KvAwarePolicy, RouteRequest, WorkerView

    p = KvAwarePolicy()
    ws = [WorkerView(f"w{i}") for i in range(4)]
    hashes = list(range(50))
    first = RouteRequest("a", (), hashes, 800)
    d1 = p.select(first, ws, 0.0)
    p.on_routed(d1, first, 0.0)
    d2 = p.select(RouteRequest("b", (), hashes + [99], 816), ws, 0.1)
    assert d2.worker_id == d1.worker_id and d2.overlap_blocks == 50
    off = KvAwarePolicy(speculative_ttl_s=0)
    d1 = off.select(first, ws, 0.0)
    off.on_routed(d1, first, 0.0)
    assert off.select(RouteRequest("b", (), hashes, 800), ws, 0.1).overlap_blocks == 0
