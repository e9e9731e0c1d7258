"""Suite-wide scheduling for ``make test``'s parallel run (pytest-xdist, ``--dist loadgroup``).

Most of the suite waits (on servers starting, a control plane reconciling, a subprocess), so
two workers finish it in a little over half the time of one. What may not be split between
workers, each test gets as its xdist group:

- every test that uses a local control plane (``kube_cluster``, also when it asks for it at
  run time, as e2e does: those carry the ``controlplane`` mark): one group, so one worker
  starts one cluster. Two clusters side by side would also be two PodRunners giving kwok's
  pods the same loopback addresses and ports (a first parallel run failed on exactly that);
- every other test: its module, so a module's fixtures (routers, workers, Prometheus) start
  once, as in a serial run. (The conformance tier's session fixture, which every worker has,
  merges its counts into one file under a lock.)

The control-plane group is the longest, so it is moved to the front (a stable sort: the order
within it, and among the rest, is the collection order) and starts at once instead of last.
Without xdist the marks do nothing and only that order changes.
"""

from __future__ import annotations

import pytest

CONTROLPLANE = "controlplane"


def xdist_group(item: pytest.Item) -> str:
    if "kube_cluster" in getattr(item, "fixturenames", ()) or item.get_closest_marker("controlplane"):
        return CONTROLPLANE
    return item.nodeid.split("::", 1)[0]


# tryfirst: xdist's own hook reads the marks (it appends the group to each test's id).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    groups = {id(item): xdist_group(item) for item in items}
    items.sort(key=lambda item: groups[id(item)] != CONTROLPLANE)
    for item in items:
        item.add_marker(pytest.mark.xdist_group(groups[id(item)]))
