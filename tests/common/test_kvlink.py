"""The one KV link model (pdserve.common.kvlink), pure: FIFO on both ends, serial and layer-wise."""

from __future__ import annotations

import pytest

from pdserve.common.kvlink import Link, schedule_transfer, serve_pull

MB = 1_000_000


def test_rate_is_the_slower_end_and_bandwidth_must_be_positive() -> None:
    src, dst = Link(100.0), Link(8.0)  # 12.5 GB/s and 1 GB/s
    tr = schedule_transfer(src, dst, 10 * MB, prefill_start_s=0, prefill_end_s=1.0, num_layers=32, mode="serial")
    assert (tr.start_s, tr.end_s) == (1.0, pytest.approx(1.01))
    assert src.bytes_moved == dst.bytes_moved == 10 * MB and src.free_at == dst.free_at == tr.end_s
    with pytest.raises(ValueError, match="bandwidth"):
        Link(0.0)


def test_transfers_queue_at_the_sender_and_at_the_receiver() -> None:
    p1, p2, d1, d2 = Link(8.0), Link(8.0), Link(8.0), Link(8.0)  # 1 GB/s: 100 MB take 0.1 s

    def go(src: Link, dst: Link, at: float) -> float:
        return schedule_transfer(src, dst, 100 * MB, prefill_start_s=at, prefill_end_s=at, num_layers=1,
                                 mode="serial").end_s

    assert go(p1, d1, 0.0) == pytest.approx(0.1)
    assert go(p1, d2, 0.0) == pytest.approx(0.2)  # the sender is busy until 0.1
    assert go(p2, d2, 0.05) == pytest.approx(0.3)  # the receiver is busy until 0.2
    assert go(p2, d1, 0.5) == pytest.approx(0.6)  # both idle again


def test_layerwise_hides_the_transfer_behind_the_prefill() -> None:
    src, dst = Link(8.0), Link(8.0)
    tr = schedule_transfer(src, dst, 100 * MB, prefill_start_s=0.0, prefill_end_s=0.2, num_layers=10,
                           mode="layerwise")
    assert tr.end_s == pytest.approx(0.21)  # only the last layer (0.1 s / 10) is exposed


def test_a_pull_served_across_processes_books_as_the_joint_schedule() -> None:
    """The live hand-off splits schedule_transfer between two processes; the halves must add up to it."""
    joint_src, joint_dst = Link(8.0), Link(4.0)
    expected = [schedule_transfer(joint_src, joint_dst, n, prefill_start_s=t, prefill_end_s=t, num_layers=1,
                                  mode="serial") for t, n in ((0.0, 50 * MB), (0.01, 20 * MB))]
    src, dst = Link(8.0), Link(4.0)
    for (t, n), want in zip(((0.0, 50 * MB), (0.01, 20 * MB)), expected, strict=True):
        got = serve_pull(src, n, t, receiver_gbps=dst.gbps, receiver_free_in_s=max(0.0, dst.free_at - t))
        dst.book(got.end_s, got.nbytes, got.end_s - got.start_s)
        assert (got.start_s, got.end_s) == (pytest.approx(want.start_s), pytest.approx(want.end_s))
    assert (src.free_at, dst.free_at, dst.busy_s) == (joint_src.free_at, joint_dst.free_at, joint_dst.busy_s)
