"""The route scheduler's rules (pure: no HTTP, explicit time)."""

from __future__ import annotations

from pdserve.router.core.scheduler import Mode, PoolViews, Scheduler
from pdserve.router.core.spec import AdmissionSpec, PolicyName, RoutingSpec
from pdserve.router.policies import RouteRequest, WorkerView

P = [WorkerView("p0"), WorkerView("p1")]
D = [WorkerView("d0"), WorkerView("d1")]


def req(rid: str, blocks: int, hashes: list[int] | None = None) -> RouteRequest:
    h = hashes if hashes is not None else list(range(blocks))
    return RouteRequest(rid, (), h, blocks * 16)


def test_without_a_prefill_pool_the_decode_pool_runs_the_prompt_policy() -> None:
    s = Scheduler(RoutingSpec(policy=PolicyName.ROUND_ROBIN))
    plan = s.plan(req("a", 4), PoolViews(decode=D), 0.0)
    assert plan.mode is Mode.COLOCATED and plan.prefill is None
    assert plan.decode is not None and plan.decode_policy is s.policies.local_decode
    assert plan.decode_policy.name == "round_robin" and plan.verdict is None


def test_pd_places_the_prefill_and_leaves_decode_to_least_loaded_after_it() -> None:
    s = Scheduler(RoutingSpec())
    plan = s.plan(req("a", 4), PoolViews(decode=D, prefill=P), 0.0)
    assert plan.mode is Mode.PD and plan.prefill is not None and plan.decode is None
    assert plan.decode_policy is s.policies.pd_decode and plan.decode_policy.name == "least_loaded"
    busy = [WorkerView("d0", running=5), WorkerView("d1")]
    d = s.decode_after_prefill(req("a", 4), busy, 1.0)
    assert d is not None and d.worker_id == "d1"


def test_no_prefill_worker_up_falls_back_to_local_prefill() -> None:
    s = Scheduler(RoutingSpec())
    plan = s.plan(req("a", 4), PoolViews(decode=D, prefill=[]), 0.0)
    assert plan.mode is Mode.LOCAL and plan.decode is not None
    assert plan.decode_policy is s.policies.local_decode and plan.decode_policy.name == "kv_aware"
    assert plan.notes == ["no prefill worker up: decode prefills locally"]


def test_threshold_skips_pd_for_prompts_mostly_cached_on_the_prefill_side() -> None:
    s = Scheduler(RoutingSpec(disagg_threshold_tokens=64))
    s.index.store("p0", range(10))
    cached = s.plan(req("a", 11), PoolViews(decode=D, prefill=P), 0.0)  # 16 new tokens on p0
    assert cached.mode is Mode.LOCAL and cached.notes == ["uncached 16 < 64 tokens: skip P/D"]
    fresh = s.plan(req("b", 11, list(range(100, 111))), PoolViews(decode=D, prefill=P), 0.0)
    assert fresh.mode is Mode.PD


def test_admission_refuses_on_the_chosen_workers_queue() -> None:
    spec = RoutingSpec(policy=PolicyName.LEAST_LOADED,
                       admission=AdmissionSpec(ttft_slo_ms=100, factor=1.0, prefill_tokens_per_s=10_000))
    s = Scheduler(spec)
    ok = s.plan(req("a", 50), PoolViews(decode=D, prefill=P), 0.0)  # 800 tokens: 80 ms
    assert ok.mode is Mode.PD and ok.admitted and ok.verdict is not None
    assert abs(ok.verdict.predicted_ttft_s - 0.08) < 1e-9
    assert ok.prefill is not None
    s.on_routed(s.policies.prefill, ok.prefill, req("a", 50), 0.0)
    s.on_routed(s.policies.prefill, s.plan(req("b", 50), PoolViews(decode=D, prefill=P), 0.0).prefill,  # type: ignore[arg-type]
                req("b", 50), 0.0)
    # Both prefill workers now queue 800 tokens: another 800 predicts 160 ms > 100 ms.
    refused = s.plan(req("c", 50), PoolViews(decode=D, prefill=P), 0.0)
    assert not refused.admitted and refused.verdict is not None and refused.verdict.retry_after_s >= 1
    # The ledger drains when the prefill is done: admitted again.
    s.on_finished(s.policies.prefill, "a", ok.prefill.worker_id, 0.5)
    assert s.plan(req("d", 50), PoolViews(decode=D, prefill=P), 0.5).admitted


def test_forgetting_a_worker_clears_every_policy() -> None:
    s = Scheduler(RoutingSpec(decode_policy=PolicyName.KV_AWARE))
    plan = s.plan(req("a", 4), PoolViews(decode=D), 0.0)
    assert plan.decode is not None
    s.on_routed(plan.decode_policy, plan.decode, req("a", 4), 0.0)
    s.index.store(plan.decode.worker_id, (1, 2))
    s.forget_worker(plan.decode.worker_id)
    assert all(p.ledger.requests(plan.decode.worker_id) == 0 for p in s.policies.all())
    assert s.index.overlaps([1, 2], [plan.decode.worker_id]).get(plan.decode.worker_id, 0) == 0


def test_a_decode_worker_holding_the_prefix_prefills_it_locally() -> None:
    """Conditional disaggregation on the decode side's cache: a long prompt whose earlier turn d1
    received (and cached) needs few tokens there but a full prefill on an evicted prefill pool."""
    s = Scheduler(RoutingSpec(decode_reuse_threshold_tokens=64))
    s.index.store("d1", range(10))  # 160 of 176 tokens held by d1, nothing on the prefill side
    plan = s.plan(req("a", 11), PoolViews(decode=D, prefill=P), 0.0)
    assert plan.mode is Mode.LOCAL and plan.decode is not None and plan.decode.worker_id == "d1"
    assert plan.decode_policy is s.policies.local_decode
    assert plan.notes == ["decode worker holds the prefix: uncached 16 < 64 tokens (prefill side 176): skip P/D"]
    # Too much left to compute on d1, or the prefill side holds as much: P/D as before.
    assert s.plan(req("b", 20), PoolViews(decode=D, prefill=P), 0.0).mode is Mode.PD
    s.index.store("p0", range(10))
    assert s.plan(req("c", 11), PoolViews(decode=D, prefill=P), 0.0).mode is Mode.PD


def test_decode_reuse_is_off_by_default_and_independent_of_the_prefill_side_threshold() -> None:
    for spec in (RoutingSpec(), RoutingSpec(disagg_threshold_tokens=64)):
        s = Scheduler(spec)
        s.index.store("d1", range(10))
        assert s.plan(req("a", 11), PoolViews(decode=D, prefill=P), 0.0).mode is Mode.PD


def backlog(p_queued: int, d_queued: tuple[int, int] = (0, 0)) -> PoolViews:
    """One prefill worker queueing ``p_queued`` prompt tokens, two decode workers queueing ``d_queued``."""
    return PoolViews(decode=[WorkerView("d0", inflight_prefill_tokens=d_queued[0]),
                             WorkerView("d1", inflight_prefill_tokens=d_queued[1])],
                     prefill=[WorkerView("p0", inflight_prefill_tokens=p_queued)])


def test_a_backed_up_prefill_worker_sends_the_prompt_to_a_decode_worker() -> None:
    """Conditional disaggregation on the prefill backlog: p0 queues 1,600 tokens (100 blocks), more
    than the limit; this 176-token prompt finishes after 176 tokens on an idle decode worker
    against 1,776 on p0."""
    s = Scheduler(RoutingSpec(max_prefill_queue_tokens=1599))
    plan = s.plan(req("a", 11), backlog(1600), 0.0)
    assert plan.mode is Mode.LOCAL and plan.decode is not None and plan.prefill is None
    assert plan.decode_policy is s.policies.local_decode
    assert plan.notes == [f"prefill worker p0 queues 1600 > 1599 tokens; {plan.decode.worker_id} finishes this "
                          "prefill after 176 < 1776 tokens: skip P/D"]


def test_the_backlog_rule_fires_only_above_the_limit() -> None:
    s = Scheduler(RoutingSpec(max_prefill_queue_tokens=1600))
    assert s.plan(req("a", 11), backlog(1600), 0.0).mode is Mode.PD  # at the limit: not above it
    assert s.plan(req("b", 11), backlog(1601), 0.0).mode is Mode.LOCAL
    # Off by default, whatever the backlog.
    assert Scheduler(RoutingSpec()).plan(req("c", 11), backlog(10**6), 0.0).mode is Mode.PD


def test_the_backlog_rule_keeps_pd_when_the_decode_workers_are_no_quicker() -> None:
    s = Scheduler(RoutingSpec(max_prefill_queue_tokens=1000))
    # Both decode workers already prefill 1,600 tokens locally: 1,776 there is not fewer than 1,776 on p0.
    assert s.plan(req("a", 11), backlog(1600, (1600, 1600)), 0.0).mode is Mode.PD
    # One of them with 1,599 queued: 1,775 < 1,776, if the local policy picks it.
    plan = s.plan(req("b", 11), backlog(1600, (1599, 1600)), 0.0)
    assert plan.mode is Mode.LOCAL and plan.decode is not None and plan.decode.worker_id == "d0"


def test_the_backlog_counts_prompts_the_router_sent_but_the_worker_has_not_reported() -> None:
    """The scrape says 0 queued; the router's own ledger of routed prefills is the backlog."""
    s = Scheduler(RoutingSpec(policy=PolicyName.LEAST_LOADED, max_prefill_queue_tokens=1000))
    views = PoolViews(decode=D, prefill=[WorkerView("p0")])
    first = s.plan(req("a", 100), views, 0.0)  # 1,600 tokens, nothing queued yet: P/D
    assert first.mode is Mode.PD and first.prefill is not None
    s.on_routed(s.policies.prefill, first.prefill, req("a", 100), 0.0)
    assert s.plan(req("b", 11), views, 0.1).mode is Mode.LOCAL
    s.on_prefill_done(s.policies.prefill, "a", 0.2)  # its prefill is done: the queue is empty again
    assert s.plan(req("c", 11), views, 0.3).mode is Mode.PD
