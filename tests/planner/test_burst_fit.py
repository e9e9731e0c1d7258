"""The burst reserve from a burst's fitted arrival rate (two budgets of the router's burst gauge),
on small hand-computed cases: the fit, the reserve's headroom, the policy, the simulator hook and
both live sources."""

import math
from dataclasses import replace

import pytest

from pdserve.common.burst import BurstMeter
from pdserve.planner.core.burst_fit import burst_arrival_rate, burst_shape
from pdserve.planner.core.observation import Observation, PoolState
from pdserve.planner.core.policy import PolicyConfig
from pdserve.planner.core.sim_hook import observation_from_window
from pdserve.planner.core.sizing import Capacity, Load, absorbed, size
from pdserve.planner.shell.source_prometheus import PromQL
from pdserve.planner.shell.source_scrape import ScrapeSource, parse_target
from pdserve.sim.autoscale import PoolSizes

from capacity_profiles import queue_policy as _policy
from test_sim_hook import window

# A 5 s burst at 100,000 prompt tokens/s reads 500,000 / (5 + b) at budget b.
N2, N4 = 500_000 / 7, 500_000 / 9


def test_the_fit_recovers_a_rectangular_bursts_rate():
    assert burst_arrival_rate(N2, 2.0, N4, 4.0) == pytest.approx(100_000)
    # budgets 0.5 and 2: 500k / 5.5 and 500k / 7
    assert burst_arrival_rate(500_000 / 5.5, 0.5, N2, 2.0) == pytest.approx(100_000)
    # a steady stream reads the same at both budgets: its rate
    assert burst_arrival_rate(4_000, 2.0, 4_000, 4.0) == 4_000
    assert burst_arrival_rate(4_000, 2.0, 4_100, 4.0) == 4_000
    # shorter than the 1 s resolution: (20k x 4 - 60k x 2) / 40k < 0 -> 1 s: 60k x (1 + 2) / 1
    assert burst_arrival_rate(60_000, 2.0, 20_000, 4.0) == pytest.approx(180_000)
    assert burst_arrival_rate(0.0, 2.0, 0.0, 4.0) == 0.0
    assert burst_arrival_rate(float("nan"), 2.0, 1.0, 4.0) == 0.0
    with pytest.raises(ValueError):
        burst_arrival_rate(1.0, 4.0, 1.0, 2.0)


def test_the_fit_reads_the_routers_own_meter():
    # The gauge's own arithmetic (pdserve.common.burst) on that burst: 100,000 tokens in each
    # of 5 one-second buckets, read 10 s later, gives back the rate at both budgets.
    m = BurstMeter()
    for k in range(5):
        for j in range(10):
            m.add(100.0 + k + j / 10, 10_000)
    n2, n4 = m.need(2.0, 110.0), m.need(4.0, 110.0)
    assert (n2, n4) == (pytest.approx(N2), pytest.approx(N4))
    assert burst_arrival_rate(n2, 2.0, n4, 4.0) == pytest.approx(100_000)
    assert m.need(0.0, 110.0) == pytest.approx(100_000)  # budget 0 alone: right here, noisy in a real burst


def test_the_reserve_keeps_headroom_when_the_peak_is_an_arrival_rate():
    # 100,000 tokens/s arriving, 30,000 per prefill replica flat out: 3.33 -> 4 at full speed;
    # planned at 80 %: 100,000 / 24,000 = 4.17 -> 5. Links of 100,000/s: 1.0 -> 1 at full rate,
    # 100,000 / 80,000 = 1.25 -> 2 at 80 %.
    cap = Capacity(prefill_slo=20_000, prefill_saturated=30_000, decode_slo=10_000, link=100_000.0)
    flat = size(Load(rate=2, isl=1000, osl=100, peak_prompt_tokens=100_000), cap, drain_s=60)
    assert (flat.prefill, flat.decode) == (4, 1)
    t = size(Load(rate=2, isl=1000, osl=100, peak_prompt_tokens=100_000, peak_utilization=0.8), cap, drain_s=60)
    assert t.prefill_peak == pytest.approx(100_000 / 24_000) and t.decode_peak == 2
    assert (t.prefill, t.decode) == (5, 2)


def _obs(t: float, p: int, **kw) -> Observation:
    base = dict(request_rate=2.0, mean_isl=1024.0, mean_osl=200.0, waiting=0.0, prefill_waiting=0.0,
                decode_waiting=0.0)
    return Observation(timestamp=t, prefill=PoolState(p), decode=PoolState(1), **(base | kw))


def test_policy_holds_the_fitted_rate_not_the_short_bursts_need():
    # The gauge reads a 5 s burst of 19,000 prompt tokens/s as 95,000 / 7 at budget 2 s and
    # 95,000 / 9 at 4 s. Read at budget 2 alone (a need) that is 13,571 / 9,500 per replica
    # flat out (the profile's top point) -> 2 prefill; fitted, it is the 19,000/s the next,
    # longer burst needs, planned at 80 %: 19,000 / 7,600 = 2.5 -> 3.
    burst = dict(router_prompt_tokens_peak=95_000 / 7, router_prompt_tokens_peak_wide=95_000 / 9)
    need = _policy(burst_budget_s=2.0, burst_fit_budget_s=None)
    fit = _policy(burst_budget_s=2.0, burst_fit_budget_s=4.0)
    for pol in (need, fit):
        pol.decide(_obs(-100, 1), -100)  # watching for longer than a rate window
    assert need.decide(_obs(0, 1, **burst), 0).prefill == 2
    d = fit.decide(_obs(0, 1, **burst), 0)
    assert d.prefill == 3 and d.explanation["demand"]["terms"]["prefill_peak"] == pytest.approx(19_000 / 7_600)
    # held for the peak window, then released
    window = fit.config.peak_window_s
    quiet = dict(router_prompt_tokens_peak=2_000.0, router_prompt_tokens_peak_wide=2_000.0)
    assert fit.decide(_obs(window - 300, 3, **quiet), window - 300).prefill == 3
    assert fit.decide(_obs(window + 100, 3, **quiet), window + 100).prefill == 1
    # One second of long prompts (Mooncake's shape: 30,000 tokens in one bucket reads 10,000 at
    # budget 2 and 6,000 at 4, a 1 s "burst") is taken to last the wide budget, 4 s: 10,000 x 6 / 4
    # = 15,000/s, 15,000 / 7,600 = 1.97 -> 2 prefill, not the 30,000/s (4) of a 1 s fit.
    spike = _policy(burst_budget_s=2.0, burst_fit_budget_s=4.0)
    spike.decide(_obs(-100, 1), -100)
    d = spike.decide(_obs(0, 1, router_prompt_tokens_peak=10_000.0, router_prompt_tokens_peak_wide=6_000.0), 0)
    assert d.explanation["demand"]["terms"]["prefill_peak"] == pytest.approx(15_000 / 7_600) and d.prefill == 2
    # without the wide series (a router or source that does not give it) the peak is the need again
    assert _policy(burst_budget_s=2.0, burst_fit_budget_s=4.0).decide(
        _obs(0, 1, router_prompt_tokens_peak=95_000 / 7), 0).explanation["demand"]["terms"]["prefill_peak"] \
        == pytest.approx(95_000 / 7 / 9_500)


def test_fit_budgets_are_checked():
    assert PolicyConfig(burst_budget_s=2.0, burst_fit_budget_s=4.0).invalid() is None
    assert "needs burst_budget_s" in PolicyConfig(burst_budget_s=None, burst_fit_budget_s=4.0).invalid()
    assert "above the burst budget 2 s" in PolicyConfig(burst_budget_s=2.0, burst_fit_budget_s=1.0).invalid()
    assert "one the router exports" in PolicyConfig(burst_budget_s=2.0, burst_fit_budget_s=3.0).invalid()
    held = _policy(burst_budget_s=None, burst_fit_budget_s=4.0).decide(_obs(0, 1), 0)
    assert held.held and held.hold_key == "invalid-config"


def test_the_simulator_and_both_live_sources_read_the_wide_series():
    w = replace(window(4.0), prompt_tokens_burst={0.0: 90_000.0, 2.0: 54_000.0, 4.0: 40_000.0})
    o = observation_from_window(10.0, w, PoolSizes(1, 1), 2.0, 4.0)
    assert (o.router_prompt_tokens_peak, o.router_prompt_tokens_peak_wide) == (54_000.0, 40_000.0)
    assert observation_from_window(10.0, w, PoolSizes(1, 1), 2.0).router_prompt_tokens_peak_wide != 40_000.0
    q = PromQL('namespace="ns"', burst_budget_s=2.0, burst_fit_budget_s=4.0).queries()
    assert 'budget="4"' in q["router_prompt_tokens_peak_wide"] and 'budget="2"' in q["router_prompt_tokens_peak"]
    assert "router_prompt_tokens_peak_wide" not in PromQL('namespace="ns"', burst_budget_s=2.0).queries()

    from prometheus_client import start_http_server

    from pdserve.router.shell.metrics import RouterMetrics

    clock = [100.0]
    m = RouterMetrics(clock=lambda: clock[0])
    server, _ = start_http_server(0, addr="127.0.0.1", registry=m.registry)
    try:
        src = ScrapeSource([parse_target(f"router=http://127.0.0.1:{server.server_port}")], burst_budget_s=2.0,
                           burst_fit_budget_s=4.0)
        src.observe(0.0, PoolState(1), PoolState(1))
        for i in range(30):  # 270k prompt tokens in 3 s
            clock[0] = 100.0 + i * 0.1
            m.observe_prefix(9000, 0)
        clock[0] = 110.0
        o = src.observe(15.0, PoolState(1), PoolState(1))
        assert o.router_prompt_tokens_peak == pytest.approx(270_000 / 5)
        assert o.router_prompt_tokens_peak_wide == pytest.approx(270_000 / 7)
        assert burst_arrival_rate(o.router_prompt_tokens_peak, 2.0, o.router_prompt_tokens_peak_wide, 4.0) \
            == pytest.approx(90_000)
    finally:
        server.shutdown()
        server.server_close()


def test_the_cli_takes_both_budgets_and_refuses_a_fit_without_its_burst_budget(capsys, planner_cli):
    from pdserve.planner.shell.cli import main

    # refused before any metric is read: a clear message, exit 2
    assert main(["run", "--actuator", "static", "--scrape", "http://127.0.0.1:9", "--burst-budget", "none",
                 "--burst-fit-budget", "4"]) == 2
    assert "burst fit budget needs burst_budget_s" in capsys.readouterr().err
    assert main(["run", "--actuator", "static", "--scrape", "http://127.0.0.1:9", "--burst-budget", "2",
                 "--burst-fit-budget", "3"]) == 2
    assert "must be one the router exports" in capsys.readouterr().err
    assert len(planner_cli(2, "--burst-budget", "2", "--burst-fit-budget", "4")) == 2


def test_the_fit_gives_the_bursts_duration_too():
    # the 5 s burst at 100,000/s; a steady stream has no end; nothing read, nothing fitted
    assert burst_shape(N2, 2.0, N4, 4.0) == (pytest.approx(100_000), pytest.approx(5.0))
    assert burst_shape(4_000, 2.0, 4_000, 4.0) == (4_000, math.inf)
    assert burst_shape(60_000, 2.0, 20_000, 4.0) == (pytest.approx(180_000), 1.0)  # at least the resolution
    assert burst_shape(0.0, 2.0, 0.0, 4.0) == (0.0, 0.0)


def test_absorbed_bursts_are_the_ones_the_steady_pool_drains_within_the_budget():
    # 10,000/s for 4 s against 9,500/s flat out: 500 x 4 = 2,000 tokens queue, 0.21 s of work: within 1 s
    assert absorbed(10_000, 4.0, 9_500, 1.0)
    # 100,000/s for 5 s against 30,000/s: 350,000 tokens, 11.7 s of work: not within 1 s
    assert not absorbed(100_000, 5.0, 30_000, 1.0)
    # the boundary: (12,000 - 10,000) x 5 = 10,000 = 10,000 x 1
    assert absorbed(12_000, 5.0, 10_000, 1.0) and not absorbed(12_000, 5.0, 10_000, 0.99)
    # a steady stream above the plan never drains; one below it is no burst
    assert not absorbed(12_000, math.inf, 10_000, 1.0)
    assert absorbed(9_000, math.inf, 10_000, 1.0)


def test_a_burst_the_steady_pool_drains_in_time_gets_no_reserve():
    # 10,000 tokens/s for 4 s reads 40,000 / 6 at budget 2 and 40,000 / 8 at 4 (fit: 10,000/s, 4 s).
    # The steady plan (2,048 tokens/s: 1 prefill) moves 9,500/s flat out: 2,000 tokens queue, drained
    # in 0.21 s, within half the 1 s TTFT SLO: no reserve, 1 prefill. Without the gate (the fraction
    # None, as before) the fitted rate is held at 80 %: 10,000 / 7,600 = 1.32 -> 2.
    short = dict(router_prompt_tokens_peak=40_000 / 6, router_prompt_tokens_peak_wide=40_000 / 8)
    gated = _policy(burst_budget_s=2.0, burst_fit_budget_s=4.0, burst_absorb_fraction=0.5)
    plain = _policy(burst_budget_s=2.0, burst_fit_budget_s=4.0, burst_absorb_fraction=None)
    for pol in (gated, plain):
        pol.decide(_obs(-100, 1), -100)
    assert plain.decide(_obs(0, 1, **short), 0).prefill == 2
    d = gated.decide(_obs(0, 1, **short), 0)
    assert d.prefill == 1 and d.explanation["demand"]["terms"]["prefill_peak"] == 0.0
    # The 5 s burst at 19,000/s queues 9,500 x 5 = 47,500 tokens (5 s of work): its reserve stands
    # (19,000 / 7,600 = 2.5 -> 3), and the short one, still in the window, does not lower it.
    d = gated.decide(_obs(10, 1, router_prompt_tokens_peak=95_000 / 7, router_prompt_tokens_peak_wide=95_000 / 9), 10)
    assert d.prefill == 3 and d.explanation["demand"]["terms"]["prefill_peak"] == pytest.approx(19_000 / 7_600)


def test_a_fitted_burst_the_rate_window_already_shows_is_a_level_and_gets_no_reserve():
    # The same fitted burst, 19,000 prompt tokens/s (95,000 / 7 at budget 2, 95,000 / 9 at 4), read twice:
    # on a service whose rate window shows 2,048 tokens/s (2 req/s x 1,024: 19,000 / 2,048 = 9.3 times the
    # level, a burst on top of it) and on one whose window shows 16,000 tokens/s (19,000 / 16,000 = 1.19:
    # the load moved there, as a surge of a few minutes does). With burst_level_ratio 1.5 only the first is
    # reserved for (19,000 / 7,600 = 2.5 -> 3 prefill for the peak window); the level is followed by the
    # compute term while it lasts and released with it: 100 s later, back at 2,048 tokens/s, 1 prefill.
    # Without the ratio (None, as before) and without burst_on_level (default since session 26) the level is held
    # as a burst: 3 prefill 100 s later. With burst_on_level alone the burst is read on today's level, 19,000 -
    # (16,000 - 2,048) = 5,048 tokens/s, which the steady plan absorbs: 1 prefill.
    fitted = dict(router_prompt_tokens_peak=95_000 / 7, router_prompt_tokens_peak_wide=95_000 / 9)
    calm = dict(router_prompt_tokens_rate=2_048.0, router_prompt_tokens_peak=2_000.0,
                router_prompt_tokens_peak_wide=2_000.0)
    level, plain, burst = (_policy(burst_budget_s=2.0, burst_fit_budget_s=4.0, burst_level_ratio=r, burst_on_level=o)
                           for r, o in ((1.5, True), (None, False), (1.5, True)))
    on_level = _policy(burst_budget_s=2.0, burst_fit_budget_s=4.0, burst_level_ratio=None)
    for pol in (level, plain, burst, on_level):
        pol.decide(_obs(-100, 1, router_prompt_tokens_rate=2_048.0), -100)
    d = level.decide(_obs(0, 1, router_prompt_tokens_rate=16_000.0, **fitted), 0)
    assert d.explanation["demand"]["terms"]["prefill_peak"] == 0.0
    # (while the level lasts the absorb gate spares it either way: the steady plan for 16,000/s drains it)
    plain.decide(_obs(0, 1, router_prompt_tokens_rate=16_000.0, **fitted), 0)
    on_level.decide(_obs(0, 1, router_prompt_tokens_rate=16_000.0, **fitted), 0)
    d = burst.decide(_obs(0, 1, router_prompt_tokens_rate=2_048.0, **fitted), 0)
    assert d.prefill == 3 and d.explanation["demand"]["terms"]["prefill_peak"] == pytest.approx(19_000 / 7_600)
    assert level.decide(_obs(100, 3, **calm), 100).prefill == 1
    assert plain.decide(_obs(100, 3, **calm), 100).prefill == 3
    assert on_level.decide(_obs(100, 3, **calm), 100).prefill == 1
    assert burst.decide(_obs(100, 3, **calm), 100).prefill == 3
    # an unknown rate window reads no level: the burst is reserved for, as before the ratio existed
    unknown = _policy(burst_budget_s=2.0, burst_fit_budget_s=4.0, burst_level_ratio=1.5)
    unknown.decide(_obs(-100, 1), -100)
    assert unknown.decide(_obs(0, 1, **fitted), 0).prefill == 3
