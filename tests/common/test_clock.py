"""The one clock protocol: wall and virtual clocks both satisfy it and behave as documented."""

from __future__ import annotations

import ast
import time
from datetime import UTC
from pathlib import Path

import pytest

import pdserve
from pdserve.common.clock import WALL, Clock, VirtualClock, WallClock, rfc3339, utc


def test_both_clocks_satisfy_the_protocol() -> None:
    assert isinstance(WallClock(), Clock)
    assert isinstance(VirtualClock(), Clock)
    assert isinstance(WALL, Clock)


def test_wall_clock_reads_the_machine() -> None:
    before = time.time()
    now = WALL.now()
    after = time.time()
    assert before <= now <= after
    m1 = WALL.monotonic()
    m2 = WALL.monotonic()
    assert m2 >= m1


def test_virtual_clock_moves_only_when_told() -> None:
    c = VirtualClock(100.0)
    assert c.now() == 100.0 and c.monotonic() == 100.0
    time.sleep(0.01)
    assert c.now() == 100.0
    assert c.advance(2.5) == 102.5
    assert c.now() == 102.5 and c.monotonic() == 102.5
    c.set(200.0)
    assert c.now() == 200.0


def test_virtual_clock_refuses_to_go_backwards() -> None:
    c = VirtualClock(10.0)
    with pytest.raises(ValueError, match="backwards"):
        c.advance(-1)
    with pytest.raises(ValueError, match="backwards"):
        c.set(5.0)
    assert c.now() == 10.0


def test_utc_is_an_aware_datetime_of_now() -> None:
    d = utc(VirtualClock(86400.0))
    assert d.tzinfo == UTC
    assert (d.year, d.month, d.day, d.hour) == (1970, 1, 2, 0)


def test_rfc3339_is_what_kubernetes_writes() -> None:
    assert rfc3339(86400.0 + 3661.7) == "1970-01-02T01:01:01Z"


# Code that decides (or that a simulation must be able to replay) reads time only through an injected
# Clock or a ``now`` argument; direct reads are left to latency measurement, load generators and I/O
# deadlines (docs/internals.md, "Time").
DECIDING = ("router/core", "router/policies", "operator", "kube", "sim", "common/kvlink.py",
            "planner/core", "planner/shell/loop.py", "planner/hosting",
            "worker/engine.py", "worker/runner.py", "worker/server.py", "worker/nixl.py")
_READS = {("time", "time"), ("time", "monotonic"), ("time", "perf_counter"), ("time", "time_ns"),
          ("time", "monotonic_ns"), ("datetime", "now"), ("datetime", "utcnow"), ("date", "today")}


def _clock_reads(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in ("time", "datetime"):
            found += [f"{path}:{node.lineno} from {node.module} import {a.name}" for a in node.names
                      if (node.module, a.name) in _READS]
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and (node.func.value.id, node.func.attr) in _READS):
            found.append(f"{path}:{node.lineno} {node.func.value.id}.{node.func.attr}()")
    return found


def test_deciding_code_reads_no_clock_directly() -> None:
    root = Path(pdserve.__file__).parent
    files = [f for d in DECIDING for f in ([root / d] if d.endswith(".py") else sorted((root / d).rglob("*.py")))]
    assert len(files) > 30  # the list names real modules
    assert [r for f in files for r in _clock_reads(f)] == []
