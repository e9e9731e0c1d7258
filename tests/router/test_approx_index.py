import math

import pytest

from pdserve.router.approx_index import ApproxPrefixIndex


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
