"""e2e fixtures: a Kubernetes cluster (the local control plane, or any KUBECONFIG), a
real Prometheus, and the PodRunner that makes kwok's pods serve."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

# Loaded here too so that `pytest e2e` works on its own (registering twice is a no-op).
pytest_plugins = ["controlplane.fixtures"]
