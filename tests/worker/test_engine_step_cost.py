"""The engine's inlined step cost must be bit-identical to the perf model's own."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdserve.worker.perf import PerfModel, available_profiles, load_profile
from pdserve.worker.step_cost import step_cost_fn, step_ends_fn

MODELS = [PerfModel(load_profile(name, tp)) for name in available_profiles() for tp in (1, 2, 4, 8)]


@settings(max_examples=300, deadline=None)
@given(
    model=st.sampled_from(MODELS),
    new_tokens=st.integers(0, 16384),
    ctx_per_token=st.integers(0, 131072),
    n_seqs=st.integers(1, 512),
)
def test_inlined_cost_equals_the_perf_model_bit_for_bit(
    model: PerfModel, new_tokens: int, ctx_per_token: int, n_seqs: int
) -> None:
    attn_pairs = float(new_tokens * ctx_per_token + new_tokens * (new_tokens + 1) // 2)
    kv_read = ctx_per_token * min(n_seqs, max(new_tokens, 1))
    expected = model.step_time_aggregate(new_tokens, attn_pairs, kv_read, n_seqs)
    assert step_cost_fn(model)(new_tokens, attn_pairs, kv_read, n_seqs) == expected


def test_decode_and_prefill_steps_cost_what_the_breakdown_says() -> None:
    model = PerfModel(load_profile("llama-3.1-8b-h100"))
    cost = step_cost_fn(model)
    # two decodes at contexts 100 and 300, as the engine sums them
    assert cost(2, 402.0, 400, 2) == model.step_time(decode_contexts=[100, 300])
    # one 512-token prefill chunk after 1024 cached tokens
    assert cost(512, 512 * 1024 + 512 * 513 / 2, 1024, 1) == model.step_time(prefill_chunks=[(512, 1024)])
    assert cost(0, 0.0, 0, 0) == 0.0


def test_a_subclass_keeps_its_own_cost() -> None:
    class Slow(PerfModel):
        def step_time_aggregate(self, new_tokens: int, attn_pairs: float, kv_read_tokens: int, n_seqs: int) -> float:
            return 2 * super().step_time_aggregate(new_tokens, attn_pairs, kv_read_tokens, n_seqs)

    slow = Slow(load_profile("llama-3.1-8b-h100"))
    base = PerfModel(load_profile("llama-3.1-8b-h100"))
    assert step_cost_fn(slow)(4, 40.0, 30, 4) == pytest.approx(2 * step_cost_fn(base)(4, 40.0, 30, 4))


@settings(max_examples=200, deadline=None)
@given(
    model=st.sampled_from(MODELS),
    seqs=st.integers(1, 512),
    ctx=st.integers(0, 2**24),
    n=st.integers(1, 200),
    now=st.floats(0, 1e5),
    gap=st.sampled_from([0.0, 0.0004, 0.003]),
    cut=st.floats(0, 2),
)
def test_runs_of_decode_steps_equal_step_by_step_costs(
    model: PerfModel, seqs: int, ctx: int, n: int, now: float, gap: float, cut: float
) -> None:
    cost = step_cost_fn(model)
    until = now + cut
    want, t, attn, kv = [], now, ctx + seqs, ctx
    for _ in range(n):
        t = t + cost(seqs, float(attn), kv, seqs) + gap
        want.append(t)
        if not t < until:
            break
        attn += seqs
        kv += seqs
    assert step_ends_fn(model)(now, n, seqs, ctx + seqs, ctx, until, gap) == want


@pytest.mark.parametrize("model", MODELS[::3])
def test_runs_of_decode_steps_with_float_products_past_2_53(model: PerfModel) -> None:
    """``ends`` multiplies bytes per token by the KV read as floats, the perf model as ints (then converted):
    the same float also where the product is past 2**53 and rounds (both round the exact product once). Few
    attention pairs against that much KV read: memory-bound steps, the branch that multiplies so."""
    cost = step_cost_fn(model)
    edge = 2**53 // model.kv_bytes_per_token
    for seqs, ctx in ((1, edge - 40), (3, edge - 40), (7, edge - 6), (2, edge + 3), (5, 3 * edge + 1)):
        want, t, attn, kv = [], 0.0, seqs, ctx
        for _ in range(20):
            t = t + cost(seqs, float(attn), kv, seqs)
            want.append(t)
            attn += seqs
            kv += seqs
        assert step_ends_fn(model)(0.0, 20, seqs, seqs, ctx, float("inf"), 0.0) == want


@settings(max_examples=150, deadline=None)
@given(
    model=st.sampled_from([m for m in MODELS if m.tp == 1]),
    seqs=st.integers(1, 64),
    ctx=st.integers(0, 2**22),
    n=st.integers(40, 300),
    now=st.floats(0, 1e5),
    cut=st.one_of(st.just(float("inf")), st.floats(0.05, 5)),
)
def test_long_runs_computed_in_numpy_equal_step_by_step_costs(
    model: PerfModel, seqs: int, ctx: int, n: int, now: float, cut: float
) -> None:
    """Runs of at least 40 memory-bound steps take the numpy path of ``ends``: bit for bit the same end times."""
    cost = step_cost_fn(model)
    until = now + cut
    want, t, attn, kv = [], now, seqs, ctx  # one attention pair per sequence: memory-bound at any context
    for _ in range(n):
        t = t + cost(seqs, float(attn), kv, seqs)
        want.append(t)
        if not t < until:
            break
        attn += seqs
        kv += seqs
    assert step_ends_fn(model)(now, n, seqs, seqs, ctx, until, 0.0) == want
