"""`pdserve demo --endpoint URL --load-engine aiperf`: NVIDIA's aiperf (really run, from
``make load-env``'s venv) drives a running router in front of two mock workers on loopback, with a
real BPE tokenizer on every side, and its per-request export makes the demo's report. The report's
percentiles are checked against aiperf's own aggregate of the same requests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import pytest

from pdserve.loadgen.aiperf_run import find_aiperf
from pdserve.tokenization.testing import build_bpe_tokenizer
from pdserve.worker.testing import start_worker

from .router_proc import start_router

MODEL = "mock-llama"
AIPERF = find_aiperf(os.environ.get("PDSERVE_AIPERF"))

pytestmark = pytest.mark.skipif(
    AIPERF is None and os.environ.get("PDSERVE_LOAD_REQUIRED") != "1",
    reason="aiperf not installed (make load-env; make test sets PDSERVE_LOAD_REQUIRED=1)")


@pytest.fixture
def router_with_tokenizer(tmp_path: Path):
    tok = str(build_bpe_tokenizer(tmp_path / "tok"))
    with ExitStack() as stack:
        # Slow enough that tokens arrive in separate chunks (inter-token gaps are then not all zero).
        workers = [stack.enter_context(start_worker(MODEL, speedup=5.0, tokenizer=tok)) for _ in range(2)]
        url = start_router(stack, tmp_path, [w.url for w in workers], ["--tokenizer", tok])
        yield url, tok


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_aiperf_drives_a_running_router_and_makes_the_same_report(router_with_tokenizer, tmp_path: Path) -> None:
    assert AIPERF is not None, "PDSERVE_LOAD_REQUIRED=1 but no aiperf: run `make load-env`"
    url, tok = router_with_tokenizer
    out = tmp_path / "report"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(Path(__file__).parents[2] / "src"),
                                                                   os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run(
        [sys.executable, "-m", "pdserve.cli", "demo", "--endpoint", url, "--duration", "8", "--rate", "3",
         "--max-output-tokens", "24", "--no-live", "--out", str(out),
         "--load-engine", "aiperf", "--aiperf", AIPERF, "--tokenizer", tok],
        capture_output=True, text=True, timeout=400, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "requests succeeded" in proc.stdout
    # aiperf really ran: its own export is in the report folder, one record per request.
    records = (out / "run" / "load" / "aiperf" / "profile_export.jsonl").read_text().splitlines()
    data = json.loads((out / "timeline.json").read_text())
    summary, samples, engine = data["summary"], data["samples"], data["load_engine_stats"]
    assert data["settings"]["load_engine"] == "aiperf 0.13.0"
    assert summary["requests"] >= 10 and len(records) == summary["requests"]
    assert summary["failed"] == 0 and summary["ttft_p50"] > 0 and summary["itl_p90"] > 0
    # The same numbers as aiperf's own aggregate over the same requests.
    assert engine["request_count"] == summary["requests"]
    for key in ("ttft_p50", "ttft_p90", "itl_p50", "itl_p90"):
        assert summary[key] == pytest.approx(engine[key], rel=1e-6, abs=1e-6), key
    # The timeline starts when aiperf's schedule did (not when aiperf began configuring itself),
    # and counts every request once; pools come from the router's /health.
    assert samples and samples[0]["t"] < 1.5 and samples[-1]["t"] < 8 + 30
    assert all(s["decode_replicas"] == 2 for s in samples)
    assert 0 < max(s["sent_rps"] for s in samples) * 10 <= summary["requests"]
    assert samples[-1]["inflight"] == 0 and samples[-1]["errors"] == 0
    rows = (out / "requests.csv").read_text().splitlines()
    sent_at = [float(r.split(",")[1]) for r in rows[1:]]
    assert len(sent_at) == summary["requests"] and 0 <= min(sent_at) and max(sent_at) < 8 + 2
    md = (out / "summary.md").read_text()
    assert "load's own statistics" not in md and "The load engine's own statistics" in md and url in md


def test_missing_aiperf_is_a_clear_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pdserve.cli", "demo", "--endpoint", "http://127.0.0.1:9", "--duration", "5",
         "--no-live", "--load-engine", "aiperf", "--aiperf", str(tmp_path / "no-such-aiperf"), "--out", str(tmp_path / "r")],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "no aiperf program at" in proc.stderr, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "pdserve.cli", "demo", "--tokenizer", "x", "--duration", "5"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "only apply with --load-engine aiperf" in proc.stderr, proc.stderr
