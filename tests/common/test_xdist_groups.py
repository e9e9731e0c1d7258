"""The root conftest.py's grouping for `make test`'s parallel run (pytest-xdist --dist loadgroup)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _root_conftest() -> Any:
    spec = importlib.util.spec_from_file_location("pdserve_root_conftest", ROOT / "conftest.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class FakeItem:
    def __init__(self, nodeid: str, fixturenames: tuple[str, ...] = (), marks: tuple[str, ...] = ()) -> None:
        self.nodeid, self.fixturenames, self._marks = nodeid, fixturenames, marks
        self.added: list[pytest.MarkDecorator] = []

    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self._marks else None

    def add_marker(self, mark: pytest.MarkDecorator) -> None:
        self.added.append(mark)


def test_every_control_plane_test_shares_one_group_and_goes_first() -> None:
    conftest = _root_conftest()
    items = [
        FakeItem("tests/sim/test_a.py::test_one"),
        FakeItem("tests/operator/test_op.py::test_x", fixturenames=("admin", "kube_cluster")),
        FakeItem("tests/sim/test_a.py::test_two"),
        # asks for the cluster at run time (request.getfixturevalue), marked instead
        FakeItem("e2e/test_mock_disagg.py::test_y", marks=("controlplane",)),
        FakeItem("tests/router/test_b.py::test_three[lean]"),
    ]
    conftest.pytest_collection_modifyitems(items)
    groups = [(it.nodeid, it.added[0].args[0]) for it in items]
    assert groups == [
        ("tests/operator/test_op.py::test_x", "controlplane"),
        ("e2e/test_mock_disagg.py::test_y", "controlplane"),
        ("tests/sim/test_a.py::test_one", "tests/sim/test_a.py"),
        ("tests/sim/test_a.py::test_two", "tests/sim/test_a.py"),
        ("tests/router/test_b.py::test_three[lean]", "tests/router/test_b.py"),
    ]
    assert all(it.added[0].name == "xdist_group" for it in items)
