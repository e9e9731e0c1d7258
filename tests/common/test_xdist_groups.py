"""The root conftest.py's marks for `make test`'s two passes (pytest-xdist --dist load, then
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


def test_a_cluster_user_is_a_controlplane_test_and_nothing_else_is_marked() -> None:
    """Only the pass split: no xdist group marks, which pytest-xdist 3.8 cannot honour under pytest 9.2
    (see the root conftest), so none pretends to keep a module on one worker."""
    items = [
        FakeItem("tests/sim/test_a.py::test_one"),
        FakeItem("tests/operator/test_op.py::test_x", fixturenames=("admin", "kube_cluster")),
        FakeItem("e2e/test_mock_disagg.py::test_y", marks=("controlplane",)),
        FakeItem("tests/router/test_b.py::test_three[lean]"),
    ]
    _root_conftest().pytest_collection_modifyitems(items)
    assert [(it.nodeid, it.marks) for it in items] == [
        ("tests/sim/test_a.py::test_one", []),
        ("tests/operator/test_op.py::test_x", ["controlplane"]),
        ("e2e/test_mock_disagg.py::test_y", ["controlplane"]),
        ("tests/router/test_b.py::test_three[lean]", []),
    ]


def test_the_first_pass_does_not_rely_on_xdist_groups() -> None:
    """make test's parallel pass names a distribution that needs no group marks."""
    makefile = (ROOT / "Makefile").read_text()
    line = next(x for x in makefile.splitlines() if '-m "not controlplane"' in x and " -n " in x)
    assert "--dist load " in line and "loadgroup" not in line
