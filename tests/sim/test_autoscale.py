"""The autoscaler hook: ticks, window metrics, start-up delay, draining, GPU-seconds."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from pdserve.sim.autoscale import Autoscaler, PoolSizes, WindowMetrics
from pdserve.sim.config import SimConfig
from pdserve.sim.simulator import run_simulation
from pdserve.sim.traces import synthetic_trace


@dataclass
class Scripted:
    """Returns a fixed plan of pool sizes by tick number; records what it saw."""

    plan: dict[int, PoolSizes]
    interval_s: float = 10.0
    seen: list[tuple[float, WindowMetrics, PoolSizes]] = field(default_factory=list)

    def on_tick(self, now: float, window: WindowMetrics, current: PoolSizes) -> PoolSizes:
        self.seen.append((now, window, current))
        return self.plan.get(len(self.seen), current)


def test_scripted_scale_up_then_down() -> None:
    trace = synthetic_trace(400, 5.0, (200, 800), (20, 60), seed=1)  # ~80 s of arrivals
    auto = Scripted({1: PoolSizes(2, 3), 4: PoolSizes(1, 1)})
    assert isinstance(auto, Autoscaler)
    cfg = SimConfig(prefill_instances=1, decode_instances=1, startup_delay_s=5.0)
    res = run_simulation(trace, cfg, autoscaler=auto)
    assert res.summary.finished == 400
    # Ticks every 10 s from the first arrival, windows of 10 s.
    times = [t for t, _, _ in auto.seen]
    assert times[:3] == [10.0, 20.0, 30.0]
    # What Prometheus shows at t=10: the scrape at 7.5 s (15 s period, half a period
    # behind), rates over the 60 s before it.
    first = auto.seen[0][1]
    assert first.end_s == 7.5 and first.start_s == 7.5 - 60.0
    routed = [r for r in trace.requests if r.arrival_s <= 7.5]
    assert first.arrivals == len(routed)
    assert first.prompt_tokens_rate == pytest.approx(sum(r.input_tokens for r in routed) / 60.0)
    done = [r for r in res.records if 0 <= r.finish_s <= 7.5]
    assert done and first.completions == len(done)
    assert first.request_rate == pytest.approx(len(done) / 60.0)
    assert first.mean_osl == pytest.approx(sum(r.output_tokens for r in done) / len(done))
    assert first.mean_isl is not None and 200 <= first.mean_isl <= 800
    assert first.ttft_p50 is not None and first.ttft_p90 is not None and first.ttft_p50 <= first.ttft_p90
    assert auto.seen[0][2] == PoolSizes(1, 1)
    # Tick 2 sees the new instances ready (5 s start-up < 10 s interval).
    w2, c2 = auto.seen[1][1], auto.seen[1][2]
    assert c2 == PoolSizes(2, 3)
    assert w2.prefill.ready == 2 and w2.decode.ready == 3 and w2.decode.starting == 0
    # New instances took no request before they were ready.
    by_id = {i["id"]: i for i in res.instances}
    assert set(by_id) == {"P0", "P1", "D0", "D1", "D2"}
    for r in res.records:
        for iid in (r.prefill_instance, r.decode_instance):
            if iid in ("P1", "D1", "D2"):
                assert r.arrival_s >= 15.0 or r.prefill_done_s >= 15.0
    # After tick 4 (t=40) the newest ones drain: nothing new is routed to them.
    for r in res.records:
        if r.arrival_s > 40.0:
            assert r.prefill_instance == "P0"
        if r.prefill_done_s > 40.0:
            assert r.decode_instance == "D0"
    for iid in ("P1", "D1", "D2"):
        assert 40.0 <= by_id[iid]["released_at_s"] < 50.0
        assert by_id[iid]["requested_at_s"] == 10.0
    # GPU-seconds: each instance from its request to its release (start-up included).
    end = res.end_time_s
    expected = 2 * end + sum(by_id[i]["released_at_s"] - 10.0 for i in ("P1", "D1", "D2"))
    assert res.gpu_seconds == pytest.approx(expected)
    assert [e.after for e in res.scaling_events[:1]] == [PoolSizes(2, 3)]
    assert "+P1 (ready at 15.0 s)" in res.scaling_events[0].note


def test_scale_to_zero_queues_at_the_router_until_an_instance_is_ready() -> None:
    trace = synthetic_trace(50, 2.0, 300, 10, seed=2)
    # Tick 1 (t=10): colocated pool to 0; tick 2 (t=20): back to 1, ready at t=50.
    auto = Scripted({1: PoolSizes(0, 0), 2: PoolSizes(0, 1)})
    res = run_simulation(trace, SimConfig(topology="colocated", instances=1, startup_delay_s=30.0), autoscaler=auto)
    assert res.summary.finished == 50
    waited = [r for r in res.records if 10.0 < r.arrival_s < 50.0]
    assert waited and all(r.first_token_s >= 50.0 for r in waited)
    w3 = auto.seen[2][1]  # t=30: nothing ready, requests waiting at the router
    assert w3.decode.ready == 0 and w3.decode.starting == 1 and w3.decode.waiting > 0
    assert w3.prefill.ready == 0  # colocated: the prefill pool is empty


def test_bad_autoscaler_is_reported() -> None:
    class Broken:
        interval_s = 5.0

        def on_tick(self, now: float, window: WindowMetrics, current: PoolSizes) -> object:
            return (1, 1)

    with pytest.raises(TypeError, match="must return PoolSizes"):
        run_simulation(synthetic_trace(20, 1.0, 100, 5), SimConfig(), autoscaler=Broken())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="PoolSizes.decode must be an int >= 0"):
        PoolSizes(1, -1)


def test_window_knows_no_output_length_before_completion() -> None:
    """Live-equal view: a request's output length reaches the planner only when it finishes."""
    from pdserve.sim.traces import from_rows

    # 20 long generations arriving in the first 10 s; none can finish before the first scrapes.
    trace = from_rows([(0.5 * i, 512, 8000, ()) for i in range(20)] + [(200.0, 64, 4, ())], format="synthetic", source="long outputs")
    auto = Scripted({}, interval_s=30.0)
    run_simulation(trace, SimConfig(prefill_instances=1, decode_instances=1), autoscaler=auto)
    first = auto.seen[0][1]  # t=30: the scrape at 22.5 s saw all 20 routed, none finished
    assert first.arrivals == 20 and first.prompt_tokens_rate == pytest.approx(20 * 512 / 60.0)
    assert first.completions == 0 and first.request_rate == 0.0
    assert first.mean_osl is None and first.mean_isl is None and first.ttft_p50 is None
    assert first.inflight == 20
    # Peak: the most prompt tokens between two consecutive scrapes since the last tick,
    # per second: 16 arrivals (t = 0, 0.5, .., 7.5) by the scrape at 7.5, the other 4 by 22.5.
    assert first.prompt_tokens_peak_rate == pytest.approx(16 * 512 / 15.0)
    # ...and learns it from the completions once they are scraped.
    later = [w for _, w, _ in auto.seen if w.completions]
    assert later and later[0].mean_osl == pytest.approx(8000.0)


def test_window_reads_the_routers_burst_gauge_at_its_scrapes() -> None:
    """A 1.5 s burst: the irate peak averages it over a 15 s scrape; the router's burst gauge
    (pdserve.common.burst), read at the scrapes since the last tick, has it at 1 s resolution."""
    from pdserve.sim.traces import from_rows

    # 15 requests x 6000 prompt tokens at t = 1.0, 1.1, .., 2.4: 60k tokens in second 1, 30k in second 2.
    trace = from_rows([(1.0 + 0.1 * i, 6000, 4, ()) for i in range(15)] + [(200.0, 64, 4, ())],
                      format="synthetic", source="one short burst")
    auto = Scripted({}, interval_s=30.0)
    run_simulation(trace, SimConfig(prefill_instances=2, decode_instances=1), autoscaler=auto)
    first = auto.seen[0][1]  # tick at 31 s: scrapes at 8.5 and 23.5 s (origin 1.0, phase 7.5)
    assert first.prompt_tokens_peak_rate == pytest.approx(15 * 6000 / 15.0)  # 6k/s
    assert first.prompt_tokens_burst[0.0] == pytest.approx(60_000)
    assert first.prompt_tokens_burst[2.0] == pytest.approx(90_000 / 4)  # both seconds + 2 s budget
    assert auto.seen[2][1].prompt_tokens_burst[0.0] == 0.0  # 60 s on, every scrape read has it out of its span


def test_gpu_seconds_count_from_the_scored_window() -> None:
    """An evaluation replaying history first pays only from its scored window on: an instance
    released before it costs nothing, one requested before it is paid from it, later ones whole."""
    trace = synthetic_trace(400, 5.0, (200, 800), (20, 60), seed=1)
    auto = Scripted({1: PoolSizes(2, 3), 4: PoolSizes(1, 1)})
    res = run_simulation(trace, SimConfig(prefill_instances=1, decode_instances=1, startup_delay_s=5.0,
                                          gpu_seconds_from_s=45.0), autoscaler=auto)
    by_id = {i["id"]: i for i in res.instances}
    end = res.end_time_s
    # P0 and D0 from 45 s to the end; P1, D1, D2 (requested at 10 s, released in [40, 50) s) from 45 s.
    expected = 2 * (end - 45.0) + sum(max(0.0, by_id[i]["released_at_s"] - 45.0) for i in ("P1", "D1", "D2"))
    assert res.gpu_seconds == pytest.approx(expected)
    assert res.gpu_seconds < 2 * end  # the history is not paid


def test_window_has_the_prefill_engines_own_ttft() -> None:
    """Disaggregated: the prefill pods' TTFT histogram observes a request from reaching the prefill engine to its one
    token (front end + prefill steps), not the client's TTFT, which adds the HTTP hops before it, the hand-off, the
    KV transfer and the decode side's front end and first step (what the planner's prefill profile does not model)."""
    from pdserve.sim.instance import pool_spec
    from pdserve.sim.traces import from_rows

    cfg = SimConfig(prefill_instances=1, decode_instances=1, ingress_s=0.05, pd_handoff_s=0.01)
    # 3 lone 1024-token prompts 2 s apart (no queue), completed before the scrape at 22.5 s (origin 1.0, phase 7.5)
    trace = from_rows([(1.0 + 2 * i, 1024, 2, ()) for i in range(3)] + [(200.0, 64, 4, ())],
                      format="synthetic", source="three lone prompts")
    auto = Scripted({}, interval_s=30.0)
    run_simulation(trace, cfg, autoscaler=auto)
    perf = pool_spec(cfg.model_copy(update={"block_size": 16}), "prefill").perf
    engine = perf.profile.efficiency.frontend_latency_s + perf.step_time([(1024, 0)])
    first = auto.seen[0][1]
    assert first.completions == 3
    assert first.prefill_ttft_mean == pytest.approx(engine, rel=1e-9)
    assert first.prefill_ttft_p90 == pytest.approx(engine, rel=1e-9)
    assert first.ttft_p50 is not None and first.ttft_p50 > engine + 0.05 + 0.01  # ingress and hand-off at least
    # 60 s later no prefill falls in the window: unknown, not 0
    assert auto.seen[2][1].prefill_ttft_mean is None


@pytest.mark.parametrize("policy", ["kv_aware", "prefix_approx"])
def test_an_instance_added_to_a_busy_pool_takes_its_share_of_the_requests(policy: str) -> None:
    """One prefill instance serves ~4 req/s of short prompts alone for 300 s (nothing queues), then
    the autoscaler adds a second. Over the next minute the router splits new requests about evenly.
    Before a joining worker started at its peers' recent load, the newcomer P1 took every request
    of that minute: the router's memory of recent assignments (120 s half-life) charged P0 for the
    ~1,000 decayed requests it had served and P1 for none."""
    trace = synthetic_trace(2000, 4.0, (100, 300), (5, 10), seed=3)  # ~500 s of arrivals
    auto = Scripted({30: PoolSizes(2, 1)})  # tick 30: t = 300 s
    cfg = SimConfig(prefill_instances=1, decode_instances=1, startup_delay_s=5.0, policy=policy)
    res = run_simulation(trace, cfg, autoscaler=auto)
    assert res.summary.finished == 2000
    t0 = trace.requests[0].arrival_s
    after = [r for r in res.records if 310.0 <= r.arrival_s - t0 < 370.0]
    share = sum(r.prefill_instance == "P1" for r in after) / len(after)
    assert len(after) > 150 and 0.3 <= share <= 0.7, share


def test_the_first_tick_sets_the_ticks_phase() -> None:
    # by default one interval after the first arrival; first_tick_s puts the grid elsewhere (an evaluation holds
    # the ticks' phase fixed across replays whose first arrival differs, or varies it)
    trace = synthetic_trace(100, 5.0, (200, 400), (10, 20), seed=2)
    t0 = trace.requests[0].arrival_s
    default, shifted = Scripted({}), Scripted({})
    run_simulation(trace, SimConfig(prefill_instances=1, decode_instances=1), autoscaler=default)
    run_simulation(trace, SimConfig(prefill_instances=1, decode_instances=1, first_tick_s=t0 + 3.5), autoscaler=shifted)
    assert [t for t, _, _ in default.seen][:2] == [t0 + 10.0, t0 + 20.0]
    assert [t for t, _, _ in shifted.seen][:3] == [t0 + 3.5, t0 + 13.5, t0 + 23.5]


def test_the_scrapes_keep_their_phase_to_the_first_tick() -> None:
    # by default a tick 10 s after the first arrival reads the scrape 7.5 s after it (half a 15 s period behind);
    # with the first tick moved, the scrape it reads moves with it
    trace = synthetic_trace(100, 5.0, (200, 400), (10, 20), seed=2)
    t0 = trace.requests[0].arrival_s
    default, shifted = Scripted({}), Scripted({})
    run_simulation(trace, SimConfig(prefill_instances=1, decode_instances=1), autoscaler=default)
    run_simulation(trace, SimConfig(prefill_instances=1, decode_instances=1, first_tick_s=t0 + 13.5), autoscaler=shifted)
    assert default.seen[0][1].end_s == pytest.approx(t0 + 7.5)
    assert shifted.seen[0][1].end_s == pytest.approx(t0 + 11.0)  # 13.5 - 10 + 7.5
