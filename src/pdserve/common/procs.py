"""Stopping a child started in its own process group (``start_new_session=True``)."""

from __future__ import annotations

import os
import signal
import subprocess


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    """SIGTERM the child's group so it can drain, SIGKILL the group if it outlives ``grace_s``.

    The whole group, not just the child: a router or worker may have started helpers
    (``--processes N``, a planner's workers) that must not outlive it."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)
    except ProcessLookupError:
        pass
