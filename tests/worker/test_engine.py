"""The engine model: vLLM-v1-style continuous batching on a simulated clock."""

from __future__ import annotations

import random

import pytest

from pdserve.tokenization.mock import EOS_ID
from pdserve.worker.engine import Engine, EngineConfig, EngineRequest, StepOutput
from pdserve.worker.perf import PerfModel, load_profile

PERF = PerfModel(load_profile("llama-3.1-8b-h100"))


def make(num_blocks: int = 1000, **kw: object) -> Engine:
    return Engine(EngineConfig(num_blocks=num_blocks, **kw), PERF)  # type: ignore[arg-type]


def req(rid: str, n_prompt: int = 40, max_tokens: int = 5, base: int = 5000, **kw: object) -> EngineRequest:
    return EngineRequest(rid, list(range(base, base + n_prompt)), max_tokens=max_tokens, **kw)  # type: ignore[arg-type]


def run(engine: Engine, now: float = 0.0, limit: int = 100_000) -> tuple[float, list[StepOutput]]:
    outs = []
    for _ in range(limit):
        if not engine.has_work():
            return now, outs
        out = engine.step(now)
        outs.append(out)
        now += out.duration
    raise AssertionError("engine did not drain")


def tokens_by_request(outs: list[StepOutput]) -> dict[str, list[int]]:
    res: dict[str, list[int]] = {}
    for o in outs:
        for t in o.tokens:
            res.setdefault(t.request_id, []).append(t.token_id)
    return res


def test_single_request_generates_max_tokens_and_frees_blocks() -> None:
    e = make()
    e.add_request(req("a", 1000, 7), 0.0)
    _, outs = run(e)
    toks = [t for o in outs for t in o.tokens]
    assert [t.index for t in toks] == list(range(7))
    assert toks[-1].finished and toks[-1].finish_reason == "length"
    assert outs[0].num_prefill_tokens == 1000 and outs[0].started == ["a"]
    assert all(o.num_decode_tokens == 1 for o in outs[1:])
    assert e.stats().free_blocks == 1000 and e.stats().running == 0
    # The 1000-token prefill step (compute-bound) costs more than a decode step.
    assert outs[0].duration > outs[1].duration > 0


def test_max_num_seqs_limits_the_batch() -> None:
    e = make(max_num_seqs=4)
    for i in range(10):
        e.add_request(req(f"r{i}", 20, 3, base=i * 100), 0.0)
    out = e.step(0.0)
    assert out.num_scheduled == 4
    assert e.stats().running == 4 and e.stats().waiting == 6
    _, outs = run(e, out.duration)
    assert max(o.num_scheduled for o in outs) <= 4
    assert len(tokens_by_request([out, *outs])) == 10


def test_chunked_prefill_respects_token_budget() -> None:
    e = make(max_num_batched_tokens=512)
    e.add_request(req("long", 1300, 2), 0.0)
    e.add_request(req("short", 10, 2, base=90_000), 0.0)
    outs = [e.step(0.0)]
    assert outs[0].num_prefill_tokens == 512 and not outs[0].tokens  # no token mid-prefill
    _, more = run(e, outs[0].duration)
    outs += more
    assert all(o.num_prefill_tokens + o.num_decode_tokens <= 512 for o in outs)
    assert sum(o.num_prefill_tokens for o in outs) == 1310
    first_token_step = next(i for i, o in enumerate(outs) if any(t.request_id == "long" for t in o.tokens))
    assert first_token_step == 2  # 512 + 512 + 276


def test_no_chunking_waits_for_a_full_budget() -> None:
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        make(enable_chunked_prefill=False, max_num_batched_tokens=512, max_model_len=2048)
    e = make(enable_chunked_prefill=False, max_num_batched_tokens=2048, max_model_len=2048)
    e.add_request(req("a", 1500, 1), 0.0)
    e.add_request(req("b", 1000, 1, base=70_000), 0.0)
    out = e.step(0.0)
    assert out.num_prefill_tokens == 1500  # b does not fit the rest of the budget and is not chunked


def test_prefix_cache_hit_skips_computation() -> None:
    e = make()
    e.add_request(req("a", 100, 2), 0.0)
    now, _ = run(e)
    e.add_request(req("b", 100, 2), now)
    out = e.step(now)
    # 6 full blocks cached (96 tokens); the hit is capped so >= 1 token is computed
    assert out.num_prefill_tokens == 4
    s = e.stats()
    assert s.prefix_queries == 200 and s.prefix_hits == 96


def test_full_prompt_hit_still_recomputes_last_token() -> None:
    e = make()
    e.add_request(req("a", 64, 1), 0.0)
    now, _ = run(e)
    e.add_request(req("b", 64, 1), now)
    out = e.step(now)
    assert out.num_prefill_tokens == 16  # 3 of 4 blocks reused; last block recomputed


def test_kv_events_stored_and_lru_eviction() -> None:
    e = make(num_blocks=8)
    e.add_request(req("a", 64, 1, base=1000), 0.0)  # 4 blocks, cached after finishing
    now, outs = run(e)
    stored = [s for o in outs for s in o.kv_events.stored]
    assert sum(len(s.block_hashes) for s in stored) == 4
    assert stored[0].parent_block_hash is None and len(stored[0].token_ids) == 64
    e.add_request(req("b", 64, 1, base=2000), now)  # 4 blocks from the never-used ones
    now, outs = run(e, now)
    assert not [h for o in outs for h in o.kv_events.removed]
    e.add_request(req("c", 48, 1, base=3000), now)  # must evict 3 cached blocks, oldest (a's) first
    now, outs = run(e, now)
    removed = [h for o in outs for h in o.kv_events.removed]
    a_hashes = [h for s in stored for h in s.block_hashes]
    assert len(removed) == 3 and set(removed) <= set(a_hashes)
    # a's first block survives (tail blocks are evicted first) and still hits.
    e.add_request(req("a2", 17, 1, base=1000), now)
    e.step(now)
    assert e.stats().prefix_hits == 16


def test_preemption_by_recompute_when_kv_runs_out() -> None:
    e = make(num_blocks=12, block_size=16)
    for i in range(4):
        e.add_request(req(f"r{i}", 30, 60, base=i * 1000), 0.0)
    _, outs = run(e)
    assert e.stats().preemptions > 0
    assert any(o.preempted for o in outs)
    toks = tokens_by_request(outs)
    assert sorted(toks) == [f"r{i}" for i in range(4)]
    assert all(len(v) == 60 for v in toks.values())
    assert e.stats().free_blocks == 12


def test_deterministic() -> None:
    def once() -> tuple[list[float], dict[str, list[int]]]:
        e = make(num_blocks=40, max_num_seqs=8)
        rng = random.Random(7)
        for i in range(30):
            e.add_request(req(f"r{i}", rng.randint(5, 200), rng.randint(1, 30), base=rng.randint(0, 5) * 1000, seed=i), 0.0)
        _, outs = run(e)
        return [o.duration for o in outs], tokens_by_request(outs)

    assert once() == once()


def test_eos_min_tokens_ignore_eos_and_stop_ids() -> None:
    e = make()
    e.add_request(req("eos", max_tokens=50, eos_after=3), 0.0)
    e.add_request(req("min", max_tokens=50, eos_after=3, min_tokens=6, base=100), 0.0)
    e.add_request(req("ign", max_tokens=8, eos_after=3, ignore_eos=True, base=200), 0.0)
    _, outs = run(e)
    toks = tokens_by_request(outs)
    fin = {t.request_id: t.finish_reason for o in outs for t in o.tokens if t.finished}
    assert len(toks["eos"]) == 3 and toks["eos"][-1] == EOS_ID and fin["eos"] == "stop"
    assert len(toks["min"]) == 6 and fin["min"] == "stop"
    assert len(toks["ign"]) == 8 and EOS_ID not in toks["ign"] and fin["ign"] == "length"
    e2 = make()
    e2.add_request(req("s", max_tokens=200, seed=3), 0.0)
    _, outs = run(e2)
    stop_tok = tokens_by_request(outs)["s"][4]
    e3 = make()
    e3.add_request(req("s", max_tokens=200, seed=3, stop_token_ids=(stop_tok,)), 0.0)
    _, outs = run(e3)
    got = tokens_by_request(outs)["s"]
    assert got[-1] == stop_tok and len(got) <= 5


def test_max_model_len_caps_output() -> None:
    e = make(max_model_len=50)
    e.add_request(req("a", 45, 100), 0.0)
    _, outs = run(e)
    assert len(tokens_by_request(outs)["a"]) == 5
    with pytest.raises(ValueError, match="max_model_len"):
        e.add_request(req("b", 50, 1), 0.0)


def test_bad_requests_are_rejected() -> None:
    e = make(num_blocks=2)
    with pytest.raises(ValueError, match="at least one token"):
        e.add_request(EngineRequest("x", [], max_tokens=1), 0.0)
    with pytest.raises(ValueError, match="max_tokens"):
        e.add_request(req("y", 5, 0), 0.0)
    with pytest.raises(ValueError, match="KV blocks"):
        e.add_request(req("z", 40, 1), 0.0)
    e.add_request(req("ok", 5, 1), 0.0)
    with pytest.raises(ValueError, match="duplicate"):
        e.add_request(req("ok", 5, 1), 0.0)


def test_abort_frees_blocks() -> None:
    e = make(num_blocks=100)
    e.add_request(req("a", 100, 50), 0.0)
    e.add_request(req("b", 100, 50, base=9000), 0.0)
    e.step(0.0)
    assert e.abort("a") and e.abort("b")
    assert not e.abort("a")
    assert e.stats().free_blocks == 100 and not e.has_work()


def test_hold_kv_keeps_blocks_until_release_or_lease_expiry() -> None:
    e = make(num_blocks=100, kv_lease_s=5.0)
    e.add_request(req("p", 100, 1, hold_kv=True), 0.0)
    out = e.step(0.0)
    (ev,) = out.tokens
    assert ev.finished and ev.held_block_ids and len(ev.held_block_ids) == 7
    assert e.stats().held == 1 and e.stats().free_blocks == 93
    held = e.get_held("p")
    assert held is not None and held.block_ids == ev.held_block_ids
    assert e.release("p") and not e.release("p")
    assert e.stats().free_blocks == 100
    e.add_request(req("q", 100, 1, hold_kv=True, base=777), 1.0)
    e.step(1.0)
    assert e.next_event_time() == pytest.approx(1.0 + e.config.kv_lease_s, abs=0.1)
    out = e.step(10.0)
    assert out.expired == ["q"] and e.stats().held == 0 and e.stats().free_blocks == 100


def test_remote_prefilled_request_skips_prompt_compute() -> None:
    e = make()
    e.add_request(req("d", 1000, 3, remote_prefilled=True, kv_ready_time=0.5), 0.0)
    out = e.step(0.0)
    assert out.num_scheduled == 0 and e.next_event_time() == 0.5
    out = e.step(0.5)
    assert out.num_scheduled == 1 and out.num_prefill_tokens == 1 and len(out.tokens) == 1
    # transferred blocks are registered in the prefix cache (BlockStored on the decode side)
    assert sum(len(s.block_hashes) for s in out.kv_events.stored) == 62
    _, outs = run(e, 0.5 + out.duration)
    assert e.stats().computed_prompt_tokens == 1
    assert len(tokens_by_request([out, *outs])["d"]) == 3


def test_thousands_of_requests_replay_quickly() -> None:
    import time

    e = make(num_blocks=27_000, max_num_seqs=256, max_num_batched_tokens=8192)
    rng = random.Random(1)
    t0 = time.process_time()  # CPU time: the shared test machine's load must not fail this
    now = 0.0
    pending = [(i * 0.01, req(f"r{i}", rng.randint(50, 2000), rng.randint(10, 300), base=rng.randint(0, 50) * 3000))
               for i in range(1500)]
    pending.reverse()
    while pending or e.has_work():
        while pending and pending[-1][0] <= now:
            t, r = pending.pop()
            e.add_request(r, t)
        if not e.has_work():
            now = pending[-1][0]
            continue
        now += e.step(now).duration
    elapsed = time.process_time() - t0
    assert e.stats().generated_tokens > 1500 * 10
    assert elapsed < 10, f"1500 requests took {elapsed:.1f}s of CPU"


def test_overloaded_shared_prefix_workload_drains() -> None:
    """Waiting requests must not sit on cached prefix blocks: with a small pool, many long prompts sharing
    prefixes once deadlocked the engine (nothing running, every block pinned by the waiting queue)."""
    e = make(num_blocks=120, max_num_seqs=6, max_num_batched_tokens=512)
    rng = random.Random(5)
    groups = [list(range(g * 10_000, g * 10_000 + 640)) for g in range(6)]  # 40-block shared prefixes
    for i in range(60):
        prefix = groups[rng.randrange(len(groups))]
        tail = [900_000 + i * 1000 + k for k in range(rng.randint(16, 600))]
        e.add_request(EngineRequest(f"r{i}", prefix + tail, max_tokens=rng.randint(20, 200), ignore_eos=True), 0.0)
    _, outs = run(e, limit=200_000)
    assert len(tokens_by_request(outs)) == 60
    assert e.stats().free_blocks == 120 and e.stats().prefix_hits > 0


# --- the modelled front-end latency ---------------------------------------------------------------------


def test_frontend_latency_delays_scheduling_and_first_token() -> None:
    fe = 0.02
    e = Engine(EngineConfig(num_blocks=1000, frontend_latency_s=fe), PERF)
    e.add_request(req("a", 500, 3), 0.0)
    out = e.step(0.0)
    # still in the front-end: nothing runs, no time passes, and the engine says when to come back
    assert out.num_scheduled == 0 and out.duration == 0.0 and not out.tokens
    assert e.next_event_time(0.0) == pytest.approx(fe)
    out = e.step(fe)
    assert out.started == ["a"] and out.num_prefill_tokens == 500
    assert out.tokens[0].index == 0
    # first token at arrival + front-end + the prefill step: the same step as without the front-end
    plain = Engine(EngineConfig(num_blocks=1000), PERF)
    plain.add_request(req("a", 500, 3), 0.0)
    assert out.duration == pytest.approx(plain.step(0.0).duration)


def test_requests_arriving_within_the_frontend_latency_are_batched_by_readiness() -> None:
    fe = 0.02
    e = Engine(EngineConfig(num_blocks=1000, frontend_latency_s=fe), PERF)
    e.add_request(req("a", 100, 2, base=0), 0.0)
    e.add_request(req("b", 100, 2, base=1000), 0.005)
    assert e.step(0.01).num_scheduled == 0
    out = e.step(0.02)
    assert out.started == ["a"]  # b leaves the front-end 5 ms later
    assert e.next_event_time(0.02) == pytest.approx(0.025)
    out = e.step(0.025)
    assert "b" in out.started


def test_remote_kv_arriving_after_the_frontend_gates_admission() -> None:
    e = Engine(EngineConfig(num_blocks=1000, frontend_latency_s=0.02), PERF)
    e.add_request(req("d", 1000, 3, remote_prefilled=True, kv_ready_time=0.5), 0.0)
    assert e.next_event_time(0.0) == pytest.approx(0.5)
    assert e.step(0.1).num_scheduled == 0
    assert e.step(0.5).started == ["d"]


def test_next_event_time_skips_gates_already_passed() -> None:
    # a request past its gate but blocked by KV must not make a caller wait for a time already gone
    e = Engine(EngineConfig(num_blocks=4, block_size=16, frontend_latency_s=0.02), PERF)
    e.add_request(req("big", 60, 1, hold_kv=True), 0.0)
    run(e, 0.02)
    assert e.held  # its 4 blocks are held for a remote decode
    e.add_request(req("next", 40, 1, base=9000), 0.03)
    assert e.step(0.06).num_scheduled == 0  # past its gate, blocked by the held KV
    lease_end = next(iter(e.held.values())).expires_at
    assert e.next_event_time(0.06) == pytest.approx(lease_end)
    assert e.next_event_time() == pytest.approx(0.05)  # without `now`: every gate, as before


def test_frontend_latency_is_opt_in_and_validated() -> None:
    assert EngineConfig(num_blocks=10).frontend_latency_s == 0.0  # the engine alone models none
    with pytest.raises(ValueError, match="frontend_latency_s"):
        EngineConfig(num_blocks=10, frontend_latency_s=-0.001)
    # the calibrated profile carries a value, with where it comes from
    profile = load_profile("llama-3.1-8b-h100")
    assert profile.efficiency.frontend_latency_s > 0
    assert "frontend_latency_s" in profile.calibration
    assert load_profile("opt-13b-a100").efficiency.frontend_latency_s == 0.0  # no measurement behind one there
