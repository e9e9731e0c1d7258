"""The usable KV-link share, measured on pdserve's own link model (pdserve.common.kvlink)."""

import math
import statistics

import pytest

from pdserve.planner.core.link_model import budget_transfers, queue_waits, transfer_times, usable_utilization


def test_one_sender_one_receiver_is_a_fifo_queue():
    # M/G/1 (Pollaczek-Khinchine): mean wait = rho E[S^2] / (2 (1 - rho)); log-normal sizes
    # with mean 1 and sigma 1 have E[S^2] = e^1. At rho 0.5 the hand-off takes
    # 1 + 0.5 e / 1 = 2.36 mean transfer times on average.
    times = transfer_times(1, 1, 0.5, n=40_000)
    assert statistics.fmean(times) == pytest.approx(1 + 0.5 * math.e / (2 * 0.5), rel=0.12)


def test_more_receivers_use_each_link_less():
    # Links held at both ends block each other: with 8 senders, 4 receivers sustain a
    # lower share of each link than 1 receiver does (head-of-line blocking), though
    # more in total.
    one, four = usable_utilization(8, 1, 32), usable_utilization(8, 4, 32)
    assert four < one - 0.1
    assert 4 * four > one


def test_one_sender_caps_the_total():
    # Every transfer holds the single sender's link: 3 receivers move no more than 1.
    assert 3 * usable_utilization(1, 3, 32) == pytest.approx(usable_utilization(1, 1, 32), rel=0.15)


def test_queue_wait_excludes_the_transfer_itself():
    # M/G/1 again, the wait alone: rho E[S^2] / (2 (1 - rho)) = 0.5 e / 1 = 1.36 mean
    # transfer times, one less than hand-off to landed.
    waits = queue_waits(1, 1, 0.5, n=40_000)
    assert statistics.fmean(waits) == pytest.approx(0.5 * math.e / (2 * 0.5), rel=0.12)


def test_long_transfers_do_not_make_an_idle_link_unusable():
    # With sizes of CV ~1 the 99th-percentile transfer alone lasts exp(-0.5 + 2.33) = 6.2
    # mean transfer times. A budget of 4 counted against hand-off-to-landed time was missed
    # at any load (usable share 0.02, the floor); the link's own tail is not a wait, and at
    # 10 % load the p99 queueing wait is ~3.3 transfer times, so a 1:1 pair is usable at
    # 10 % or more, and 8:2 too.
    assert usable_utilization(1, 1, 4) > 0.1
    assert usable_utilization(8, 2, 4) > 0.1
    assert usable_utilization(1, 1, 4) < usable_utilization(1, 1, 16)


def test_budget_in_transfer_times():
    assert budget_transfers(1.0, 0.032) == 16  # 31.25 -> 16: rounding down plans more links
    assert budget_transfers(1.0, 0.6) == 2
    assert budget_transfers(1.0, 0.0) == 1024
