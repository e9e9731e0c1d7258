"""Shared test configuration: makes the e2e harness importable and loads its fixtures."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "e2e") not in sys.path:
    sys.path.insert(0, str(ROOT / "e2e"))

pytest_plugins = ["controlplane.fixtures"] if (ROOT / "e2e" / "controlplane" / "fixtures.py").exists() else []
