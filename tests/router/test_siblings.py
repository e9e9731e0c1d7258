"""``/health`` under ``pdserve router --processes N`` speaks for the whole set (siblings.py): ok only once every
process's discovery lists a decode worker, since the kernel may hand the next connection to any of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from pdserve.router.shell import endpoints
from pdserve.router.shell.lifecycle import static_endpoints
from pdserve.router.shell.siblings import ENV, Siblings
from pdserve.router.shell.state import RouterState
from tests.router.conftest import router_config


def test_the_set_is_ready_when_each_marker_lists_a_decode_worker(tmp_path: Path) -> None:
    a, b = Siblings(tmp_path / "ready", 2, "101"), Siblings(tmp_path / "ready", 2, "102")
    assert a.not_ready() == "0 of 2 router processes have a decode worker"  # no folder yet
    a.mark(1)
    b.mark(0)  # b's discovery has no decode worker
    assert a.not_ready() == b.not_ready() == "1 of 2 router processes have a decode worker"
    b.mark(3)
    assert a.not_ready() is None and b.not_ready() is None
    a.mark(0)  # a's workers all went away
    assert b.not_ready() == "1 of 2 router processes have a decode worker"


def test_the_set_comes_from_the_supervisors_variable(tmp_path: Path) -> None:
    assert Siblings.from_env({}) is None  # one process alone: its own /health is the set's
    s = Siblings.from_env({ENV: Siblings.env_value(tmp_path, 4)})
    assert s is not None and s.folder == tmp_path and s.count == 4
    for bad in ("4", f"{tmp_path}:", f"{tmp_path}:zero", f"{tmp_path}:0"):
        with pytest.raises(ValueError, match=ENV):
            Siblings.from_env({ENV: bad})


def _state(folder: Path, me: str) -> RouterState:
    st = RouterState(router_config(decode=["http://d:1"]))
    st.siblings = Siblings(folder, 2, me)
    return st


def test_health_is_503_until_every_process_has_read_its_workers(tmp_path: Path) -> None:
    # Session 40's CI: process A had read the discovery file and answered /health 200 while process B had not, and B
    # answered the demo's first request 503 "no worker available".
    a, b = _state(tmp_path, "a"), _state(tmp_path, "b")
    a.apply_endpoints(static_endpoints(a.cfg))
    reply = endpoints.health(a)
    assert reply.status == 503 and b"1 of 2 router processes have a decode worker" in reply.body
    b.apply_endpoints(static_endpoints(b.cfg))
    assert endpoints.health(a).status == 200 and endpoints.health(b).status == 200


def test_a_lone_process_answers_for_itself() -> None:
    st = RouterState(router_config(decode=["http://d:1"]))
    assert st.siblings is None
    st.apply_endpoints(static_endpoints(st.cfg))
    assert endpoints.health(st).status == 200


def test_the_marker_is_written_only_when_the_count_changes(tmp_path: Path) -> None:
    # A Kubernetes watch calls apply_endpoints on every pod event; most leave the decode count as it was.
    st = _state(tmp_path, "a")
    st.apply_endpoints(static_endpoints(st.cfg))
    marker = tmp_path / "a"
    assert marker.read_text() == "1"
    marker.write_text("stale")  # stands in for "not rewritten": the same count again must leave it alone
    st.apply_endpoints(static_endpoints(st.cfg))
    assert marker.read_text() == "stale"
    assert st.siblings is not None
    st.siblings.mark(2)  # a changed count is written
    assert marker.read_text() == "2"
