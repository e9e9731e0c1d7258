"""pdserve.worker.decode_run against Engine.step itself.

From many engine states (seeded workloads: mixed prompt and output lengths, block sizes,
prefix caching on and off, a short max_model_len, a step gap), ``plan`` + ``advance``
over ``plain_steps`` steps must leave exactly the state and give exactly the end times
of as many ``Engine.step`` calls; each of those steps must be plain (no first token, no
finish, no allocation, no KV event) and the step after them must not be (the count is
exact, not merely safe).
"""

from __future__ import annotations

import copy
import math
import random

import pytest

from pdserve.worker.decode_run import advance, plain_steps, plan
from pdserve.worker.engine import Engine, EngineConfig, EngineRequest
from pdserve.worker.perf import PerfModel, load_profile

PERF = PerfModel(load_profile("llama-3.1-8b-h100"))
PERF_TP2 = PerfModel(load_profile("llama-3.1-8b-h100", 2))


def _state(e: Engine) -> object:
    reqs = [(r.request_id, r.num_computed, r.num_tokens, list(r.output_token_ids), r.rng, list(r.block_ids),
             r.num_cached_blocks, list(r.block_hashes)) for r in e.running]
    return reqs, e.generated_tokens, e.computed_prompt_tokens, e.pool.num_free, dict(e.pool.cached)


def _is_plain(e: Engine, now: float) -> tuple[bool, float]:
    free = e.pool.num_free
    out = e.step(now)
    plain = (e.pool.num_free == free and not out.kv_events.stored and not out.kv_events.removed
             and out.num_prefill_tokens == 0 and not out.started
             and all(t.index > 0 and not t.finished for t in out.tokens) and len(out.tokens) == out.num_scheduled)
    return plain, out.duration


@pytest.mark.parametrize("seed", range(8))
def test_plan_and_advance_equal_engine_steps(seed: int) -> None:
    rnd = random.Random(seed)
    # seeds 4..7 model a front-end: new requests wait, gated, while the running ones may coast up to the gate
    cfg = EngineConfig(num_blocks=400, block_size=rnd.choice((4, 16, 64) if seed < 4 else (64, 128)),
                       max_num_batched_tokens=2048,
                       max_model_len=rnd.choice((1500, 131072)), enable_prefix_caching=seed % 3 != 2,
                       frontend_latency_s=0.03 if seed >= 4 else 0.0)
    e = Engine(cfg, PERF_TP2 if seed % 2 else PERF)
    gap = rnd.choice((0.0, 0.0004))
    now, checked, gated = 0.0, 0, 0
    for i in range(40):
        n_in = rnd.randint(1, 600)
        e.add_request(EngineRequest(request_id=f"r{i}", prompt_token_ids=[rnd.randrange(1000) for _ in range(n_in)],
                                    max_tokens=rnd.randint(1, 300), ignore_eos=True, seed=i % 3), now)
        for _ in range(rnd.randint(1, 60)):
            k = plain_steps(e, now)
            if k:
                planned = plan(e, now, k, math.inf, gap)
                ref = copy.deepcopy(e)
                ends, t = [], now
                for _ in range(len(planned)):
                    plain, d = _is_plain(ref, t)
                    assert plain
                    t = t + d + gap
                    ends.append(t)
                assert planned == ends
                gate = min((w.schedulable_at for w in e.waiting if w.schedulable_at is not None), default=math.inf)
                if len(ends) < k:  # cut by a waiting request's gate: the last step is the first to end there
                    gated += 1
                    assert ends[-1] >= gate and (len(ends) == 1 or ends[-2] < gate)
                else:
                    assert not _is_plain(copy.deepcopy(ref), t)[0]  # the count is exact
                m = len(ends)
                if m > 1:
                    cut = plan(e, now, m, ends[m // 2], gap)
                    assert cut == ends[: m // 2 + 1]  # up to and including the first end at the bound
                advance(e, m)
                assert _state(e) == _state(ref)
                now = t
                checked += 1
            if not e.has_work():
                break
            out = e.step(now)
            # nothing schedulable yet (all in the front-end): go to the first gate, as the simulator's kick does
            now = now + out.duration + gap if out.num_scheduled else e.next_event_time(now) or now
    assert checked >= 5
    if seed >= 4:
        assert gated >= 1  # runs cut at a gate were checked too


def test_no_plain_steps_while_anything_waits_or_stops_on_tokens() -> None:
    e = Engine(EngineConfig(num_blocks=100, block_size=128), PERF)
    e.add_request(EngineRequest(request_id="a", prompt_token_ids=[1] * 40, max_tokens=50, ignore_eos=True), 0.0)
    assert plain_steps(e, 0.0) == 0  # waiting
    t = e.step(0.0).duration
    assert plain_steps(e, t) == 50 - 1 - 1  # tokens 2..49 of 50; the 50th finishes it (and no block fills first)
    e.add_request(EngineRequest(request_id="b", prompt_token_ids=[1] * 40, max_tokens=50, stop_token_ids=(7,)), t)
    e.step(t)
    assert plain_steps(e, t) == 0  # "b" may stop on a sampled token


def test_a_gated_request_bounds_the_run_and_an_admissible_one_stops_it() -> None:
    e = Engine(EngineConfig(num_blocks=100, block_size=128, frontend_latency_s=0.05), PERF)
    e.add_request(EngineRequest(request_id="a", prompt_token_ids=[1] * 40, max_tokens=80, ignore_eos=True), 0.0)
    t = 0.05
    t += e.step(t).duration  # its first token
    e.add_request(EngineRequest(request_id="b", prompt_token_ids=[1] * 40, max_tokens=5, ignore_eos=True), t)
    gate = t + 0.05
    assert plain_steps(e, t) == 80 - 2  # "b" waits in the front-end: "a"'s steps do not admit it
    ends = plan(e, t, 78, math.inf)
    assert 1 < len(ends) < 78 and ends[-2] < gate <= ends[-1]  # up to the first step that ends at the gate
    assert plain_steps(e, gate) == 0  # from the gate on, a step admits "b"


def test_advance_without_the_seed_stream_draws_as_step() -> None:
    """A request handed in with output tokens it did not sample (the sampler state no longer matches the seed's
    stream at that length) is advanced by its own state, as ``Engine.step`` samples it."""
    e = Engine(EngineConfig(num_blocks=100, block_size=256), PERF)
    for rid, seed in (("a", 0), ("b", 0), ("c", 4)):
        e.add_request(EngineRequest(request_id=rid, prompt_token_ids=[1] * 40, max_tokens=120, ignore_eos=True,
                                    seed=seed, output_token_ids=[5, 6, 7] if rid == "b" else []), 0.0)
    t = e.step(0.0).duration
    k = plain_steps(e, t)
    assert k > 10
    ref = copy.deepcopy(e)
    for _ in range(k):
        t += ref.step(t).duration
    advance(e, k)
    assert _state(e) == _state(ref)
