"""Suite-wide scheduling for ``make test``, which runs the suite in two passes:

1. every test but the control-plane ones in parallel (pytest-xdist, ``--dist loadgroup``,
   ``-m "not controlplane"``): most of the suite waits (on servers starting, a subprocess),
   so two workers finish it in a little over half the time of one;
2. the control-plane tests (``-m controlplane``) in one process, alone, as before.

Why the control-plane tests do not run beside the rest: kwok gives their pods loopback
addresses (127.64.<node>.x) on which the PodRunner starts each pod's process on its real
ports (8000, 8080, 5557). Run beside other tests, two parallel tries failed on "address
already in use" there (a second cluster the first time, something else binding those ports
the second), and those ports are the pods' contract, so they cannot be made free ones.

Each test is marked here: ``controlplane`` also on every test that uses ``kube_cluster``
(so the second pass cannot miss one that forgot the mark), and, for the first pass, an
xdist group of its module, so a module's fixtures (routers, workers, Prometheus) start once,
as in a serial run.
"""

from __future__ import annotations

import pytest


# tryfirst: before the mark plugin deselects by -m, and before xdist reads the groups (it appends
# the group to each test's id).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "kube_cluster" in getattr(item, "fixturenames", ()) and not item.get_closest_marker("controlplane"):
            item.add_marker(pytest.mark.controlplane)
        item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
