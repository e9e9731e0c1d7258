"""Suite-wide marks for ``make test``, which runs the suite in two passes:

1. every test but the control-plane ones in parallel (pytest-xdist, ``--dist load``,
   ``-m "not controlplane"``): most of the suite waits (on servers starting, a subprocess),
   so two workers finish it in a little over half the time of one;
2. the control-plane tests (``-m controlplane``) in one process, beside the first
   (``tools/test_passes.sh``: they mostly wait on the control plane; 991 s for both on the
   2-CPU dev box against 1,272 s one after the other, session 16).

Why the control-plane tests are not spread over the xdist workers with the rest: kwok gives their pods loopback
addresses (127.64.<node>.x) on which the PodRunner starts each pod's process on its real
ports (8000, 8080, 5557), so two clusters at once (one per worker: ``kube_cluster`` is
session-scoped) collide there. Keeping them on one worker would need xdist's groups, and
those do nothing here: pytest-xdist 3.8's ``loadgroup`` tags a test's group onto
``Item._nodeid``, which pytest 9.2's ``nodeid`` no longer reads (it reads ``_id``), so the
controller sees untagged ids and spreads a group's tests over the workers. That is what
made session 14's one-pass tries fail (``e2e/portholders.py`` named the holder in a rerun,
session 15: the other worker's cluster's pod processes on the same addresses).

``controlplane`` is also put on every test that uses ``kube_cluster``, so the second pass
cannot miss one that forgot the mark.
"""

from __future__ import annotations

import pytest


# tryfirst: before the mark plugin deselects by -m.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "kube_cluster" in getattr(item, "fixturenames", ()) and not item.get_closest_marker("controlplane"):
            item.add_marker(pytest.mark.controlplane)
