"""Scale-down stabilisation only for releases that leave a pool small (opt-in:
PolicyConfig.scale_down_stabilization_max_replicas). Same analytic profile and helpers as test_policy."""

import math

from capacity_profiles import queue_profile
from test_policy import make, obs


def _want(rate: float) -> int:
    """Prefill replicas the compute term asks for at ``rate`` requests/s of 1024 tokens (lone reading, 0.85)."""
    return math.ceil(rate * 1024 / (queue_profile().prefill_capacity(1024, 1000) * 0.85))


def test_a_release_to_a_larger_pool_is_not_held():
    pol = make(scale_down_stabilization_s=60, scale_down_stabilization_max_replicas=1, prefill_pool_queueing=False,
               hold_prefill_on_rise=False)
    assert _want(30.0) == 5 and _want(18.0) == 3 and _want(2.0) == 1
    up = pol.decide(obs(0, p=5, d=5, rate=30.0), 0)
    assert up.prefill == 5
    # the load falls to 3 replicas' worth: released at once, not a minute later
    d = pol.decide(obs(10, p=5, d=up.decode, rate=18.0), 10)
    assert d.prefill == 3 and "stabilised" not in d.reason
    # to 1 replica's worth: that release is held for the window (the highest recommendation in it, 3)
    d = pol.decide(obs(20, p=3, d=d.decode, rate=2.0), 20)
    assert d.prefill == 3 and "stabilised" in d.reason
    d = pol.decide(obs(75, p=3, d=d.decode, rate=2.0), 75)
    assert d.prefill == 1


def test_unset_every_release_waits():
    pol = make(scale_down_stabilization_s=60, prefill_pool_queueing=False, hold_prefill_on_rise=False)
    up = pol.decide(obs(0, p=5, d=5, rate=30.0), 0)
    d = pol.decide(obs(10, p=5, d=up.decode, rate=18.0), 10)
    assert d.prefill == 5 and "stabilised" in d.reason
