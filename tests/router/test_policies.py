import random
from collections import Counter

import pytest

from tests.router.conftest import router_config
from hypothesis import given, settings
from hypothesis import strategies as st

from pdserve.router.core.build import build_policy
from pdserve.router.core.spec import PolicyName
from pdserve.router.core.kv_index import KvIndex
from pdserve.router.policies import (
    CacheAwarePolicy,
    CostWeights,
    Decision,
    KvAwarePolicy,
    NoWorkersError,
    PowerOfTwoPolicy,
    PrefixApproxPolicy,
    RouteRequest,
    WorkerView,
    pool_weights,
)

POLICIES = [p.value for p in PolicyName]

BS = 16


def req(rid: str, hashes: list[int], extra_tokens: int = 0) -> RouteRequest:
    n = len(hashes) * BS + extra_tokens
    return RouteRequest(rid, list(range(n)), hashes, n)


def idle(n: int) -> list[WorkerView]:
    return [WorkerView(f"w{i}") for i in range(n)]


def test_build_policy_rejects_unknown_names() -> None:
    with pytest.raises(ValueError, match="unknown routing policy 'nope'"):
        build_policy("nope", "decode")
    assert build_policy("kv-aware", "decode").name == "kv_aware"
    assert {build_policy(n, "prefill").name for n in PolicyName} == set(POLICIES)


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_explains_and_rejects_empty_pools(name: str) -> None:
    p = build_policy(name, "decode")
    d = p.select(req("r", [1, 2]), idle(3), now=0.0)
    assert d.worker_id in {"w0", "w1", "w2"}
    assert d.reason and d.policy == name
    assert f"worker={d.worker_id}" in d.header()
    with pytest.raises(NoWorkersError):
        p.select(req("r", [1]), [], now=0.0)


def test_round_robin_cycles() -> None:
    p = build_policy("round_robin", "decode")
    ws = idle(3)
    assert [p.select(req(str(i), []), ws, 0).worker_id for i in range(6)] == ["w0", "w1", "w2"] * 2


def test_least_loaded_uses_views_and_its_own_ledger() -> None:
    p = build_policy("least_loaded", "decode")
    ws = [WorkerView("a", running=5), WorkerView("b", running=1, waiting=1), WorkerView("c", running=3)]
    assert p.select(req("1", []), ws, 0).worker_id == "b"
    # Views are stale between scrapes: the ledger counts what the router itself sent.
    for i in range(4):
        d = p.select(req(f"x{i}", [], 10), ws, 0)
        p.on_routed(d, req(f"x{i}", [], 10), 0)
    assert p.ledger.requests("b") >= 3
    assert p.select(req("2", []), ws, 0).worker_id in {"b", "c"}


def test_least_loaded_avoids_full_kv() -> None:
    p = build_policy("least_loaded", "decode")
    ws = [WorkerView("a", kv_usage=0.99), WorkerView("b", running=10, kv_usage=0.5)]
    assert p.select(req("1", []), ws, 0).worker_id == "b"


def test_power_of_two_is_seeded_and_takes_the_lighter_of_the_pair() -> None:
    ws = [WorkerView(f"w{i}", running=i) for i in range(8)]
    a = PowerOfTwoPolicy(seed=7)
    b = PowerOfTwoPolicy(rng=random.Random(7))
    picks_a = [a.select(req(str(i), []), ws, 0).worker_id for i in range(50)]
    picks_b = [b.select(req(str(i), []), ws, 0).worker_id for i in range(50)]
    assert picks_a == picks_b
    assert "w7" not in picks_a  # the heaviest worker always loses its pair


def kv_policy_with(cached: dict[str, list[int]], **kw) -> tuple:
    idx = KvIndex()
    for w, hashes in cached.items():
        idx.store(w, hashes)
    return KvAwarePolicy(index=idx, **kw), idx


def test_kv_aware_prefers_the_worker_with_the_cached_prefix() -> None:
    p, _ = kv_policy_with({"w2": [1, 2, 3, 4]})
    d = p.select(req("r", [1, 2, 3, 4, 5]), idle(4), 0)
    assert d.worker_id == "w2" and d.overlap_blocks == 4
    assert d.new_prefill_tokens == BS
    assert "overlap 4/5" in d.reason


def test_kv_aware_trades_overlap_against_load() -> None:
    p, _ = kv_policy_with({"w0": [1, 2]})
    busy = [WorkerView("w0", inflight_prefill_tokens=5000), WorkerView("w1")]
    # 32 cached tokens are not worth waiting behind 5000 queued prompt tokens.
    assert p.select(req("r", [1, 2, 3]), busy, 0).worker_id == "w1"


def test_full_prompt_hit_still_computes_one_token() -> None:
    p, _ = kv_policy_with({"w0": [1, 2]})
    d = p.select(req("r", [1, 2]), idle(2), 0)
    assert d.worker_id == "w0" and d.new_prefill_tokens == 1


@pytest.mark.parametrize("name", ["kv_aware", "prefix_approx"])
def test_shared_system_prompt_does_not_herd(name: str) -> None:
    """Every request shares a long system prompt cached on one worker; a burst must
    still spread over the pool instead of all landing on that worker."""
    system = list(range(1000, 1040))  # 40 blocks = 640 tokens
    idx = None
    if name == "kv_aware":
        p, idx = kv_policy_with({"w0": system})
    else:
        p = build_policy(name, "decode")
        p.on_routed(p.select(req("warm", system), [WorkerView("w0")], 0), req("warm", system), 0)
        p.on_finished("warm", "w0", 0)
    ws = idle(4)
    counts: Counter[str] = Counter()
    for i in range(200):
        r = req(f"r{i}", system + [i * 10 + k for k in range(8)])
        d = p.select(r, ws, 1.0)
        p.on_routed(d, r, 1.0)
        if idx is not None:  # the worker reports what it cached, as a real one would
            idx.store(d.worker_id, r.block_hashes)
        counts[d.worker_id] += 1
    assert len(counts) == 4
    assert max(counts.values()) <= 1.5 * 200 / 4, counts


def test_balance_guard_caps_a_hot_worker_even_if_no_one_else_learns_the_prefix() -> None:
    system = list(range(1000, 1040))
    p, _ = kv_policy_with({"w0": system})
    ws = idle(4)
    counts: Counter[str] = Counter()
    for i in range(200):
        r = req(f"r{i}", system + [i * 10 + k for k in range(8)])
        d = p.select(r, ws, 1.0)
        p.on_routed(d, r, 1.0)
        counts[d.worker_id] += 1
    # The cached worker takes more, but never beyond balance_factor x mean + slack.
    assert counts["w0"] > 50
    assert counts["w0"] <= 1.5 * 50 + 4 + 1, counts


@pytest.mark.parametrize("name", ["kv_aware", "prefix_approx", "least_loaded", "cache_aware"])
def test_cache_misses_spread_over_an_idle_pool(name: str) -> None:
    p = build_policy(name, "decode")
    ws = idle(4)
    counts: Counter[str] = Counter()
    for i in range(8):
        r = req(f"r{i}", [i * 100 + k for k in range(4)])
        d = p.select(r, ws, 0)
        p.on_routed(d, r, 0)
        counts[d.worker_id] += 1
    assert sorted(counts.values()) == [2, 2, 2, 2]


def test_kv_aware_avoids_a_worker_about_to_preempt() -> None:
    p, _ = kv_policy_with({"w0": [1, 2, 3, 4, 5, 6]})
    ws = [WorkerView("w0", kv_usage=0.99), WorkerView("w1", running=3)]
    assert p.select(req("r", [1, 2, 3, 4, 5, 6]), ws, 0).worker_id == "w1"


def test_prefix_approx_learns_from_its_own_routing_and_forgets_after_ttl() -> None:
    p = PrefixApproxPolicy(ttl_s=30)
    ws = idle(4)
    # 40 blocks (640 tokens): enough to outweigh the recent-load charge of "a" itself.
    prefix = list(range(1, 41))
    first = req("a", prefix)
    d1 = p.select(first, ws, 0)
    p.on_routed(d1, first, 0)
    p.on_finished("a", d1.worker_id, 1)
    d2 = p.select(req("b", [*prefix, 99]), ws, 2)
    assert d2.worker_id == d1.worker_id and d2.overlap_blocks == 40
    d3 = p.select(req("c", [*prefix, 99]), ws, 100)
    assert d3.overlap_blocks == 0


def test_cache_aware_follows_sglang_rules() -> None:
    p = CacheAwarePolicy(balance_abs_threshold=2)
    ws = idle(3)
    a = req("a", [1, 2, 3, 4])
    da = p.select(a, ws, 0)
    p.on_routed(da, a, 0)
    # High match rate -> same worker.
    db = p.select(req("b", [1, 2, 3, 4, 5]), ws, 0)
    assert db.worker_id == da.worker_id and "match rate" in db.reason
    # Low match -> smallest tree, i.e. another worker.
    dc = p.select(req("c", [7, 8, 9]), ws, 0)
    assert dc.worker_id != da.worker_id
    # Imbalance -> shortest queue regardless of cache.
    loaded = [WorkerView(w.worker_id, running=10 if w.worker_id == da.worker_id else 0) for w in ws]
    dd = p.select(req("d", [1, 2, 3, 4, 5]), loaded, 0)
    assert dd.worker_id != da.worker_id and "imbalanced" in dd.reason


def test_ledger_returns_to_zero_and_expires() -> None:
    p = KvAwarePolicy(ledger_ttl_s=10)
    ws = idle(2)
    for i in range(5):
        r = req(f"r{i}", [i], 4)
        p.on_routed(p.select(r, ws, 0), r, 0)
    assert len(p.ledger) == 5
    p.on_prefill_done("r0", 0)
    for i in range(3):
        p.on_finished(f"r{i}", "ignored", 1)
    assert len(p.ledger) == 2
    p.select(req("late", [99]), ws, 20)
    assert len(p.ledger) == 0
    assert p.ledger.requests("w0") == p.ledger.prefill_tokens("w0") == 0


def test_cost_weights_validate() -> None:
    with pytest.raises(ValueError, match="kv_full"):
        CostWeights(kv_full=0)
    with pytest.raises(ValueError, match="request_tokens"):
        CostWeights(request_tokens=-1)


views = st.lists(
    st.builds(
        WorkerView,
        worker_id=st.just("x"),
        running=st.integers(0, 50),
        waiting=st.integers(0, 50),
        inflight_prefill_tokens=st.integers(0, 100_000),
        kv_usage=st.floats(0, 1),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=150, deadline=None)
@given(
    views,
    st.dictionaries(st.integers(0, 7), st.integers(0, 12), max_size=8),
    st.integers(0, 12),
    st.sampled_from(sorted(POLICIES)),
)
def test_properties_hold_for_any_pool(raw, cached_depth, prompt_blocks, name) -> None:
    ws = [WorkerView(f"w{i}", v.running, v.waiting, v.inflight_prefill_tokens, v.kv_usage) for i, v in enumerate(raw)]
    hashes = list(range(prompt_blocks))
    idx = KvIndex()
    for i, depth in cached_depth.items():
        if i < len(ws) and depth:
            idx.store(f"w{i}", range(depth))
    p = build_policy(name, "decode", index=idx)
    r = req("r", hashes, 5)
    d = p.select(r, ws, 0)
    assert d.worker_id in {w.worker_id for w in ws}
    assert 0 <= d.overlap_blocks <= prompt_blocks
    assert 1 <= d.new_prefill_tokens <= r.prompt_tokens
    if name == "kv_aware":
        expected = idx.overlaps(hashes).get(d.worker_id, 0)
        assert d.overlap_blocks == expected
        # The choice is never worse than another non-full, non-excluded worker by more than the tie band.
        if all(w.kv_usage < 0.97 for w in ws) and all(p.active_requests(w) <= 4 for w in ws):
            from pdserve.router.policies.cost import score_workers

            scored = score_workers(p, p.weights, r, ws, idx.overlaps(hashes))
            band = max(p.weights.tie_tokens, p.weights.tie_fraction * r.prompt_tokens)
            assert d.score <= min(s.cost for s in scored) + band


def test_prefill_pool_ignores_transient_kv_usage_but_not_a_full_cache() -> None:
    # A prefill worker's KV usage is prompts in flight and KV awaiting transfer: it must
    # not push a request off its cached prefix; a nearly full cache still does.
    hashes = list(range(1, 9))
    index = KvIndex()
    index.store("w0", hashes[:6])
    views = [WorkerView("w0", kv_usage=0.6), WorkerView("w1", kv_usage=0.0)]
    base = CostWeights(tie_fraction=0.0)
    decode = KvAwarePolicy(index=index, weights=pool_weights(base, "decode"), block_size=16)
    prefill = KvAwarePolicy(index=index, weights=pool_weights(base, "prefill"), block_size=16)
    r = req("a", hashes, extra_tokens=0)
    assert pool_weights(base, "prefill").kv_tokens == 0 and pool_weights(base, "decode") == base
    assert prefill.select(r, views, 0.0).worker_id == "w0"
    assert decode.select(r, views, 0.0).worker_id == "w1"  # 6 cached blocks < 0.6 x 2048 tokens of KV charge
    full = [WorkerView("w0", kv_usage=0.99), WorkerView("w1")]
    assert prefill.select(r, full, 0.0).worker_id == "w1"


def test_router_builds_its_prefill_policy_with_the_prefill_pool_weights() -> None:
    from pdserve.router.shell.state import RouterState

    from pdserve.router.core.spec import RoutingSpec

    routing = RoutingSpec(weights=CostWeights(kv_tokens=1000))
    st = RouterState(router_config(prefill=["http://p:1"], decode=["http://d:1"], routing=routing))
    assert st.prefill_policy.weights.kv_tokens == 0  # type: ignore[attr-defined]
    assert st.decode_policy.weights.kv_tokens == 1000  # type: ignore[attr-defined]


def test_recent_load_decays_by_half_life_and_survives_rebasing() -> None:
    from pdserve.router.policies.ledger import RecentLoad

    r = RecentLoad(half_life_s=10.0)
    r.add("a", 0.0)
    r.add("a", 0.0)
    assert r.value("a", 0.0) == pytest.approx(2.0)
    assert r.value("a", 10.0) == pytest.approx(1.0)
    assert r.value("b", 10.0) == 0.0
    # Far past the rebase point (2^64 scaling): the values stay exact, old ones fade.
    r.add("b", 10_000.0)
    assert r.value("b", 10_000.0) == pytest.approx(1.0)
    assert r.value("b", 10_010.0) == pytest.approx(0.5)
    assert r.value("a", 10_000.0) == pytest.approx(0.0, abs=1e-12)
    r.drop_worker("b")
    assert r.value("b", 10_000.0) == 0.0
    with pytest.raises(ValueError, match="half_life_s"):
        RecentLoad(0.0)
    with pytest.raises(ValueError, match="recent_half_life_s"):
        CostWeights(recent_half_life_s=0)


@pytest.mark.parametrize("name", ["kv_aware", "prefix_approx"])
def test_light_load_does_not_herd_onto_a_cached_shared_prefix(name: str) -> None:
    """Requests one at a time (each done before the next: nothing in flight, every view
    idle) sharing a system prompt first cached on w0. In-flight load is zero everywhere,
    so only the memory of recent assignments can spread them; without it all 100 land
    on w0 (max/mean 4.0)."""
    system = list(range(1000, 1040))  # 40 blocks = 640 tokens
    idx = KvIndex()
    idx.store("w0", system)
    p = build_policy(name, "decode", index=idx)
    if name == "prefix_approx":
        p.on_routed(p.select(req("warm", system), [WorkerView("w0")], 0), req("warm", system), 0)
        p.on_finished("warm", "w0", 0)
    ws = idle(4)
    counts: Counter[str] = Counter()
    for i in range(100):
        now = 2.0 * (i + 1)
        r = req(f"r{i}", system + [i * 10 + k for k in range(8)])
        d = p.select(r, ws, now)
        p.on_routed(d, r, now)
        idx.store(d.worker_id, r.block_hashes)  # the worker reports what it cached
        p.on_finished(r.request_id, d.worker_id, now + 1.0)
        counts[d.worker_id] += 1
    assert len(counts) == 4
    assert max(counts.values()) <= 1.2 * 100 / 4, counts


def test_recent_load_moves_small_overlaps_but_keeps_a_long_cached_context() -> None:
    """The worker that took the last 12 requests still gets a follow-up whose 1000-block
    context only it holds, but no longer a prompt that merely shares a 4-block system
    prompt with it (before the recent-load term both went to w0)."""
    idx = KvIndex()
    context = list(range(5000, 6000))
    idx.store("w0", context)
    idx.store("w0", [1, 2, 3, 4])
    p = build_policy("kv_aware", "decode", index=idx)
    for i in range(12):
        r = req(f"old{i}", [9000 + i])
        p.on_routed(Decision("w0", 0, 0.0, "", "kv_aware", r.prompt_tokens), r, float(i))
        p.on_finished(r.request_id, "w0", float(i) + 0.5)
    ws = idle(4)
    assert p.select(req("turn", context + [77]), ws, 12.0).worker_id == "w0"
    small = p.select(req("new", [1, 2, 3, 4] + list(range(600, 616))), ws, 12.0)
    assert small.worker_id != "w0", small.reason


@pytest.mark.parametrize("cls", [KvAwarePolicy, PrefixApproxPolicy])
def test_tie_offset_sets_where_rotation_among_ties_starts(cls: type[KvAwarePolicy]) -> None:
    """Four idle workers and no cached prefix are a four-way tie: the phase decides the first
    pick, then the rotation goes on from there (routing_quality.py --seeds varies it)."""
    def picks(offset: int) -> list[str]:
        p = cls(tie_offset=offset)
        out = []
        for i in range(4):
            r = req(f"r{i}", [100 * i + 1])
            d = p.select(r, idle(4), 0)
            p.on_routed(d, r, 0)
            p.on_finished(r.request_id, d.worker_id, 0)
            out.append(d.worker_id)
        return out

    base = picks(0)
    assert sorted(base) == ["w0", "w1", "w2", "w3"]
    assert picks(1) != base and sorted(picks(1)) == sorted(base)
    # Each pick charges its worker recent load, so the ties shrink 4, 3, 2: the phase acts modulo each.
    assert picks(12) == base
    with pytest.raises(ValueError, match="tie_offset"):
        cls(tie_offset=-1)


@pytest.mark.parametrize("name", ["kv_aware", "prefix_approx"])
def test_a_worker_joining_a_busy_pool_takes_its_share_not_the_whole_load(name: str) -> None:
    """w0 serves one request a second for 300 s alone; then w1 joins (the planner added a replica).
    Every request is done before the next, so in-flight load is zero on both and only the memory of
    recent assignments tells them apart. Before a newcomer started at its peers' recent load it started
    at zero, some 140 decayed requests (x 512 tokens) cheaper than w0, and took all 60 of the next
    minute's requests."""
    p = build_policy(name, "prefill")
    counts: Counter[str] = Counter()
    for i in range(360):
        now = float(i)
        ws = idle(1) if i < 300 else idle(2)
        r = req(f"r{i}", [10_000 + i * 8 + k for k in range(8)])  # no shared prefix
        d = p.select(r, ws, now)
        p.on_routed(d, r, now)
        p.on_finished(r.request_id, d.worker_id, now + 0.5)
        if i >= 300:
            counts[d.worker_id] += 1
    assert 24 <= counts["w1"] <= 36, counts


def test_recent_load_admits_newcomers_at_the_mean_of_their_known_peers() -> None:
    from pdserve.router.policies.ledger import RecentLoad

    r = RecentLoad(half_life_s=10.0)
    r.admit(["a", "b"])  # a pool's first decision: equals at zero
    assert r.value("a", 0.0) == r.value("b", 0.0) == 0.0
    for _ in range(4):
        r.add("a", 0.0)
    r.add("b", 0.0)
    r.admit(["a", "b", "c"])
    assert r.value("c", 0.0) == pytest.approx(2.5)
    assert r.value("c", 10.0) == pytest.approx(1.25)  # then decays like the rest
    r.admit(["a", "c"])  # known workers keep what they have
    assert (r.value("a", 0.0), r.value("c", 0.0)) == (pytest.approx(4.0), pytest.approx(2.5))
    r.drop_worker("b")
    r.admit(["a", "b"])  # back after a removal: a newcomer again
    assert r.value("b", 0.0) == pytest.approx(4.0)
