"""The root conftest.py's marks for `make test`'s two passes (pytest-xdist --dist load, and
the control-plane tests in one process beside it: tools/test_passes.sh)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
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
    script = (ROOT / "tools" / "test_passes.sh").read_text()
    line = next(x for x in script.splitlines() if "-m \"not controlplane\"" in x and " -n " in x)
    assert "--dist load " in line and "loadgroup" not in line
    assert "tools/test_passes.sh" in (ROOT / "Makefile").read_text()


FAKE_PYTHON = """#!/usr/bin/env bash
# stands in for python -m pytest: says which pass it is, exits as the test asks
case "$*" in
  *"not controlplane"*) echo "pass-one ran: $*"; exit "${ONE_RC}" ;;
  *controlplane*) echo "pass-two ran: $*"; exit "${TWO_RC}" ;;
esac
exit 99
"""


@pytest.mark.parametrize("one_rc, two_rc, ok", [(0, 0, True), (1, 0, False), (0, 1, False), (5, 0, False),
                                                (0, 5, False)])
def test_both_passes_run_and_either_failing_fails_make_test(tmp_path: Path, one_rc: int, two_rc: int,
                                                             ok: bool) -> None:
    """Pass 2 runs beside pass 1 (tools/test_passes.sh): both run, pass 2's output is printed,
    and a failure of either, pytest's exit 5 ("no tests ran") included, fails the script."""
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    proc = subprocess.run(["bash", str(ROOT / "tools" / "test_passes.sh"), str(fake), "2", "-k", "x"],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "ONE_RC": str(one_rc), "TWO_RC": str(two_rc), "TMPDIR": str(tmp_path)})
    assert (proc.returncode == 0) is ok, proc.stdout + proc.stderr
    assert "pass-one ran: -m pytest -ra -n 2 --dist load -m not controlplane -k x tests e2e" in proc.stdout
    assert "pass-two ran: -m pytest -ra -m controlplane -k x tests e2e" in proc.stdout
    assert list(tmp_path.glob("pdserve-controlplane-tests.*")) == []  # its log is removed
