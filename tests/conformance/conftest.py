"""Conformance tier: vLLM's own code judges pdserve (see conformance/README.md)."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conformance.vllm_env import CACHE

COUNTS_FILE = Path(os.environ.get("PDSERVE_CONFORMANCE_COUNTS", CACHE / "counts.json"))


class Counts:
    """How many items each check compared, per vLLM version (for conformance/RESULTS.md)."""

    def __init__(self) -> None:
        self.data: dict[str, dict[str, dict[str, int]]] = {}

    def add(self, check: str, version: str, n: int, mismatched: int = 0) -> None:
        """Record ``n`` items compared, ``mismatched`` of them differing from vLLM (call before asserting)."""
        assert n > 0, f"{check} on vLLM {version} compared nothing"
        per = self.data.setdefault(check, {}).setdefault(version, {"compared": 0, "mismatched": 0})
        per["compared"] += n
        per["mismatched"] += mismatched


@pytest.fixture(scope="session")
def counts() -> Iterator[Counts]:
    c = Counts()
    yield c
    if c.data:
        COUNTS_FILE.parent.mkdir(parents=True, exist_ok=True)
        # Each pytest-xdist worker has its own session: they merge into the file one at a time.
        with open(COUNTS_FILE.with_name(COUNTS_FILE.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            text = COUNTS_FILE.read_text() if COUNTS_FILE.exists() else ""
            old = json.loads(text) if text.strip() else {}
            for check, per in c.data.items():
                old.setdefault(check, {}).update(per)
            COUNTS_FILE.write_text(json.dumps(old, indent=1, sort_keys=True) + "\n")
