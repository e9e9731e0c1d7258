"""A restarted planner replays its history (``core.warm_start``) and then decides as the planner that ran through it;
started cold, it forgets a burst reserve and the stabilisation window and releases at once. The burst and planner
are test_burst_miss_budget's (a 4 s burst at 11,000 prompt tokens/s over 2,048/s of background: a reserve of two
prefill replicas held for the 900 s peak window)."""

import dataclasses
import math

from pdserve.planner.core.observation import Observation, PoolState
from pdserve.planner.core.policy import PlannerPolicy
from pdserve.planner.core.warm_start import history_span_s, history_ticks, warm_start

from capacity_profiles import queue_policy
from test_burst_miss_budget import BURST, _obs


def _sized(o: Observation, p: int, d: int) -> Observation:
    return dataclasses.replace(o, prefill=PoolState(p), decode=PoolState(d))


def _day(ticks: range, bursts: tuple[int, ...]) -> list[Observation]:
    return [_obs(t, **(BURST if t in bursts else {})) for t in ticks]


def _run(pol: PlannerPolicy, observations: list[Observation], size: tuple[int, int]) -> list[tuple]:
    """Each observation decided with the pools at the previous decision's sizes; (time, prefill, decode, reason)."""
    out = []
    for o in observations:
        d = pol.decide(_sized(o, *size), o.timestamp)
        size = (d.prefill, d.decode)
        out.append((o.timestamp, d.prefill, d.decode, d.reason))
    return out


def _planner(**kw) -> PlannerPolicy:
    return queue_policy(burst_budget_s=2.0, burst_fit_budget_s=4.0, burst_absorb_fraction=0.5,
                        scale_down_stabilization_s=60, **kw)


def test_a_warm_start_decides_as_the_planner_that_ran():
    # background for 15 min, bursts at 0 s and 200 s, then 10 more min of background; restart at 300 s
    obs = _day(range(-890, 900, 10), (0, 200))
    ran = _planner()
    before = _run(ran, [o for o in obs if o.timestamp < 300], (1, 1))
    after = _run(ran, [o for o in obs if o.timestamp >= 300], before[-1][1:3])
    assert max(p for _, p, _, _ in before) == 2 and after[0][1] == 2  # the reserve, held after the restart point

    # the restarted planner, given what the store saw: the same observations at the sizes the pools had then
    store = [_sized(o, *before[i - 1][1:3]) if i else _sized(o, 1, 1)
             for i, o in enumerate(o for o in obs if o.timestamp < 300)]
    warm = _planner()
    ws = warm_start(warm, store)
    assert ws.intervals == len(store) and ws.since == -890 and ws.until == 290 and ws.empty == 0
    assert _run(warm, [o for o in obs if o.timestamp >= 300], before[-1][1:3]) == after


def test_a_cold_restart_drops_the_reserve_at_once():
    obs = _day(range(-890, 100, 10), (0,))
    ran = _planner()
    trail = _run(ran, obs, (1, 1))
    assert trail[-1][1] == 2  # the running planner keeps the burst's reserve
    cold = _planner()
    d = cold.decide(_obs(100), 100)  # started at 100 s with nothing replayed: the pool at 2
    d = cold.decide(_sized(_obs(100), 2, 1), 100)
    assert d.prefill == 1, d.reason  # released at once: no burst remembered, no window to hold it
    warm = _planner()
    warm_start(warm, [_sized(o, 1 if o.timestamp < 0 else 2, 1) for o in obs])
    assert warm.decide(_sized(_obs(100), 2, 1), 100).prefill == 2


def test_an_empty_store_is_not_idleness():
    # Nothing stored (the service is new, or Prometheus is): replayed as ticks, 2 h without requests would let a
    # scale-to-zero planner zero the pools at its first idle tick; skipped, it waits idle_before_zero_s as cold does.
    empty = [Observation(timestamp=t, prefill=PoolState(1), decode=PoolState(1)) for t in range(-7200, 0, 30)]
    idle = dict(request_rate=0.0, mean_isl=math.nan, mean_osl=math.nan, waiting=0.0, prefill_waiting=0.0,
                decode_waiting=0.0, router_prompt_tokens_rate=0.0, router_request_rate=0.0, router_inflight=0.0)
    for replay in (False, True):
        pol = queue_policy(scale_to_zero=True, idle_before_zero_s=300)
        if replay:
            ws = warm_start(pol, empty)
            assert (ws.intervals, ws.empty) == (0, len(empty)) and ws.describe().startswith("cold start")
        d = pol.decide(Observation(timestamp=0, prefill=PoolState(1), decode=PoolState(1), **idle), 0)
        assert (d.prefill, d.decode) == (1, 1), (replay, d.reason)


def test_the_replay_spans_the_policys_memory():
    pol = queue_policy()
    ticks = history_ticks(pol.config, 1000.0)
    assert history_span_s(pol.config) == pol.config.history_len * 10
    assert len(ticks) == pol.config.history_len and ticks[-1] == 990.0 and ticks[0] == 1000.0 - 10 * len(ticks)


class _Store:
    """A metric source with a past: the burst's history for ``history``, background for ``observe``."""

    def __init__(self, past: list[Observation]) -> None:
        self.past = past
        self.asked: list[list[float]] = []

    def history(self, ticks, prefill, decode):
        self.asked.append(list(ticks))
        return [o for o in self.past if ticks[0] <= o.timestamp <= ticks[-1]]

    def observe(self, now, prefill, decode):
        return _sized(_obs(now), prefill.replicas, decode.replicas)


async def test_the_loop_warms_a_fresh_policy_before_its_first_tick():
    from pdserve.common.clock import VirtualClock
    from pdserve.planner.core.actuator_static import RecordingActuator
    from pdserve.planner.shell.loop import run_loop

    past = [_sized(o, 1 if o.timestamp < 0 else 2, 1) for o in _day(range(-890, 100, 10), (0,))]
    for warm in (False, True):
        store, act = _Store(past), RecordingActuator(2, 1)
        await run_loop(_planner(), store, act, clock=VirtualClock(100.0), max_ticks=1, warm=warm)
        # warm: the store asked for the policy's memory span up to a tick before now, and the reserve stays
        assert act.decisions[0].prefill == (2 if warm else 1), act.decisions[0].reason
        assert store.asked == ([[100.0 - 10 * k for k in range(queue_policy().config.history_len, 0, -1)]] if warm else [])


def test_the_replay_covers_a_burst_window_longer_than_the_rate_history():
    # A peak window of 3 h with 2 h of rate history: a replay of 2 h would start the planner with the bursts of the
    # first hour forgotten, which a running planner still holds as its reserve.
    cfg = dataclasses.replace(queue_policy().config, history_len=240, interval_s=30.0, peak_window_s=10_800.0)
    assert history_span_s(cfg) == 10_800.0
    assert len(history_ticks(cfg, 20_000.0)) == 360
