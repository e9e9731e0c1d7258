"""A release the load clears by a margin skips the scale-down stabilisation (PolicyConfig.scale_down_clear_fraction,
opt-in; scale_down_clear_quantile, the learnt margin, 0.9 by default since session 36). Same analytic profile and
helpers as test_policy."""

import math

from capacity_profiles import queue_profile
from test_policy import make, obs


def _term(rate: float) -> float:
    """The prefill compute term (fractional replicas) at ``rate`` requests/s of 1024 tokens (lone reading, 0.85)."""
    return rate * 1024 / (queue_profile().prefill_capacity(1024, 1000) * 0.85)


def _policy(**kw):
    return make(scale_down_stabilization_s=60, prefill_pool_queueing=False, hold_prefill_on_rise=False, **kw)


def test_a_release_the_load_clears_is_not_held():
    # 16 req/s: 2.39 replicas' worth, under 3 x 0.9 = 2.7: three replicas carry it with the margin to spare
    assert math.ceil(_term(30.0)) == 5 and 2.3 < _term(16.0) < 2.4
    pol = _policy(scale_down_clear_fraction=0.9, scale_down_clear_quantile=None)
    up = pol.decide(obs(0, p=5, d=5, rate=30.0), 0)
    assert up.prefill == 5
    d = pol.decide(obs(10, p=5, d=up.decode, rate=16.0), 10)
    assert d.prefill == 3 and "stabilised" not in d.reason


def test_a_release_within_the_margin_waits_the_window():
    # 19 req/s: 2.83 replicas' worth, over 2.7: the release to 3 is stabilised (the window's highest, 5)
    assert 2.8 < _term(19.0) < 2.9
    pol = _policy(scale_down_clear_fraction=0.9, scale_down_clear_quantile=None)
    up = pol.decide(obs(0, p=5, d=5, rate=30.0), 0)
    d = pol.decide(obs(10, p=5, d=up.decode, rate=19.0), 10)
    assert d.prefill == 5 and "stabilised" in d.reason
    d = pol.decide(obs(75, p=5, d=d.decode, rate=19.0), 75)
    assert d.prefill == 3


def test_unset_the_cleared_release_waits_too():
    pol = _policy(scale_down_clear_quantile=None)
    up = pol.decide(obs(0, p=5, d=5, rate=30.0), 0)
    d = pol.decide(obs(10, p=5, d=up.decode, rate=16.0), 10)
    assert d.prefill == 5 and "stabilised" in d.reason


def test_a_fraction_outside_zero_to_one_is_refused():
    from pdserve.planner.core.policy_config import PolicyConfig
    assert "not in (0, 1]" in PolicyConfig(scale_down_clear_fraction=0).invalid()
    assert "not in (0, 1]" in PolicyConfig(scale_down_clear_fraction=1.2).invalid()
    assert PolicyConfig(scale_down_clear_fraction=0.9).invalid() is None


def _fall_after_steady(ticks: int, **kw):
    """A steady 30 req/s (five prefill replicas' worth) for ``ticks`` ticks 10 s apart, then 16 req/s: the decision
    at the fall."""
    pol = _policy(**kw)
    for i in range(ticks):
        d = pol.decide(obs(10 * i, p=5, d=5, rate=30.0), 10 * i)
        assert d.prefill == 5
    return pol.decide(obs(10 * ticks, p=5, d=d.decode, rate=16.0), 10 * ticks)


def test_the_learnt_margin_reads_the_policys_rate_history():
    # ticks every 10 s, a 60 s start-up: a rise is read over the 7 ticks ahead. A steady 30 req/s for 20 ticks (no
    # rise: the learnt fraction is 1), then 16 req/s: 2.39 replicas' worth, within 3 x 1: the release is not held
    cfg = _policy(scale_down_clear_quantile=0.9).config
    assert (cfg.interval_s, cfg.startup_s) == (10, 60)
    d = _fall_after_steady(20, scale_down_clear_quantile=0.9)
    assert d.prefill == 3 and "stabilised" not in d.reason


def test_the_default_learns_the_margin():
    # the same steady 20 ticks with the policy's defaults: the learnt margin (0.9 quantile) releases at once; with
    # it off (None, the default before session 36) the release waits the window
    from pdserve.planner.core.policy_config import PolicyConfig
    assert PolicyConfig().scale_down_clear_quantile == 0.9 and PolicyConfig().scale_down_clear_fraction is None
    d = _fall_after_steady(20)
    assert d.prefill == 3 and "stabilised" not in d.reason
    d = _fall_after_steady(20, scale_down_clear_quantile=None)
    assert d.prefill == 5 and "stabilised" in d.reason


def test_a_learnt_margin_needs_history():
    # the same after 10 ticks: 4 rises seen, too few to learn from: stabilised
    d = _fall_after_steady(10, scale_down_clear_quantile=0.9)
    assert d.prefill == 5 and "stabilised" in d.reason


def test_a_drained_queue_is_not_held():
    """A decode queue asks for more decode replicas (the drain term: 400 requests of 200 tokens worked off within the
    drain time, 3.19 replicas beside the arrivals' 0.64); once it is worked off, with the drain left out of what the
    stabilisation remembers, they go at the next tick, not a window later."""
    def run(**kw):
        pol = _policy(decode_queue_compute=True, **kw)
        up = pol.decide(obs(0, p=2, d=1, rate=10.0, waiting=400, decode_waiting=400), 0)
        down = pol.decide(obs(10, p=up.prefill, d=up.decode, rate=10.0), 10)
        return up, down
    up, down = run()
    assert up.explanation["demand"]["terms"]["binding_decode"] == "drain" and up.decode == 4
    assert down.decode == 4 and "stabilised" in down.reason
    up, down = run(stabilize_drain=False)
    assert up.decode == 4 and down.decode == 1


def _terms(compute: float, peak: float) -> dict:
    return {"demand": {"terms": {"prefill_compute": compute, "prefill_peak": peak, "decode_compute": 0.5}}}


def test_a_reserve_in_the_window_keeps_the_cleared_release_waiting():
    """A burst reserve asks for 4 prefill at one tick and is off the next (the absorb gate), the compute term then
    1.2, under 2 x 0.9: by default the release to 2 skips the window; with scale_down_clear_after_burst off it waits
    the window out, as the reserve may be back at the next tick."""
    def run(**kw):
        pol = _policy(scale_down_clear_fraction=0.9, scale_down_clear_quantile=None, **kw)
        pol._clamp((2, 1), (4, 1), obs(0, p=2, d=1), 0, _terms(1.2, 3.5))
        return pol._clamp((4, 1), (2, 1), obs(10, p=4, d=1), 10, _terms(1.2, 0.0))
    assert run().prefill == 2
    held = run(scale_down_clear_after_burst=False)
    assert held.prefill == 4 and "stabilised" in held.reason


def _after_window(pol, pool: int, high: float, low: float):
    """Both pools at ``pool`` replicas: decisions at ``high`` req/s (t=0), at ``low`` inside the 60 s window (t=10)
    and at ``low`` once the window has passed (t=75)."""
    up = pol.decide(obs(0, p=pool, d=pool, rate=high), 0)
    inside = pol.decide(obs(10, p=pool, d=up.decode, rate=low), 10)
    return up, inside, pol.decide(obs(75, p=pool, d=inside.decode, rate=low), 75)


def test_a_release_goes_only_as_far_as_the_load_clears_the_margin():
    """19 req/s is 2.83 replicas' worth: with the fixed margin 0.9 three replicas do not clear it (2.7), four do
    (3.6). Once the window has passed the release to 3 goes through as before; with release_only_cleared it goes to
    4, and to 3 once the load falls to 16 req/s (2.39 <= 2.7)."""
    def run(**kw):
        pol = _policy(scale_down_clear_fraction=0.9, scale_down_clear_quantile=None, **kw)
        _, inside, after = _after_window(pol, 5, 30.0, 19.0)
        assert inside.prefill == 5
        return pol, after
    assert run()[1].prefill == 3
    pol, d = run(release_only_cleared=True, release_only_cleared_max_replicas=None)
    assert d.prefill == 4 and "clears 0.90" in d.reason
    assert pol.decide(obs(85, p=4, d=d.decode, rate=16.0), 85).prefill == 3


def test_the_margin_holds_only_the_releases_to_a_small_pool():
    """release_only_cleared_max_replicas 3: the release to 3 (the case above) is held at 4, as the margin alone
    would; with 2 a release to 3 leaves the pool larger than that and goes through once the window has passed."""
    def run(few):
        pol = _policy(scale_down_clear_fraction=0.9, scale_down_clear_quantile=None, release_only_cleared=True,
                      release_only_cleared_max_replicas=few)
        return _after_window(pol, 5, 30.0, 19.0)[2]
    held = run(3)
    assert held.prefill == 4 and "clears 0.90" in held.reason
    assert run(2).prefill == 3


def test_without_a_margin_the_window_alone_decides():
    # no margin known (fixed fraction unset, too few rises to learn one): release_only_cleared changes nothing
    pol = _policy(scale_down_clear_quantile=0.9, release_only_cleared=True, release_only_cleared_max_replicas=None)
    assert _after_window(pol, 5, 30.0, 19.0)[2].prefill == 3


def test_the_cleared_floor_is_the_fewest_replicas_the_term_fits_in():
    from pdserve.planner.core.release import cleared_floor
    terms = {"prefill_compute": 2.83, "prefill_drain": 1.0, "decode_compute": 0.5}
    assert cleared_floor(terms, "prefill", 0.9) == 4  # 2.83 / 0.9 = 3.14
    assert cleared_floor(terms, "prefill", 0.9434) == 3  # 3 x 0.9434 = 2.8302
    assert cleared_floor(terms, "decode", 0.9) == 1
    assert cleared_floor({}, "prefill", 0.9) is None


def test_a_negative_max_replicas_is_refused_by_name():
    from pdserve.planner.core.policy_config import PolicyConfig
    assert PolicyConfig(scale_down_stabilization_max_replicas=-1).invalid() == \
        "scale-down stabilisation max replicas -1 < 0"
    assert PolicyConfig(release_only_cleared_max_replicas=-2).invalid() == "release-only-cleared max replicas -2 < 0"
    assert PolicyConfig(scale_down_stabilization_max_replicas=0, release_only_cleared_max_replicas=0).invalid() is None


def test_by_default_a_release_to_one_replica_waits_for_the_margin():
    """The shipped planner (release_only_cleared with max replicas 1, session 44): 6.3 req/s is 0.94 replicas' worth,
    over 1 x 0.9, so once the window has passed the release 2 -> 1 is held at 2 (the held-out 70B Azure 2x from
    1,200 s miss was this release at a compute term of 0.94); 5.5 req/s (0.82) clears it. Opted out, 2 -> 1 goes."""
    assert 0.93 < _term(6.3) < 0.95 and _term(5.5) < 0.9 < math.ceil(_term(12.0)) == 2

    def run(**kw):
        pol = _policy(scale_down_clear_fraction=0.9, scale_down_clear_quantile=None, **kw)
        up, inside, after = _after_window(pol, 2, 12.0, 6.3)
        assert up.prefill == 2 and inside.prefill == 2
        return pol, after
    pol, held = run()
    assert held.prefill == 2 and "clears 0.90" in held.reason
    assert pol.decide(obs(85, p=2, d=held.decode, rate=5.5), 85).prefill == 1
    assert run(release_only_cleared=False)[1].prefill == 1
