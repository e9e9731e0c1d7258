"""The root conftest.py's marks for `make test`'s two passes (pytest-xdist --dist loadgroup, then
the control-plane tests alone)."""

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
        self.nodeid, self.fixturenames = nodeid, fixturenames
        self.marks = list(marks)

    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self.marks else None

    def add_marker(self, mark: pytest.MarkDecorator) -> None:
        self.marks.append(mark.name if mark.name != "xdist_group" else f"xdist_group:{mark.args[0]}")


def test_a_cluster_user_is_a_controlplane_test_and_each_module_is_one_group() -> None:
    items = [
        FakeItem("tests/sim/test_a.py::test_one"),
        FakeItem("tests/operator/test_op.py::test_x", fixturenames=("admin", "kube_cluster")),
        FakeItem("e2e/test_mock_disagg.py::test_y", marks=("controlplane",)),
        FakeItem("tests/router/test_b.py::test_three[lean]"),
    ]
    _root_conftest().pytest_collection_modifyitems(items)
    assert [(it.nodeid, it.marks) for it in items] == [
        ("tests/sim/test_a.py::test_one", ["xdist_group:tests/sim/test_a.py"]),
        ("tests/operator/test_op.py::test_x", ["controlplane", "xdist_group:tests/operator/test_op.py"]),
        ("e2e/test_mock_disagg.py::test_y", ["controlplane", "xdist_group:e2e/test_mock_disagg.py"]),
        ("tests/router/test_b.py::test_three[lean]", ["xdist_group:tests/router/test_b.py"]),
    ]
