"""The roofline step-time model and the packaged profiles."""

from __future__ import annotations

import pytest

from pdserve.worker.perf import PerfModel, available_profiles, load_profile

REQUIRED = {"llama-3.1-8b-h100", "llama-3.1-70b-tp4-h100", "opt-13b-a100", "opt-66b-a100"}


def test_required_profiles_are_packaged_and_cite_sources() -> None:
    assert REQUIRED <= set(available_profiles())
    for name in REQUIRED:
        p = load_profile(name)
        assert p.name == name
        assert "config.json" in p.model.source and "datasheet" in p.gpu.source


def test_unknown_profile_names_the_choices() -> None:
    with pytest.raises(ValueError, match="unknown performance profile 'nope'.*llama-3.1-8b-h100"):
        load_profile("nope")


def test_kv_bytes_per_token_from_config() -> None:
    m = PerfModel(load_profile("llama-3.1-8b-h100"))
    assert m.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2  # K and V, layers, kv heads, head dim, bf16
    # ~27k blocks of 16 tokens = ~430k tokens on one H100 at 0.9 utilisation (vLLM logs ~4.3e5 for this pair)
    assert 400_000 < m.num_kv_blocks(16, 0.9) * 16 < 480_000
    assert m.num_kv_blocks(16, 0.5) < m.num_kv_blocks(16, 0.9)
    with pytest.raises(ValueError, match="does not fit"):
        PerfModel(load_profile("opt-66b-a100", tp=1)).num_kv_blocks()


def test_decode_is_memory_bound_and_prefill_compute_bound() -> None:
    m = PerfModel(load_profile("llama-3.1-8b-h100"))
    dec = m.breakdown(decode_contexts=[1000] * 32)
    assert dec.memory_s > dec.compute_s
    pre = m.breakdown(prefill_chunks=[(2048, 0)])
    assert pre.compute_s > pre.memory_s
    # Crossover (compute == memory) lies at a few hundred tokens.
    small = m.breakdown(prefill_chunks=[(64, 0)])
    assert small.memory_s > small.compute_s


def test_mixed_prefill_slows_decode_step_several_fold() -> None:
    m = PerfModel(load_profile("llama-3.1-8b-h100"))
    dec = m.step_time(decode_contexts=[1000] * 32)
    mixed = m.step_time(prefill_chunks=[(1024, 0)], decode_contexts=[1000] * 32)
    assert mixed / dec > 3


def test_monotonic_in_tokens_and_context() -> None:
    m = PerfModel(load_profile("llama-3.1-8b-h100"))
    assert m.step_time([(512, 0)]) < m.step_time([(1024, 0)])
    assert m.step_time([(512, 0)]) < m.step_time([(512, 8000)])
    assert m.step_time(decode_contexts=[100] * 8) < m.step_time(decode_contexts=[10_000] * 8)
    assert m.step_time() == 0.0
    agg = m.step_time_aggregate(new_tokens=8, attn_pairs=8 * 100 + 8, kv_read_tokens=800, n_seqs=8)
    assert agg == pytest.approx(m.step_time(decode_contexts=[100] * 8))


def test_tensor_parallel_speeds_up_and_adds_comm() -> None:
    p1 = PerfModel(load_profile("llama-3.1-70b-tp4-h100", tp=2))
    p4 = PerfModel(load_profile("llama-3.1-70b-tp4-h100"))
    assert p4.step_time([(2048, 0)]) < p1.step_time([(2048, 0)])
    assert p4.breakdown([(2048, 0)]).comm_s > 0
    with pytest.raises(ValueError, match="tensor-parallel"):
        load_profile("llama-3.1-8b-h100", tp=0)
