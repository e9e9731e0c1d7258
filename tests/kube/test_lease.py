"""Leader election's rules, pure: who may write the Lease, and what they write."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
from kubernetes import client as k8s

from pdserve.kube.api import Kube
from pdserve.kube.errors import KubeError
from pdserve.kube.lease import LeaderElector, LeaseConfig, Record, decide, micro_time, next_spec


def held(by: str, duration: float = 15.0, transitions: int = 0) -> Record:
    return Record(holder=by, duration_s=duration, acquire_time="2026-01-01T00:00:00.000000Z",
                  renew_time="2026-01-01T00:00:05.000000Z", transitions=transitions)


def test_nobody_there_creates() -> None:
    assert decide(None, observed_at=0.0, now=0.0, me="a") == "create"


def test_holder_renews_and_others_wait_until_the_record_is_stale_for_a_full_duration() -> None:
    r = held("a")
    assert decide(r, observed_at=100.0, now=100.0, me="a") == "renew"
    assert decide(r, observed_at=100.0, now=114.9, me="b") == "wait"
    assert decide(r, observed_at=100.0, now=115.0, me="b") == "take"


def test_expiry_is_judged_on_the_followers_own_clock_not_the_holders_timestamps() -> None:
    # renewTime says 2026-01-01 (long ago by any wall clock); the follower only just saw it change.
    assert decide(held("a"), observed_at=1000.0, now=1001.0, me="b") == "wait"


def test_a_released_lease_is_free_at_once() -> None:
    assert decide(held(""), observed_at=0.0, now=0.0, me="b") == "take"


def test_what_gets_written() -> None:
    prev = held("a", transitions=3)
    take = next_spec(prev, "take", "b", 86400.5, 15.0)
    assert take == {"holderIdentity": "b", "leaseDurationSeconds": 15, "acquireTime": "1970-01-02T00:00:00.500000Z",
                    "renewTime": "1970-01-02T00:00:00.500000Z", "leaseTransitions": 4}
    renew = next_spec(held("b", transitions=4), "renew", "b", 86460.0, 15.0)
    assert renew["acquireTime"] == "2026-01-01T00:00:00.000000Z" and renew["leaseTransitions"] == 4
    assert renew["renewTime"] == micro_time(86460.0) == "1970-01-02T00:01:00.000000Z"
    assert next_spec(None, "create", "a", 0.0, 15.0)["leaseTransitions"] == 0


@pytest.mark.parametrize(("d", "r", "t"), [(10, 10, 2), (15, 10, 10), (15, 10, 0)])
def test_timings_must_leave_the_leader_time_to_stop_first(d: float, r: float, t: float) -> None:
    assert LeaseConfig("l", "ns", "a", d, r, t).invalid() is not None


def test_default_timings_are_valid() -> None:
    assert LeaseConfig("l", "ns", "a").invalid() is None


def test_record_from_a_lease_body() -> None:
    body = {"spec": {"holderIdentity": "op-1", "leaseDurationSeconds": 15, "leaseTransitions": 2, "renewTime": "x"}}
    assert Record.from_body(body) == Record("op-1", 15.0, None, "x", 2)
    assert Record.from_body({"spec": {}}) == Record()


def _unreachable_kube() -> Kube:
    """A Kube whose API server refuses connections (as while kube-apiserver restarts)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again on leaving: nothing listens there
    cfg = k8s.Configuration(host=f"http://127.0.0.1:{port}")
    cfg.retries = 0
    return Kube(k8s.ApiClient(cfg), request_timeout_s=2)


async def test_no_answer_from_the_api_server_is_a_transient_kube_error() -> None:
    kube = _unreachable_kube()
    with pytest.raises(KubeError) as err:
        await kube.get("/api/v1/namespaces/default/pods")
    assert err.value.status == 0 and err.value.transient
    assert "no answer from the API server" in str(err.value)


async def test_a_leader_cut_off_from_the_api_server_keeps_trying_until_the_renew_deadline() -> None:
    # The leader holds the Lease, then the API server goes away: keep() must retry and return
    # (leadership lost) after the renew deadline, never die on the first refused connection.
    elector = LeaderElector(_unreachable_kube(), LeaseConfig("l", "ns", "a", duration_s=0.6, renew_deadline_s=0.4, retry_s=0.05))
    elector.last_renewed = time.monotonic()
    t0 = time.monotonic()
    await asyncio.wait_for(elector.keep(), 10)
    assert time.monotonic() - t0 >= 0.4
    assert elector.last_renewed is None
