"""Simulator core: conservation, prefix sharing, leases, rejections, bad configurations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pdserve.sim.config import SimConfig, SimConfigError, parse_layout
from pdserve.sim.goodput import search_goodput
from pdserve.sim.simulator import Simulation, run_simulation
from pdserve.sim.traces import load_trace, synthetic_trace

KV_8B = 131072  # llama-3.1-8b: 2 x 32 layers x 8 KV heads x 128 x 2 bytes per token


def test_same_inputs_same_records() -> None:
    trace = synthetic_trace(300, 20.0, (200, 3000), (5, 200), seed=2)
    cfg = SimConfig(prefill_instances=2, decode_instances=2)
    a, b = run_simulation(trace, cfg), run_simulation(trace, cfg)
    assert a.records == b.records
    assert a.summary.as_dict() == b.summary.as_dict()


@pytest.mark.parametrize("layout", ["colocated:2", "chunked:2", "1p1d", "2p1d"])
def test_every_request_finishes_with_its_tokens(layout: str) -> None:
    trace = synthetic_trace(200, 10.0, (100, 2000), (1, 100), seed=4)
    res = run_simulation(trace, SimConfig(**parse_layout(layout)))
    s = res.summary
    assert s.finished == s.requests == 200
    generated = sum(int(i["generated_tokens"]) for i in res.instances if i["pool"] != "prefill")
    assert generated == sum(r.output_tokens for r in trace.requests)
    for r in res.records:
        assert r.arrival_s < r.first_token_s <= r.finish_s
        assert r.ttft > 0 and r.tpot >= 0
    if layout.endswith("d"):
        # Unique prompts: every prompt's KV crosses the link exactly once.
        assert s.kv_bytes_moved == sum(r.input_tokens for r in trace.requests) * KV_8B
        assert all(r.prefill_done_s <= r.first_token_s for r in res.records)
    else:
        assert s.kv_bytes_moved == 0
    assert res.gpus == 2 if layout != "2p1d" else res.gpus == 3


def test_simulation_built_directly_resolves_its_block_size(tmp_path: Path) -> None:
    # SimConfig().block_size is None ("16, or the trace's own block size"); only run_simulation
    # used to resolve it, so Simulation(trace, SimConfig()) crashed multiplying by None.
    trace = load_trace(_shared_prefix_trace(tmp_path, 6))
    cfg = SimConfig(prefill_instances=1, decode_instances=1)
    direct = Simulation(trace, cfg).run()
    assert direct.records == run_simulation(trace, cfg).records
    assert sum(r.cached_tokens for r in direct.records) == 5 * 4096  # 512-token blocks of the hash ids
    plain = synthetic_trace(20, 10.0, (100, 400), (2, 8), seed=1)
    assert Simulation(plain, SimConfig(topology="colocated", instances=1)).block_size == 16
    assert Simulation(plain, SimConfig(topology="colocated", instances=1)).run().summary.finished == 20


def _shared_prefix_trace(tmp_path: Path, n: int) -> Path:
    # Every request starts with the same 8 blocks (4096 tokens) then 2 of its own, 1 s
    # apart: each has finished (and cached its prefix everywhere) before the next comes.
    rows = [
        {"timestamp": i * 1000, "input_length": 5000, "output_length": 20,
         "hash_ids": list(range(8)) + [100 + 2 * i, 101 + 2 * i]}
        for i in range(n)
    ]
    p = tmp_path / "shared.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def test_shared_hash_ids_hit_the_prefix_cache(tmp_path: Path) -> None:
    trace = load_trace(_shared_prefix_trace(tmp_path, 40))
    res = run_simulation(trace, SimConfig(topology="colocated", instances=2, policy="kv_aware"))
    # After the first request per instance, 4096 of 5000 tokens hit.
    assert res.summary.prefix_hit_ratio is not None and res.summary.prefix_hit_ratio > 0.7
    assert sum(r.cached_tokens for r in res.records) >= 36 * 4096
    no_cache = run_simulation(trace, SimConfig(topology="colocated", instances=2, enable_prefix_caching=False))
    assert no_cache.summary.ttft["p50"] > 2 * res.summary.ttft["p50"]


def test_decode_side_cache_hits_shrink_the_transfer(tmp_path: Path) -> None:
    trace = load_trace(_shared_prefix_trace(tmp_path, 10))
    res = run_simulation(trace, SimConfig(prefill_instances=1, decode_instances=1))
    # Only the first request moves the shared 4096 tokens; later ones move the rest.
    assert res.records[0].kv_bytes == 5000 * KV_8B
    assert all(r.kv_bytes == (5000 - 4096) * KV_8B for r in res.records[1:])


def test_expired_lease_makes_decode_recompute() -> None:
    trace = synthetic_trace(6, 50.0, 4000, 4, seed=1)
    # 4000 tokens x 128 KiB over 1 Gbit/s: ~4.2 s per transfer, lease 1 s.
    res = run_simulation(trace, SimConfig(prefill_instances=1, decode_instances=1, kv_link_gbps=1.0, kv_lease_s=1.0))
    assert res.kv_recomputes >= 1
    assert res.summary.finished == 6


def test_a_prompt_longer_than_max_model_len_is_rejected_not_fatal() -> None:
    trace = synthetic_trace(20, 5.0, (100, 4000), 10, seed=3)
    res = run_simulation(trace, SimConfig(topology="chunked", instances=1, max_model_len=2048))
    too_long = [r for r in res.records if r.input_tokens >= 2048]
    assert too_long and all("max_model_len=2048" in r.error for r in too_long)
    assert res.rejected == len(too_long)
    assert res.summary.finished == 20 - len(too_long)


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"profile": "opt-66b-a100", "tp": 1}, r"opt-66b needs 13\d GB of weights but NVIDIA A100.*TP1.*raise the tensor-parallel"),
        ({"profile": "no-such-model"}, r"unknown performance profile 'no-such-model'"),
    ],
)
def test_impossible_configurations_name_the_problem(fields: dict[str, object], match: str) -> None:
    with pytest.raises(SimConfigError, match=match):
        run_simulation(synthetic_trace(3, 1.0, 100, 5), SimConfig(**fields))  # type: ignore[arg-type]


def test_an_unknown_policy_is_refused_with_the_config() -> None:
    with pytest.raises(ValueError, match=r"unknown routing policy 'fastest'; choose one of \['round_robin'"):
        SimConfig(policy="fastest")


def test_layout_strings() -> None:
    assert parse_layout("3p1d") == {"topology": "disagg", "prefill_instances": 3, "decode_instances": 1}
    assert parse_layout("chunked:4") == {"topology": "chunked", "instances": 4}
    assert SimConfig(**parse_layout("colocated:2")).label == "colocated:2"
    with pytest.raises(SimConfigError, match="bad configuration 'pd'"):
        parse_layout("pd")
    with pytest.raises(ValueError, match="needs >= 1 prefill"):
        SimConfig(topology="disagg", prefill_instances=0)


def test_goodput_search_brackets_and_bisects() -> None:
    # Attainment is 1 up to scale 3.3, then 0: the search lands just below 3.3.
    res = search_goodput(lambda s: 1.0 if s <= 3.3 else 0.0, base_rate_rps=2.0, target=0.9, rel_tol=0.01)
    assert 3.2 <= res.rate_scale <= 3.3
    assert res.goodput_rps == pytest.approx(2 * res.rate_scale)
    low = search_goodput(lambda s: 1.0 if s <= 0.1 else 0.0, base_rate_rps=1.0, target=0.9, rel_tol=0.05)
    assert 0.095 <= low.rate_scale <= 0.1
    none = search_goodput(lambda s: 0.0, base_rate_rps=1.0, target=0.9)
    assert none.goodput_rps == 0.0


def test_goodput_search_stops_at_the_zero_load_limit() -> None:
    calls: list[float] = []

    def flat(s: float) -> float:
        calls.append(s)
        return 0.5  # a fixed share of requests can never meet the SLO

    res = search_goodput(flat, base_rate_rps=1.0, target=0.9, max_probes=20)
    assert res.goodput_rps == 0.0
    assert calls == [1.0, 0.5, 0.25]


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    layout=st.sampled_from(["colocated:1", "chunked:2", "1p1d", "2p1d"]),
    n=st.integers(1, 40),
    rate=st.floats(0.5, 200.0),
    seed=st.integers(0, 10_000),
    policy=st.sampled_from(["round_robin", "least_loaded", "kv_aware", "prefix_approx"]),
)
def test_any_small_workload_finishes_consistently(layout: str, n: int, rate: float, seed: int, policy: str) -> None:
    trace = synthetic_trace(n, rate, (1, 3000), (1, 64), seed=seed)
    cfg = SimConfig(**parse_layout(layout), policy=policy, max_num_seqs=8)
    res = run_simulation(trace, cfg)
    assert res.summary.finished == n
    assert res.records == run_simulation(trace, cfg).records
    for r in res.records:
        assert r.arrival_s < r.first_token_s <= r.finish_s
        assert r.output_tokens > 1 or r.first_token_s == r.finish_s
    generated = sum(int(i["generated_tokens"]) for i in res.instances if i["pool"] != "prefill")
    assert generated >= sum(r.output_tokens for r in trace.requests)  # more only after a preemption
    assert res.gpu_seconds == pytest.approx(res.gpus * res.end_time_s)


def test_scraped_views_are_refreshed_periodically_and_runs_still_finish() -> None:
    trace = synthetic_trace(80, 20.0, (100, 1500), (5, 40), seed=6)
    cfg = SimConfig(topology="chunked", instances=3, policy="least_loaded", view_refresh_s=0.5)
    a, b = run_simulation(trace, cfg), run_simulation(trace, cfg)
    assert a.summary.finished == 80
    assert a.records == b.records
    # The clock stops with the last request, not with the scrape cadence.
    assert a.end_time_s == max(r.finish_s for r in a.records)


@pytest.mark.parametrize("layout", ["chunked:1", "1p1d"])
def test_host_terms_shift_an_isolated_request_exactly(layout: str) -> None:
    # Requests far apart never meet, so the host terms add to TTFT one for one and
    # leave the engine's own timing (time per output token) alone.
    trace = synthetic_trace(5, 0.05, 900, 20, seed=1)
    base = SimConfig(**parse_layout(layout))
    plain = run_simulation(trace, base)
    hosted = run_simulation(trace, base.model_copy(update={"ingress_s": 0.004, "pd_handoff_s": 0.003}))
    extra = 0.004 + (0.003 if layout == "1p1d" else 0.0)
    for a, b in zip(plain.records, hosted.records):
        assert b.ttft == pytest.approx(a.ttft + extra, abs=1e-9)
        assert b.tpot == pytest.approx(a.tpot, abs=1e-9)
        assert b.decode_instance == a.decode_instance


def test_step_host_time_lengthens_every_step() -> None:
    # One request alone on a chunked engine: 1800 prompt tokens in 512-token chunks
    # are 4 steps to the first token, then one step per further token.
    trace = synthetic_trace(1, 1.0, 1800, 11, seed=1)
    base = SimConfig(topology="chunked", instances=1, token_budget=512)
    plain = run_simulation(trace, base).records[0]
    slow = run_simulation(trace, base.model_copy(update={"step_host_s": 0.001})).records[0]
    assert slow.ttft == pytest.approx(plain.ttft + 4 * 0.001, abs=1e-9)
    assert slow.tpot == pytest.approx(plain.tpot + 0.001, abs=1e-9)


def test_negative_host_terms_are_refused_by_name() -> None:
    for field in ("ingress_s", "pd_handoff_s", "step_host_s"):
        with pytest.raises(ValueError, match=field):
            SimConfig(**{field: -0.001})


def test_by_default_the_router_sees_what_the_live_router_sees(tmp_path: Path) -> None:
    cfg = SimConfig()
    assert cfg.view_refresh_s == 0.5 and cfg.kv_event_lag_s > 0 and not cfg.exact_views
    # Request 1 at t=0 caches a prefix; request 2 (same prefix) comes at t=15, after
    # kv_aware's 10 s speculative entry expired. With events still in flight (30 s lag)
    # the router cannot know where the prefix is; with exact views it can.
    rows = [{"timestamp": t * 1000, "input_length": 5000, "output_length": 4, "hash_ids": list(range(8)) + [50 + t, 80 + t]}
            for t in (0, 15)]
    p = tmp_path / "two.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    trace = load_trace(p)
    base = SimConfig(topology="colocated", instances=4, policy="kv_aware")
    lagged = run_simulation(trace, base.model_copy(update={"kv_event_lag_s": 30.0}))
    exact = run_simulation(trace, base.model_copy(update={"kv_event_lag_s": 30.0, "exact_views": True}))
    assert exact.records[1].decode_instance == exact.records[0].decode_instance
    assert exact.records[1].cached_tokens == 4096
    assert lagged.records[1].decode_instance != lagged.records[0].decode_instance
    assert lagged.records[1].cached_tokens == 0
