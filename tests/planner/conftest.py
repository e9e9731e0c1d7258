"""Shared fixtures: an analytic capacity profile with known numbers; the planner CLI against a fake vLLM."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pdserve.planner.core.profile import CapacityProfile

PREFILL_TOK_S = 10_000.0  # one prefill replica's prompt-token throughput at saturation


def queue_profile(prefill_tok_s: float = PREFILL_TOK_S) -> CapacityProfile:
    """Prefill: an M/D/1 queue per ISL; decode: ITL = 10 ms + 0.2 ms x concurrency x context/1k."""
    pre = []
    for isl in (64, 256, 1024, 4096, 16384):
        service = isl / prefill_tok_s
        for rho in (0.1, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95):
            wait = rho * service / (2 * (1 - rho))
            pre.append({"isl": isl, "throughputTokensPerS": rho * prefill_tok_s,
                        "ttftMeanMs": 1000 * (service + wait), "ttftTailMs": 1000 * (service + 4 * wait)})
    dec = []
    for ctx in (128, 1024, 4096, 16384):
        for c in (1, 8, 32, 64, 128, 256):
            itl = 0.010 + 0.0002 * c * ctx / 1000
            dec.append({"context": ctx, "concurrency": c, "throughputTokensPerS": c / itl,
                        "itlMeanMs": 1000 * itl, "itlTailMs": 1000 * itl * 1.05})
    return CapacityProfile.model_validate({
        "version": 1, "model": "test", "hardware": "analytic", "source": "tests",
        "prefill": {"tensorParallelSize": 1, "points": pre},
        "decode": {"tensorParallelSize": 1, "points": dec},
    })


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
