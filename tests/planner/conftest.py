"""Shared fixtures: the analytic capacity profile (capacity_profiles.py); the planner CLI against a fake vLLM."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pdserve.planner.core.profile import CapacityProfile

from capacity_profiles import queue_profile


@pytest.fixture
def profile() -> CapacityProfile:
    return queue_profile()


@pytest.fixture
def planner_cli(tmp_path: Path) -> Iterator[Callable[..., list[dict]]]:
    """``pdserve planner run --actuator static`` as a subprocess, scraping a real /metrics endpoint
    (``FakeVllm``) that has finished 10 requests; ``run(ticks, *flags)`` asserts exit 0 and returns
    the decision rows it wrote (constant predictor, 0.3 s interval)."""
    from fake_vllm_metrics import FakeVllm

    fake = FakeVllm()
    fake.finish(10, 500, 50, 0.1, 0.01)

    def run(ticks: int, *flags: str) -> list[dict]:
        out = tmp_path / "decisions.jsonl"
        proc = subprocess.run(
            [sys.executable, "-m", "pdserve.cli", "planner", "run", "--actuator", "static", "--scrape", fake.url,
             "--interval", "0.3", "--max-ticks", str(ticks), "--decisions-out", str(out), "--predictor", "constant",
             *flags], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return [json.loads(line) for line in out.read_text().splitlines()]

    try:
        yield run
    finally:
        fake.close()
